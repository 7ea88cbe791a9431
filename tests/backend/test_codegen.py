"""Code generation: IR shape and object layout follow libbpf conventions."""

from __future__ import annotations

import io

import pytest
from elftools.elf.elffile import ELFFile
from support.paths import PROGS

from bpfdsl.compiler import compile_file, compile_source

SRC = """license "Dual BSD/GPL"
config port: be16 = 53
map counts: hash<u32, u64>(max_entries: 16)
xdp fn count(ctx) {
    counts[ctx.rx_queue_index] += 1
    if host(port) == 0 { return XDP_DROP }
    return XDP_PASS
}
xdp(cpumap) fn on_cpu(ctx) {
    return XDP_PASS
}
"""


def sections(obj: bytes) -> dict[str, bytes]:
    elf = ELFFile(io.BytesIO(obj))
    return {s.name: s.data() for s in elf.iter_sections()}


def test_codegen_object_sections_follow_libbpf():
    res = compile_source(SRC, "t.bpfd")
    secs = sections(res.obj)
    assert {"xdp", "xdp/cpumap", ".maps", "license", ".rodata", ".BTF", ".BTF.ext"} <= set(secs)
    assert "maps" not in secs and ".eh_frame" not in secs  # B12; nounwind
    assert secs["license"] == b"Dual BSD/GPL\0"
    assert secs[".rodata"] == b"\x00\x35"  # be16 53 in network order
    assert res.programs == ["count", "on_cpu"]


def test_codegen_ir_calls_helpers_like_clang():
    ir_text = compile_source(SRC, "t.bpfd").llvm_ir
    assert 'section "xdp"' in ir_text and "nounwind" in ir_text
    assert "inttoptr (i64 1 to ptr)" in ir_text  # map_lookup_elem
    assert "atomicrmw add" in ir_text  # shared hash map: atomic add (BPF_ATOMIC)
    assert "load volatile" in ir_text  # config read is not folded


def test_codegen_percpu_add_is_plain():
    res = compile_file(PROGS / "xdp_udp_filter.bpfd", emit="llvm-ir")
    assert "atomicrmw" not in res.llvm_ir


@pytest.mark.parametrize("mcpu", ["v1", "v2", "v3", "v4"])
def test_codegen_mcpu_levels(mcpu):
    res = compile_file(PROGS / "xdp_acl.bpfd", mcpu=mcpu, emit="asm", stats=True)
    has_w = any(ln.strip().startswith("w") for ln in res.asm.splitlines())
    assert has_w == (mcpu in ("v3", "v4"))  # 32-bit subregisters from v3 on
    assert res.stats[0].insns > 0


def test_codegen_line_info_names_source(tmp_path):
    res = compile_file(PROGS / "xdp_reflect.bpfd")
    btf_ext = sections(res.obj)[".BTF.ext"]
    assert btf_ext[:2] == b"\x9f\xeb"
    assert b"xdp_reflect.bpfd" in sections(res.obj)[".BTF"]
    assert b"swap(ip.saddr, ip.daddr)" in sections(res.obj)[".BTF"]


def _cli(*args: str):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "bpfdsl", *args], capture_output=True, timeout=120)


def test_cli_compile_stats_and_outputs(tmp_path):
    out = tmp_path / "f.o"
    r = _cli("compile", str(PROGS / "xdp_cpumap_steer.bpfd"), "-o", str(out), "--stats")
    assert r.returncode == 0, r.stderr
    assert out.read_bytes()[:4] == b"\x7fELF"
    lines = r.stdout.decode().splitlines()
    assert lines[0].split() == ["program", "section", "insns", "stack"]
    assert [ln.split()[:2] for ln in lines[1:]] == [["steer", "xdp"], ["on_cpu", "xdp/cpumap"]]
    r = _cli("compile", str(PROGS / "xdp_pass.bpfd"), "-o", "-")
    assert r.stdout[:4] == b"\x7fELF"
    r = _cli("compile", str(PROGS / "xdp_pass.bpfd"), "--emit", "asm", "-o", "-")
    assert b"exit" in r.stdout and b"w0 = 2" in r.stdout
    r = _cli("compile", str(PROGS / "xdp_pass.bpfd"), "-o", str(tmp_path / "no" / "x.o"))
    assert r.returncode == 2 and b"cannot write" in r.stderr and b"Traceback" not in r.stderr
    r = _cli("compile", "--help")
    assert b"v3" in r.stdout and b"5.1" in r.stdout
