"""A packet pointer passed to a helper, as the kernel verifier rules on it (kernel/bpf/
verifier.c check_func_arg: ``type_is_pkt_pointer(type) && !may_access_direct_pkt_data(env,
meta, BPF_READ)`` -> "helper access to the packet is not allowed"): only helpers whose
proto says ``.pkt_access = true`` (bpfdsl.abi.helpers ``pkt_access``) may read the packet
through an argument.  Each program is checked by bpfdsl and loaded with BPF_PROG_LOAD
(through scripts/difftest_checker.py's kernel_verdict / our_verdict, the one place the
differential test does that); both must give the same verdict.  The two false accepts
scripts/difftest_checker.py found (helper-id mutants of xdp_gre_decap and resize.o) are
rebuilt here as regression tests.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import shutil
import subprocess
import sys

import pytest
from support.paths import ROOT

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS, helper_may_access_packet
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_ADD, BPF_JLE
from bpfdsl.abi.prog_types import AttachType, ProgramType, XdpAction
from bpfdsl.checker.env import MapRef
from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.maps import MapSpec

SCRIPT = ROOT / "scripts" / "difftest_checker.py"
XDP_PASS = XdpAction.PASS
MSG = "helper access to the packet is not allowed"
PT, AT = ProgramType, AttachType

HASH = MapSpec("h", MapType.HASH, 4, 8, 16)
RB = MapSpec("rb", MapType.RINGBUF, 0, 0, 4096)
PERF = MapSpec("perf", MapType.PERF_EVENT_ARRAY, 4, 4, 1)


def _load_script():
    spec = importlib.util.spec_from_file_location("difftest_checker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def dt():
    return _load_script()


def _x(op: int, dst: int, imm: int, off: int) -> I.Insn:
    return I.jmp_imm(op, dst, imm, off)


# r6 = ctx; r7 = data with 8 bytes checked against data_end; then the call
PROLOGUE = [
    I.mov64_reg(6, 1),
    I.ldx_mem(4, 7, 1, 0),  # xdp_md->data
    I.ldx_mem(4, 3, 1, 4),  # xdp_md->data_end
    I.mov64_reg(4, 7),
    I.alu64_imm(BPF_ADD, 4, 8),
    I.jmp_reg(BPF_JLE, 4, 3, 2),  # 8 bytes in the packet: on to the call
    I.mov64_imm(0, XDP_PASS),
    I.exit_(),
]
AT_MAP = len(PROLOGUE)  # where a call's ld_imm64 of its map goes


def _calls() -> dict[str, tuple[list[I.Insn], MapSpec | None]]:
    """Per helper: the instructions after PROLOGUE passing r7 (the packet) to it, and the
    map its ld_imm64 (at AT_MAP) refers to."""
    return {
        "map_lookup_elem": (
            [I.ld_imm64(1, 0), I.mov64_reg(2, 7), I.call(HELPERS["map_lookup_elem"].id)],
            HASH,
        ),
        "csum_diff": (
            [
                I.mov64_reg(1, 7),
                I.mov64_imm(2, 4),
                I.mov64_imm(3, 0),
                I.mov64_imm(4, 0),
                I.mov64_imm(5, 0),
                I.call(HELPERS["csum_diff"].id),
            ],
            None,
        ),
        "ringbuf_output": (
            [
                I.ld_imm64(1, 0),
                I.mov64_reg(2, 7),
                I.mov64_imm(3, 4),
                I.mov64_imm(4, 0),
                I.call(HELPERS["ringbuf_output"].id),
            ],
            RB,
        ),
        "perf_event_output": (
            [
                I.ld_imm64(2, 0),
                I.mov64_reg(1, 6),
                I.mov64_imm(3, 0),
                I.mov64_reg(4, 7),
                I.mov64_imm(5, 4),
                I.call(HELPERS["perf_event_output"].id),
            ],
            PERF,
        ),
        "fib_lookup": (
            [
                I.mov64_reg(1, 6),
                I.mov64_reg(2, 7),
                I.mov64_imm(3, 8),
                I.mov64_imm(4, 0),
                I.call(HELPERS["fib_lookup"].id),
            ],
            None,
        ),
        "xdp_store_bytes": (
            [
                I.mov64_reg(1, 6),
                I.mov64_imm(2, 0),
                I.mov64_reg(3, 7),
                I.mov64_imm(4, 4),
                I.call(HELPERS["xdp_store_bytes"].id),
            ],
            None,
        ),
    }


def _item(dt, helper: str):
    body, m = _calls()[helper]
    ins = [*PROLOGUE, *body, I.mov64_imm(0, XDP_PASS), I.exit_()]
    refs = {AT_MAP: MapRef(m)} if m is not None else {}
    return dt.Item("pkt_access", f"pkt_to_{helper}", ins, PT.XDP, AT.XDP, 0, refs)


ALLOWED = ["map_lookup_elem", "csum_diff"]
REFUSED = ["ringbuf_output", "perf_event_output", "fib_lookup", "xdp_store_bytes"]


def test_table_column_follows_the_kernel_protos() -> None:
    # .pkt_access = true in kernel/bpf/helpers.c and net/core/filter.c; not on the others
    for name in ALLOWED:
        assert helper_may_access_packet(HELPERS[name], PT.XDP), name
    for name in REFUSED:
        assert not helper_may_access_packet(HELPERS[name], PT.XDP), name
    # may_access_direct_pkt_data: sock_ops passes packet pointers to no helper at all
    assert not helper_may_access_packet(HELPERS["map_lookup_elem"], PT.SOCK_OPS)
    assert helper_may_access_packet(HELPERS["map_lookup_elem"], PT.SK_MSG)


@pytest.mark.parametrize("helper", ALLOWED)
def test_checker_accepts_packet_pointer_to_pkt_access_helper(dt, helper: str) -> None:
    it = _item(dt, helper)
    r = dt.our_verdict(it)
    assert r.ok, r.errors


@pytest.mark.parametrize("helper", REFUSED)
def test_checker_refuses_packet_pointer_to_other_helper(dt, helper: str) -> None:
    it = _item(dt, helper)
    r = dt.our_verdict(it)
    assert not r.ok
    e = r.errors[0]
    assert (e.code, e.message) == ("helper-pkt-access", MSG)
    assert it.insns[e.idx].is_call and it.insns[e.idx].imm == HELPERS[helper].id
    assert f"bpf_{helper}" in e.explain and "copy the bytes to the stack" in e.explain


@pytest.mark.kernel
@pytest.mark.parametrize("helper", ALLOWED + REFUSED)
def test_kernel_agrees_on_packet_pointer_to_helper(dt, helper: str) -> None:
    it = _item(dt, helper)
    maps = dt.Maps()
    try:
        verdict, msg, _log = dt.kernel_verdict(it, maps)
    finally:
        maps.close()
    ours = dt.our_verdict(it)
    if helper in ALLOWED:
        assert verdict == "ok", msg
        assert ours.ok
    else:
        assert (verdict, msg) == ("rej", MSG)
        assert not ours.ok and ours.errors[0].message == MSG


# ---- the two false accepts of scripts/difftest_checker.py, rebuilt ----


def _mutant(dt, obj: str, prog: str, idx: int, helper_id: int):
    base = next(it for it in dt.base_items([obj], lambda o: "base") if it.name.endswith(prog))
    assert base.insns[idx].is_call, base.insns[idx]  # the mutated call site
    ins = list(base.insns)
    ins[idx] = I.call(helper_id)
    return dataclasses.replace(base, name=f"{base.name}#helper_arg@{idx}id{helper_id}", insns=ins)


def _agree_not_ok(dt, it) -> str:
    maps = dt.Maps()
    try:
        verdict, msg, _log = dt.kernel_verdict(it, maps)
    finally:
        maps.close()
    assert (verdict, msg) == ("rej", MSG)
    r = dt.our_verdict(it)
    assert not r.ok
    return r.errors[0].code


@pytest.mark.kernel
def test_gre_decap_mutants_are_not_accepted(dt, tmp_path) -> None:
    # xdp_gre_decap (ISA v4), a bpf_xdp_adjust_head call turned into bpf_check_mtu (163):
    # r3 (its u32 *mtu_len) is a packet pointer there.  The difftest's mutant was the call
    # at insn 117 of the program as built then; today's build has its call sites elsewhere,
    # so every adjust_head site is mutated.  The checker does not model check_mtu: it must
    # say "cannot check", never OK.
    obj = tmp_path / "xdp_gre_decap.v4.bpfd.o"
    # the adjust_head version (progs/xdp_gre_decap.bpfd pops with `pop` now, and r3 is no
    # packet pointer at its calls)
    src = ROOT / "tests" / "data" / "encap_workaround" / "xdp_gre_decap.bpfd"
    obj.write_bytes(compile_file(src, mcpu="v4").obj)
    (base,) = dt.base_items([str(obj)], lambda o: "base")
    sites = [
        i
        for i, x in enumerate(base.insns)
        if x.is_call and x.src == 0 and x.imm == HELPERS["xdp_adjust_head"].id
    ]
    assert sites
    for idx in sites:
        it = _mutant(dt, str(obj), ":gre_decap", idx, 163)
        assert _agree_not_ok(dt, it) == "unmodelled-helper"


@pytest.mark.kernel
@pytest.mark.skipif(shutil.which("clang-19") is None, reason="needs clang-19")
def test_resize_copy_out_mutant_is_refused(dt, tmp_path) -> None:
    # resize.o copy_out, call #19 turned into bpf_trace_printk (6) of packet memory
    obj = tmp_path / "resize.o"
    src = ROOT / "tests" / "data" / "checker_c" / "resize.c"
    arch = "/usr/include/x86_64-linux-gnu"
    cmd = ["clang-19", "-O2", "-g", "-target", "bpf", f"-I{arch}", "-c", str(src), "-o", str(obj)]
    subprocess.run(cmd, check=True, capture_output=True)
    it = _mutant(dt, str(obj), ":copy_out", 19, HELPERS["trace_printk"].id)
    assert _agree_not_ok(dt, it) == "helper-pkt-access"


# ---- what the compiler emits: header fields reach helpers as the kernel allows ----

H = 'license "GPL"\n'
PARSE6 = (
    "    let eth = parse ethernet else { return XDP_PASS }\n"
    "    let ip = parse ipv6 else { return XDP_PASS }\n"
)
COMPILED = {
    # bpf_map_lookup_elem (pkt_access): the key may be the header's own bytes
    "lookup_key": H
    + "map seen: hash<ipv6_addr, u32>(max_entries: 4)\n"
    + "xdp fn f(ctx) {\n"
    + PARSE6
    + "    if let v = seen.lookup(ip.saddr) { return XDP_DROP }\n"
    + "    return XDP_PASS\n}\n",
    # bpf_csum_diff (pkt_access) over two header fields
    "csum_diff": H
    + "map out: array<u32, u64>(max_entries: 1)\n"
    + "xdp fn f(ctx) {\n"
    + PARSE6
    + "    out[0] = csum_diff(ip.saddr, ip.daddr, 0) as u64\n"
    + "    return XDP_PASS\n}\n",
    # bpf_ringbuf_output / bpf_perf_event_output (no pkt_access): the record is built
    # from header fields, so the helper reads the stack copy
    "ringbuf_output": H
    + "struct ev { saddr: ipv6_addr, daddr: ipv6_addr }\n"
    + "map events: ringbuf<ev>(max_entries: 4096)\n"
    + "xdp fn f(ctx) {\n"
    + PARSE6
    + "    ringbuf_output(events, ev(saddr: ip.saddr, daddr: ip.daddr))\n"
    + "    return XDP_PASS\n}\n",
    "perf_event_output": H
    + "struct ev { saddr: ipv6_addr }\n"
    + "map events: perf_event_array<ev>(max_entries: 1)\n"
    + "xdp fn f(ctx) {\n"
    + PARSE6
    + "    perf_event_output(events, ev(saddr: ip.saddr))\n"
    + "    return XDP_PASS\n}\n",
}


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(COMPILED))
def test_compiled_header_fields_to_helpers_load(dt, tmp_path, name: str) -> None:
    obj = tmp_path / f"{name}.o"
    obj.write_bytes(compile_source(COMPILED[name], f"{name}.bpfd").obj)
    (it,) = dt.base_items([str(obj)], lambda o: "compiled")
    maps = dt.Maps()
    try:
        verdict, msg, _log = dt.kernel_verdict(it, maps)
    finally:
        maps.close()
    assert verdict == "ok", msg
    r = dt.our_verdict(it)
    assert r.ok, r.errors


def test_header_view_as_event_record_is_a_located_error() -> None:
    # a header view would hand bpf_ringbuf_output a packet pointer (refused by the kernel):
    # the language refuses it at the declaration
    src = H + "map events: ringbuf<ipv6>(max_entries: 4096)\nxdp fn f(ctx) { return XDP_PASS }\n"
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "rec.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("header-not-value", 2, 21)
    assert "event record" in d.message
