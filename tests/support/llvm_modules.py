"""Hand-built llvmlite modules as bpfdsl's code generator would emit them (with
bpfdsl.backend.debuginfo), and bpftool's view of an object's BTF: what the back-end tests
of tests/backend/ build objects from and read them with."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

from llvmlite import ir

from bpfdsl.abi.flags import BPF_F_NO_PREALLOC
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.map_types import MapType
from bpfdsl.backend.debuginfo import DebugInfo, load_config

I8, I16, I32, I64 = (ir.IntType(n) for n in (8, 16, 32, 64))
PTR = ir.PointerType()

# The .bpfd text the modules below pretend to come from (line numbers matter).
SOURCE = """license "GPL"
config port: be16 = 53
struct rec { a: u32, b: u64 }
map counts: hash<u32, rec>(max_entries: 16)
map drops: percpu_array<u32, u64>(max_entries: 1)
map block: lpm_trie<ipv4_prefix, u8>(max_entries: 1024)
map cpus: cpumap(max_entries: 2)
xdp fn filter(ctx) {
    let k: u32 = 0
    let r = counts.lookup(k) else { return XDP_PASS }
    if block.contains(10.0.0.0/8) { return XDP_DROP }
    drops[0] += 1
    if port == 53 { return XDP_DROP }
    return XDP_PASS
}
"""


def _helper(b: ir.IRBuilder, helper_id: int, args: list[ir.Value]) -> ir.Value:
    """``call inttoptr (i64 id to ptr)(args)`` as clang emits helper calls."""
    fty = ir.FunctionType(PTR, [a.type for a in args])
    return b.call(b.inttoptr(I64(helper_id), fty.as_pointer()), args)


def _stack(b: ir.IRBuilder, ty: ir.Type, value: ir.Constant, align: int) -> ir.Value:
    slot = b.alloca(ty)
    slot.align = align
    b.store(value, slot).align = align
    return slot


def build_maps_module(filename: str = "maps.bpfd") -> ir.Module:
    """SOURCE as IR: 4 maps (hash, percpu_array, lpm_trie + NO_PREALLOC, cpumap), a be16
    .rodata config, a license and one XDP function with a location on every instruction."""
    m = ir.Module(name=filename)
    di = DebugInfo(m, filename, source=SOURCE)
    u32, u64, u8 = di.int_type("u32"), di.int_type("u64"), di.int_type("u8")
    rec = di.struct_type("rec", [("a", u32), ("b", u64)], line=3)
    prefix = di.struct_type("ipv4_prefix", [("prefixlen", u32), ("addr", di.int_type("be32"))])
    di.license("GPL")
    port = di.config_global("port", di.int_type("be16"), 0x3500, line=2)
    counts = di.map_global("counts", MapType.HASH, key=u32, value=rec, max_entries=16, line=4)
    drops = di.map_global("drops", MapType.PERCPU_ARRAY, key=u32, value=u64, max_entries=1,
                          line=5)  # fmt: skip
    block = di.map_global("block", MapType.LPM_TRIE, key=prefix, value=u8, max_entries=1024,
                          map_flags=BPF_F_NO_PREALLOC, line=6)  # fmt: skip
    di.map_global("cpus", MapType.CPUMAP, key=u32, value=u32, max_entries=2, line=7)
    fn = ir.Function(m, ir.FunctionType(I32, [PTR]), "filter")
    fn.section = "xdp"
    fd = di.function(fn, line=8, ctx="xdp_md")
    entry, found, miss, check, drop, done = (
        fn.append_basic_block(n) for n in ("entry", "found", "miss", "check", "drop", "done")
    )
    b = ir.IRBuilder(entry)
    b.debug_metadata = fd.loc(9, 5)
    k = _stack(b, I32, I32(0), 4)
    b.debug_metadata = fd.loc(11, 8)
    key = _stack(b, ir.LiteralStructType([I32, I32]),
                 ir.Constant(ir.LiteralStructType([I32, I32]), [8, 0x0A]), 4)  # fmt: skip
    b.debug_metadata = fd.loc(10, 13)
    r = _helper(b, 1, [counts, k])
    b.cbranch(b.icmp_unsigned("==", r, ir.Constant(PTR, None)), miss, found)
    b.position_at_end(found)
    b.debug_metadata = fd.loc(11, 8)
    hit = _helper(b, 1, [block, key])
    b.cbranch(b.icmp_unsigned("!=", hit, ir.Constant(PTR, None)), drop, check)
    b.position_at_end(check)
    b.debug_metadata = fd.loc(12, 5)
    cnt = _helper(b, 1, [drops, k])
    with b.if_then(b.icmp_unsigned("!=", cnt, ir.Constant(PTR, None))):
        old = b.load(cnt, typ=I64)
        old.align = 8
        b.store(b.add(old, I64(1)), cnt).align = 8
    b.debug_metadata = fd.loc(13, 8)
    is53 = b.icmp_unsigned("==", load_config(b, port), I16(0x3500))
    b.cbranch(is53, drop, done)
    b.position_at_end(drop)
    b.ret(I32(1))
    b.position_at_end(miss)
    b.debug_metadata = fd.loc(10, 37)
    b.ret(I32(2))
    b.position_at_end(done)
    b.debug_metadata = fd.loc(14, 5)
    b.ret(I32(2))
    di.finalize()
    return m


def build_pass_module(filename: str = "pass.bpfd") -> ir.Module:
    """``license "GPL"`` / ``xdp fn xdp_pass(ctx) { return XDP_PASS }``."""
    m = ir.Module(name=filename)
    di = DebugInfo(m, filename, source='license "GPL"\nxdp fn xdp_pass(ctx) {\n    return XDP_PASS\n}\n')  # fmt: skip
    di.license("GPL")
    fn = ir.Function(m, ir.FunctionType(I32, [PTR]), "xdp_pass")
    fn.section = "xdp"
    fd = di.function(fn, line=2, ctx="xdp_md")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.debug_metadata = fd.loc(3, 5)
    b.ret(I32(2))
    di.finalize()
    return m


def build_sock_module(filename: str = "sock.bpfd") -> ir.Module:
    """FIELD-BUGS B12: a sockhash keyed by a 12-byte struct shared by sock_ops and sk_msg."""
    m = ir.Module(name=filename)
    di = DebugInfo(m, filename, source="\n" * 10)
    be32, be16 = di.int_type("be32"), di.int_type("be16")
    key = di.struct_type("sock_key", [("sip", be32), ("dip", be32), ("sport", be16),
                                      ("dport", be16)], line=1)  # fmt: skip
    di.license("GPL")
    socks = di.map_global("socks", MapType.SOCKHASH, key=key, value=di.int_type("u32"),
                          max_entries=65536, line=2)  # fmt: skip
    for name, section, ctx, helper, line in (
        ("track", "sockops", "bpf_sock_ops", "sock_hash_update", 3),
        ("redir", "sk_msg", "sk_msg_md", "msg_redirect_hash", 6),
    ):
        fn = ir.Function(m, ir.FunctionType(I32, [PTR]), name)
        fn.section = section
        fd = di.function(fn, line=line, ctx=ctx)
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        b.debug_metadata = fd.loc(line + 1, 5)
        k = _stack(b, ir.ArrayType(I32, 3), ir.Constant(ir.ArrayType(I32, 3), None), 4)
        _helper(b, HELPERS[helper].id, [fn.args[0], socks, k, I64(0)])
        b.debug_metadata = fd.loc(line + 2, 5)
        b.ret(I32(1))
    di.finalize()
    return m


def btf_types(obj: bytes, tmp_path: Path) -> dict[int, dict]:
    path = tmp_path / f"o{uuid.uuid4().hex[:6]}.o"
    path.write_bytes(obj)
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(path)], check=True,
                         capture_output=True, text=True, timeout=30).stdout  # fmt: skip
    return {t["id"]: t for t in json.loads(out)["types"]}
