"""``global`` fns that take the context (issue 24): a global fn that parses, loads or
stores packet bytes, or calls a builtin taking the context, gets the program's context as
a hidden first argument tagged ``arg:ctx`` (the kernel's ``__arg_ctx``, Linux 6.8;
selftests progs/verifier_global_subprogs.c), a ``struct xdp_md *`` in BTF.  The kernel
verifies it once, on its own, with a PTR_TO_CTX first argument; it reads data/data_end
from that context and parses from the packet's first byte (no BTF argument is a packet
pointer).  The object is accepted by the kernel, the verdicts on real packets agree
between the kernel (BPF_PROG_TEST_RUN) and the interpreter, the checker's processed count
is the kernel's, and what the kernel cannot follow is a located error."""

from __future__ import annotations

import pytest
from support.objbuild import compile_c
from support.parse_walks import CASES
from support.paths import DATA
from support.progrun import XDP_ABORTED, XDP_DROP, XDP_PASS, kernel_processed, udp4

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, Kind
from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

DIR = DATA / "global_ctx"
SRC = (DIR / "tcp_mss.bpfd").read_text()


def test_global_fn_verdicts_and_map_writes(bpf_program):
    p = bpf_program(compile_source(SRC, "tcp_mss.bpfd").obj)
    frames = CASES["tcp_mss"]()
    got = [p.run(bytes(f)).retval for f, _ in frames]
    assert got == [v for _, v in frames]
    drops = sum(1 for _, v in frames if v == XDP_DROP)
    assert p.maps["small_mss"].total(0) == drops  # written by the global fn, slot 0
    assert p.maps["small_mss"].total(1) == 0


def test_global_fn_ctx_is_btf_tagged_arg_ctx():
    """``int tcp_mss(struct xdp_md *ctx, u32 slot)``, linkage global, and a DECL_TAG
    ``arg:ctx`` on its parameter 0, as clang writes ``__arg_ctx``."""
    btf = read_object(compile_source(SRC, "tcp_mss.bpfd").obj).btf
    (fn,) = [t for t in btf.types if t.kind == Kind.FUNC and t.name == "tcp_mss"]
    assert fn.linkage == BTF_FUNC_GLOBAL
    proto = btf[fn.type]
    assert [m.name for m in proto.members] == ["ctx", "slot"]
    ptr = btf[proto.members[0].type]
    assert ptr.kind == Kind.PTR and btf[ptr.type].name == "xdp_md"
    tags = [t for t in btf.types if t.kind == Kind.DECL_TAG and btf[t.type] is fn]
    assert [(t.name, t.component_idx) for t in tags] == [("arg:ctx", 0)]


@pytest.mark.kernel
def test_global_fn_processed_is_the_kernels(tmp_path):
    """The kernel verifies the global fn once, however many calls (two here); the checker
    does likewise.  The C twin (clang-19, ``__noinline`` with ``__arg_ctx``) is built in
    the same run and its count printed for the ratio (6.18: 7,746 against 6,467)."""
    ours = read_object(compile_source(SRC, "tcp_mss.bpfd").obj)
    clang = read_object(compile_c(DIR / "tcp_mss.c", tmp_path / "tcp_mss.o"))
    k_ours, k_clang = kernel_processed(ours), kernel_processed(clang)
    (checked,) = check_object(ours).programs
    assert checked.ok, checked
    assert abs(checked.insns_processed - k_ours) <= 3  # as the noinline walk: 3 short
    (c_checked,) = check_object(clang).programs
    assert abs(c_checked.insns_processed - k_clang) <= 3
    print(f"processed: bpfdsl {k_ours}, clang {k_clang}, ratio {k_ours / k_clang:.2f}")


CTX_SRC = """license "GPL"
struct sample { port: u32 }
map samples: perf_event_array<sample>()
map seen: array<u32, u64>(max_entries: 1)

global fn report(port: u32) -> i32 {      // a builtin that takes the context
    perf_event_output(samples, sample(port: port))
    return 0
}

global fn udp_port() -> i32 {               // parses, and calls a global fn with its ctx
    let eth = parse ethernet else { return -1 }
    if eth.h_proto != ETH_P_IP { return -1 }
    let ip = parse ipv4 else { return -1 }
    if ip.protocol != IPPROTO_UDP { return -1 }
    let udp = parse udp else { return -1 }
    if udp.dest == 9999 { report(host(udp.dest) as u32) }
    return host(udp.dest) as i32
}

noinline fn via(bias: i32) -> i32 { return udp_port() + bias }   // passes its context on

xdp fn f(ctx) {
    seen[0] += 1
    let p = via(0)
    if p == 9999 { return XDP_DROP }
    if p < 0 { return XDP_ABORTED }
    return XDP_PASS
}
"""


def test_global_fn_calls_context_builtins_and_is_reached_through_noinline(bpf_program):
    p = bpf_program(compile_source(CTX_SRC, "g.bpfd").obj)
    assert p.run(bytes(udp4(dport=9999))).retval == XDP_DROP
    assert [e.value for e in p.events("samples")] == [{"port": 9999}]
    assert p.run(bytes(udp4(dport=53))).retval == XDP_PASS
    assert p.events("samples") == []
    assert p.run(b"\x00" * 20).retval == XDP_ABORTED


@pytest.mark.kernel
def test_global_fn_with_ctx_builtins_checker_follows_the_kernel():
    spec = read_object(compile_source(CTX_SRC, "g.bpfd").obj)
    (checked,) = check_object(spec).programs
    assert checked.ok, checked
    assert checked.insns_processed == kernel_processed(spec)


def _compile_error(src: str) -> str:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "g.bpfd")
    return ei.value.render()


def test_offset_of_a_global_fns_header_parameter_is_a_located_error():
    text = _compile_error(
        'license "GPL"\n'
        "global fn g(ip: ipv4) -> i32 {\n    let h = ip else { return 0 }\n"
        "    return offset(ip) as i32\n}\n"
        "xdp fn f(ctx) {\n    let eth = parse ethernet else { return XDP_PASS }\n"
        "    let ip = parse ipv4 else { return XDP_PASS }\n    g(ip)\n    return XDP_PASS\n}\n"
    )
    assert "subprog-packet" in text and "g.bpfd:4:12" in text
    assert "memory the caller passes" in text and "noinline fn" in text


def test_global_fn_header_parameter_with_if_fields_is_a_located_error():
    text = _compile_error(
        'license "GPL"\n'
        "global fn k(h: gre) -> i32 {\n    let g = h else { return 0 }\n    return 1\n}\n"
        "xdp fn f(ctx) {\n    let eth = parse ethernet else { return XDP_PASS }\n"
        "    let ip = parse ipv4 else { return XDP_PASS }\n"
        "    let h = parse gre else { return XDP_PASS }\n    k(h)\n    return XDP_PASS\n}\n"
    )
    assert "subprog-packet" in text and "g.bpfd:2:13" in text
    assert "`if` fields" in text


def test_global_fn_with_ctx_takes_at_most_four_params():
    text = _compile_error(
        'license "GPL"\n'
        "global fn g(a: u32, b: u32, c: u32, d: u32, e: u32) -> i32 {\n"
        "    let x = parse byte else { return 0 }\n    return 0\n}\n"
        "xdp fn f(ctx) {\n    g(1, 2, 3, 4, 5)\n    return XDP_PASS\n}\n"
    )
    assert "too-many-params" in text and "at most 4" in text and "g.bpfd:2:45" in text


def test_a_program_without_packet_data_calling_a_global_packet_fn_is_a_located_error():
    """Through a plain fn too: the global fn reads the packet through the context the
    program passes on, and a sock_ops context has no packet."""
    text = _compile_error(
        'license "GPL"\n'
        "global fn g() -> i32 {\n    let b = parse byte else { return 0 }\n    return 1\n}\n"
        "fn via() -> i32 { return g() }\n"
        "sock_ops fn f(ctx) {\n    via()\n    return 1\n}\n"
    )
    assert "parse-no-data" in text and "g.bpfd:8:5" in text
