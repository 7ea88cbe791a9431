"""Checker cases from tests/checker/cases.txt: each program's verdict and message.

Every case is a small program written with bpfdsl.abi.insn constructors; the expected
verdict and message code come from the kernel's rules.  With a usable bpf() (root) the
same programs are loaded with BPF_PROG_LOAD and must get the same verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bpfdsl.abi import flags, limits, opcodes
from bpfdsl.abi import insn as I
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ALU64, BPF_MOV, BPF_X
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import CheckOptions, DataMap, check_insns
from bpfdsl.checker.env import MapRef
from bpfdsl.obj.maps import MapSpec

CASES = Path(__file__).parent / "cases.txt"
KINDS = {
    "xdp": (ProgramType.XDP, AttachType.XDP),
    "xdp_devmap": (ProgramType.XDP, AttachType.XDP_DEVMAP),
    "sk_msg": (ProgramType.SK_MSG, AttachType.SK_MSG_VERDICT),
    "sock_ops": (ProgramType.SOCK_OPS, AttachType.CGROUP_SOCK_OPS),
}
MAPS = {
    "hash": MapSpec("hash", MapType.HASH, 4, 8, 16),
    "array": MapSpec("array", MapType.ARRAY, 4, 16, 4),
    "xsks": MapSpec("xsks", MapType.XSKMAP, 4, 4, 4),
    "devmap": MapSpec("devmap", MapType.DEVMAP, 4, 4, 4),
    "cpumap": MapSpec("cpumap", MapType.CPUMAP, 4, 4, 1),
    "sockhash": MapSpec("sockhash", MapType.SOCKHASH, 12, 8, 16),
    "rodata": DataMap(".rodata", (7).to_bytes(4, "little") + bytes(4), readonly=True),
}


@dataclass
class Case:
    name: str
    kind: str
    expect: str
    insns: list = field(default_factory=list)
    refs: dict = field(default_factory=dict)


def load_cases() -> list[Case]:
    cases: list[Case] = []
    ns = {k: getattr(I, k) for k in dir(I) if not k.startswith("_")}
    for mod in (opcodes, flags, limits):
        ns.update({k: getattr(mod, k) for k in dir(mod) if k.startswith("BPF_")})
    for raw in CASES.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("=="):
            name, kind, expect = (p.strip() for p in line[2:].split("|"))
            cases.append(Case(name, kind, expect))
            continue
        c = cases[-1]

        def lmap(dst, name, c=c):
            c.refs[len(c.insns)] = MapRef(MAPS[name], 0 if name == "rodata" else None)
            return I.ld_imm64(dst, 0)

        c.insns.append(eval(line, {**ns, "lmap": lmap}))  # test data
    return cases


ALL = load_cases()


@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_check_case(case: Case):
    pt, at = KINDS[case.kind]
    res = check_insns(case.insns, pt, at, map_refs=case.refs, name=case.name)
    if case.expect.startswith("ok"):
        assert res.ok, [e.message for e in res.errors]
        want_warn = case.expect.split("warn:")[1] if "warn:" in case.expect else None
        assert [w.code for w in res.warnings] == ([want_warn] if want_warn else [])
        return
    code, _, text = case.expect.removeprefix("error:").partition(" ")
    assert not res.ok, f"{case.name}: accepted"
    err = res.errors[0]
    assert err.code == code, err.message
    assert text in err.message
    assert err.insn_text and err.explain  # names the instruction and says what to do


@pytest.fixture(scope="module")
def kernel_maps():
    from bpfdsl.kernel import syscall as S

    fds = {}
    try:
        for name, m in MAPS.items():
            if isinstance(m, DataMap):
                fd = S.map_create(MapType.ARRAY, 4, len(m.data), 1, map_flags=m.map_flags)
                S.map_update(fd, bytes(4), m.data)
                S.map_freeze(fd)
            else:
                fd = S.map_create(m.map_type, m.key_size, m.value_size, m.max_entries)
            fds[name] = fd
        yield fds
    finally:
        for fd in fds.values():
            fd.close()


@pytest.mark.kernel
@pytest.mark.parametrize("case", ALL, ids=[c.name for c in ALL])
def test_check_case_agrees_with_kernel(case: Case, kernel_maps):
    from bpfdsl.kernel import syscall as S

    pt, at = KINDS[case.kind]
    ins = list(case.insns)
    for idx, ref in case.refs.items():
        name = next(k for k, v in MAPS.items() if v is ref.map)
        fd = int(kernel_maps[name])
        if ref.value_off is None:
            ins[idx] = I.ld_map_fd(ins[idx].dst, fd)
        else:
            ins[idx] = I.ld_map_value(ins[idx].dst, fd, ref.value_off)
    try:
        fd, _ = S.prog_load(pt, I.encode(ins), "GPL", expected_attach_type=at, log_level=1)
        fd.close()
        kernel_ok, log = True, ""
    except S.BpfError as e:
        kernel_ok, log = False, e.log
    ours = check_insns(case.insns, pt, at, map_refs=case.refs).ok
    assert ours == kernel_ok, (
        f"checker {'accepts' if ours else 'rejects'}; kernel log:\n{log[-600:]}"
    )


def _case(name: str) -> Case:
    return next(c for c in ALL if c.name == name)


def test_check_b10_xsk_lookup_needs_5_3_redirect_does_not():
    look = _case("b10_xsk_lookup_queue_id")
    pt, at = KINDS["xdp"]
    old = check_insns(look.insns, pt, at, map_refs=look.refs, options=CheckOptions(kernel=(5, 2)))
    assert not old.ok
    e = old.errors[0]
    assert e.code == "kernel-version" and "xskmap needs Linux 5.3" in e.message
    assert "call bpf_map_lookup_elem" in e.insn_text
    assert check_insns(
        look.insns, pt, at, map_refs=look.refs, options=CheckOptions(kernel=(5, 3))
    ).ok
    redirect = [
        I.ldx_mem(4, 2, 1, 16),
        I.ld_imm64(1, 0),
        I.mov64_imm(3, 2),
        I.call(51),
        I.exit_(),
    ]
    refs = {1: MapRef(MAPS["xsks"])}
    assert check_insns(redirect, pt, at, map_refs=refs, options=CheckOptions(kernel=(5, 2))).ok


def test_check_loops_and_v4_insns_need_their_kernel():
    loop = _case("bounded_loop")
    pt, at = KINDS["xdp"]
    res = check_insns(loop.insns, pt, at, options=CheckOptions(kernel=(5, 2)))
    assert (
        not res.ok
        and "a loop (back-edge from insn 2 to 1) needs Linux 5.3" in res.errors[0].message
    )
    movsx = [I.mov64_imm(1, 200), I.Insn(BPF_ALU64 | BPF_MOV | BPF_X, 0, 1, 8, 0), I.exit_()]
    assert check_insns(movsx, pt, at).ok
    res = check_insns(movsx, pt, at, options=CheckOptions(kernel=(6, 1)))
    assert not res.ok and "needs Linux 6.6" in res.errors[0].message
