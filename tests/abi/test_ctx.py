"""bpfdsl.abi.ctx against the kernel: every context member's offset and size as the UAPI
header on this machine (/usr/include/linux/bpf.h, linux-libc-dev) gives them, compiled
with offsetof/sizeof; members newer than that header against the running kernel's BTF;
and the access rules against the kernel verifier (BPF_PROG_LOAD of one load or store)."""

from __future__ import annotations

import errno
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.ctx import BPF_SOCK_OPS, CTX_STRUCTS, SK_MSG_MD, XDP_MD, CtxStruct, valid_access
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.syscall import BpfError

HEADER = Path("/usr/include/linux/bpf.h")
VERSION_H = Path("/usr/include/linux/version.h")
CC = shutil.which("gcc") or shutil.which("clang-19") or shutil.which("cc")


def _header_members(name: str) -> list[str]:
    """Member names of ``struct name`` in the header text, anonymous-union members included
    (``__bpf_md_ptr(type, name)`` gives ``name``)."""
    text = HEADER.read_text()
    m = re.search(r"^struct " + name + r" \{\n(.*?)^\};", text, re.S | re.M)
    assert m, f"struct {name} not in {HEADER}"
    body = re.sub(r"/\*.*?\*/", "", m[1], flags=re.S)
    out = []
    for line in body.splitlines():
        line = line.strip()
        if (p := re.match(r"__bpf_md_ptr\([^,]+,\s*(\w+)\);", line)) is not None:
            out.append(p[1])
        elif (p := re.match(r"__u(?:8|16|32|64)\s+(\w+)(?:\[\d+\])?;", line)) is not None:
            out.append(p[1])
    return out


def _header_version() -> tuple[int, int]:
    code = int(re.search(r"LINUX_VERSION_CODE (\d+)", VERSION_H.read_text())[1])
    return code >> 16, (code >> 8) & 0xFF


def _compiled_layout(tmp_path: Path) -> dict[str, dict[str, tuple[int, int]]]:
    """{struct: {member or "sizeof": (offset, size)}} printed by a C program built from
    the header."""
    lines = ["#include <stdio.h>", "#include <stddef.h>", "#include <linux/bpf.h>"]
    lines.append("int main(void) {")
    for s in CTX_STRUCTS.values():
        lines.append(f'printf("{s.name} sizeof %zu %zu\\n", (size_t)0, sizeof(struct {s.name}));')
        for m in _header_members(s.name):
            lines.append(
                f'printf("{s.name} {m} %zu %zu\\n", offsetof(struct {s.name}, {m}),'
                f" sizeof(((struct {s.name} *)0)->{m}));"
            )
    lines += ["return 0;", "}"]
    src = tmp_path / "ctx_layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "ctx_layout"
    subprocess.run([CC, "-o", str(exe), str(src)], check=True, timeout=120)
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for line in subprocess.run(
        [str(exe)], check=True, capture_output=True, text=True
    ).stdout.splitlines():
        s, m, off, size = line.split()
        out.setdefault(s, {})[m] = (int(off), int(size))
    return out


@pytest.mark.skipif(
    not HEADER.exists() or CC is None, reason="needs linux-libc-dev and a C compiler"
)
def test_ctx_table_matches_uapi_header(tmp_path: Path) -> None:
    compiled = _compiled_layout(tmp_path)
    version = _header_version()
    for s in CTX_STRUCTS.values():
        got = dict(compiled[s.name])
        _, size = got.pop("sizeof")
        assert got, s.name
        for m, (off, msize) in got.items():
            assert m in s, f"{s.name}.{m} is in {HEADER} but not in abi.ctx"
            assert (s[m].off, s[m].size) == (off, msize), f"{s.name}.{m}"
            assert s[m].since <= version, f"{s.name}.{m}: since {s[m].since}, header {version}"
        newer = [f.name for f in s.fields if f.name not in got]
        for name in newer:  # members this header predates: added after its kernel
            assert s[name].since > version, f"{s.name}.{name} missing from {HEADER}"
        if not newer:
            assert s.size == size, s.name
        else:
            assert s.size >= size and s[newer[0]].off >= size, s.name


def test_ctx_table_matches_running_kernel_btf() -> None:
    vmlinux = Path("/sys/kernel/btf/vmlinux")
    if shutil.which("bpftool") is None or not vmlinux.exists():
        pytest.skip("needs bpftool and /sys/kernel/btf/vmlinux")
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(vmlinux)], check=True,
                         capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    types = json.loads(out)["types"]
    structs = {t["name"]: t for t in types if t["kind"] == "STRUCT"}
    by_id = {t["id"]: t for t in types}
    for s in CTX_STRUCTS.values():
        k = structs[s.name]
        assert k["size"] == s.size, s.name
        offs: dict[str, int] = {}
        for mem in k["members"]:
            t = by_id.get(mem["type_id"], {})
            if mem["name"] == "(anon)" and t.get("kind") == "UNION":  # union { args; reply }
                offs |= {u["name"]: mem["bits_offset"] // 8 for u in t["members"]}
            elif mem["name"] == "(anon)":
                continue
            else:
                offs[mem["name"]] = mem["bits_offset"] // 8
        # __bpf_md_ptr members are anonymous unions of (pointer, __u64 :64) in BTF
        ptrs = sorted(f.off for f in s.fields if f.ctype == "__bpf_md_ptr")
        anon = sorted(
            m["bits_offset"] // 8
            for m in k["members"]
            if m["name"] == "(anon)"
            and not any(u["name"] == "args" for u in by_id[m["type_id"]].get("members", []))
        )
        named = {f.name: f.off for f in s.fields if f.ctype != "__bpf_md_ptr"}
        for name, off in named.items():
            assert offs.get(name) == off, f"{s.name}.{name}"
        assert set(offs) - set(named) <= {f.name for f in s.fields}, s.name
        assert set(ptrs) <= set(anon) | set(offs.values()), s.name


def test_rights_follow_the_kernel_functions() -> None:
    # xdp_is_valid_access: egress_ifindex only in devmap programs, 4-byte loads only
    assert valid_access(XDP_MD, 20, 4, False, AttachType.XDP) is None
    assert valid_access(XDP_MD, 20, 4, False, AttachType.XDP_DEVMAP).name == "egress_ifindex"
    assert valid_access(XDP_MD, 16, 2, False, AttachType.XDP) is None
    assert valid_access(XDP_MD, 16, 4, True, AttachType.XDP) is None  # offloaded only
    # sk_msg_is_valid_access: pointers as 8-byte loads at their own offset only
    assert valid_access(SK_MSG_MD, 72, 8, False, None).name == "sk"
    assert valid_access(SK_MSG_MD, 76, 4, False, None) is None
    assert valid_access(SK_MSG_MD, 32, 4, False, None).name == "remote_ip6"
    # sock_ops_is_valid_access: writes to reply and sk_txhash; the union's bytes 8..20
    # read only; skb_tcp_flags narrower
    assert valid_access(BPF_SOCK_OPS, 4, 4, True, None).name == "reply"
    assert valid_access(BPF_SOCK_OPS, 8, 4, True, None) is None
    assert valid_access(BPF_SOCK_OPS, 164, 4, True, None).name == "sk_txhash"
    assert valid_access(BPF_SOCK_OPS, 212, 1, False, None).name == "skb_tcp_flags"
    assert valid_access(BPF_SOCK_OPS, 213, 1, False, None) is None  # case offsetof: one byte
    assert valid_access(BPF_SOCK_OPS, 188, 4, False, None) is None
    assert valid_access(BPF_SOCK_OPS, 216, 8, False, None).name == "skb_hwtstamp"
    assert valid_access(BPF_SOCK_OPS, 220, 4, False, None) is None


_KINDS: list[tuple[CtxStruct, ProgramType, AttachType | None]] = [
    (XDP_MD, ProgramType.XDP, None),
    (XDP_MD, ProgramType.XDP, AttachType.XDP_DEVMAP),
    (SK_MSG_MD, ProgramType.SK_MSG, None),
    (BPF_SOCK_OPS, ProgramType.SOCK_OPS, None),
]


def _accesses(s: CtxStruct) -> list[tuple[int, int, bool]]:
    """Every member's first bytes with each width, read and write, plus one off the end."""
    out = set()
    for f in s.fields:
        for _name, off in f.elements():
            for size in (1, 2, 4, 8):
                for d in range(5):
                    out |= {(off + d, size, False), (off + d, size, True)}
    out.add((s.size, 4, False))
    return sorted(out)


@pytest.mark.kernel
@pytest.mark.parametrize("s,pt,at", _KINDS, ids=lambda v: getattr(v, "name", str(v)))
def test_rights_agree_with_the_kernel_verifier(
    s: CtxStruct, pt: ProgramType, at: AttachType | None
) -> None:
    """One BPF_PROG_LOAD per access: ``r0 = *(uN *)(r1 + off); r0 = 0; exit`` or
    ``r2 = 0; *(uN *)(r1 + off) = r2`` (BPF_ST into ctx is refused before the ctx rules);
    the kernel accepts exactly the accesses the table allows."""
    wrong = []
    for off, size, write in _accesses(s):
        if off % size:
            continue  # misaligned: refused by both before the ctx rules
        if write:
            body = [I.mov64_imm(2, 0), I.stx_mem(size, 1, 2, off)]
        else:
            body = [I.ldx_mem(size, 0, 1, off)]
        code = I.encode([*body, I.mov64_imm(0, 0), I.exit_()])
        want = valid_access(s, off, size, write, at) is not None
        try:
            fd, _ = S.prog_load(pt, code, "GPL", expected_attach_type=int(at or 0))
            fd.close()
            ok = True
        except BpfError as e:
            assert e.errno in (errno.EACCES, errno.EINVAL), (off, size, write, e)
            ok = False
        if ok != want:
            wrong.append((off, size, "write" if write else "read", "kernel", ok))
    assert not wrong, wrong
