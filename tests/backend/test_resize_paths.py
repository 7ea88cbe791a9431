"""Packet resizes on some paths only (bpfdsl.lang.sema.resize): a header view stays usable
on the paths where no resize happened; after a join where some path resized, a re-parse
reads from the packet's start on every path; a loop that resized on a way back to its
start begins the next iteration at the packet's start; the objects load (data_end is
loaded at each check, never kept in a 32-bit register across the join).  Each program
runs on BPF_PROG_TEST_RUN and on the interpreter, which must agree."""

from __future__ import annotations

import pytest
from support.progrun import S, eth

from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.testrun import InterpEngine, KernelEngine

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = 0, 1, 2, 3
IP, UDP, IPv6, Dot1Q, ARP = S["IP"], S["UDP"], S["IPv6"], S["Dot1Q"], None


def run(src: str, frames: list[bytes]) -> list[tuple[int, bytes]]:
    """(verdict, output bytes) per frame; the kernel and the interpreter must agree."""
    res = compile_source(src, "resize.bpfd")
    spec = read_object(res.obj)
    name = res.programs[0]
    kernel, interp = KernelEngine(spec), InterpEngine(spec)
    out = []
    try:
        for f in frames:
            k, i = kernel.run(name, f), interp.run(name, f)
            assert (k.retval, k.data_out) == (i.retval, i.data_out), f.hex()
            out.append((k.retval, k.data_out))
    finally:
        kernel.close()
        interp.close()
    return out


def v4(payload: int = 10, ttl: int = 64) -> bytes:
    return bytes(eth() / IP(src="192.0.2.1", dst="192.0.2.2", ttl=ttl) / UDP() / (b"x" * payload))


def tagged(ttl: int = 64) -> bytes:
    return bytes(eth(0x8100) / Dot1Q(vlan=5) / IP(ttl=ttl) / UDP() / (b"y" * 10))


SIBLING = """license "GPL"
xdp fn sibling(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_8021Q {
        if adjust_head(4) != 0 { return XDP_ABORTED }
        return XDP_TX
    } else {
        if eth.h_proto == ETH_P_IP { return XDP_DROP }   // no resize on this path
    }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_view_is_usable_in_the_sibling_branch_of_a_resize():
    f_tag, f_v4 = tagged(), v4()
    f_v6 = bytes(eth(0x86DD) / IPv6() / UDP())
    (t, t_out), (d, _), (p, _) = run(SIBLING, [f_tag, f_v4, f_v6])
    assert (t, d, p) == (XDP_TX, XDP_DROP, XDP_PASS)
    assert t_out == f_tag[4:]  # the head moved by 4 bytes on that path only


TRIM = """license "GPL"
xdp fn trim(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if ctx.len > 100 {
        if adjust_tail(-4) != 0 { return XDP_ABORTED }
    }
    let again = parse ethernet else { return XDP_PASS }   // from the start on both paths
    if again.h_proto == ETH_P_IP { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_reparse_after_a_resize_on_one_path_reads_from_the_start_on_every_path():
    small, big = v4(10), v4(100)
    arp = bytes(eth(0x0806) / (b"\x00" * 28))
    got = run(TRIM, [small, big, arp])
    assert [v for v, _ in got] == [XDP_DROP, XDP_DROP, XDP_PASS]
    assert len(got[1][1]) == len(big) - 4 and len(got[0][1]) == len(small)


POP = """license "GPL"
xdp fn vlan_pop(ctx) {   // `pop` is a keyword (push/pop, #24)
    let eth = parse ethernet else { return XDP_PASS }
    let proto = eth.h_proto
    match proto {
        ETH_P_8021Q => {
            let tag = parse vlan else { return XDP_PASS }
            let inner = tag.h_vlan_encapsulated_proto
            let dst = eth.h_dest
            let src = eth.h_source
            if adjust_head(4) != 0 { return XDP_ABORTED }
            let e = parse ethernet else { return XDP_ABORTED }
            e.h_dest = dst
            e.h_source = src
            e.h_proto = inner
        }
        ETH_P_IPV6 => return XDP_PASS,
        _ => {}
    }
    let e2 = parse ethernet else { return XDP_PASS }      // offset 0 whichever arm ran
    if e2.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.ttl == 1 { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_vlan_pop_in_one_match_arm_then_one_parse_for_both_paths():
    frames = [tagged(ttl=1), tagged(ttl=9), v4(ttl=1), v4(ttl=9)]
    got = run(POP, frames)
    assert [v for v, _ in got] == [XDP_DROP, XDP_PASS, XDP_DROP, XDP_PASS]
    untagged = bytes(eth() / IP(ttl=9) / UDP() / (b"y" * 10))
    assert got[1][1] == untagged  # the tag is gone, the addresses kept
    assert got[3][1] == frames[3]


LOOP = """license "GPL"
// trim a trailing 0xee byte per iteration, up to 3; a path that trimmed starts the next
// iteration at the packet's start, as does the one that did not
xdp fn trim_loop(ctx) {
    for i in 0..3 {
        let last = load u8 at (ctx.len - 1) else { return XDP_ABORTED }
        let first = parse byte else { return XDP_ABORTED }
        if first.value != 0x02 { return XDP_DROP }        // always the first byte
        if last == 0xee {
            if adjust_tail(-1) != 0 { return XDP_ABORTED }
        }
    }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_loop_iterations_after_a_resize_on_some_path_start_at_the_packet_start():
    base = v4(10)
    frames = [base + b"\xee" * n for n in (0, 1, 2, 3, 5)]
    got = run(LOOP, frames)
    assert [v for v, _ in got] == [XDP_PASS] * 5
    assert [len(out) for _, out in got] == [len(base) + n - min(n, 3) for n in (0, 1, 2, 3, 5)]


SHAPES = {
    "if-then-ctx-len": """
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto == ETH_P_8021Q {
        if adjust_head(4) != 0 { return XDP_ABORTED }
    }
    if ctx.len < 60 { return XDP_DROP }
    let e = parse ethernet else { return XDP_PASS }
    if e.h_proto == ETH_P_IP { return XDP_DROP }
    return XDP_PASS""",
    "both-branches-loads": """
    let v = load be16 at 12 else { return XDP_PASS }
    if v == ETH_P_8021Q {
        if adjust_tail(-4) != 0 { return XDP_ABORTED }
    } else if v == ETH_P_IPV6 {
        if adjust_head(2) != 0 { return XDP_ABORTED }
    }
    let w = load be16 at 20 else { return XDP_PASS }
    let x = load u8 at (ctx.len - 1) else { return XDP_PASS }
    if w == 0 || x == 0 { return XDP_DROP }
    return XDP_PASS""",
    "if-let-then-byte-loop": """
    if let eth = parse ethernet {
        if eth.h_proto == ETH_P_8021Q {
            if adjust_meta(-4) != 0 { return XDP_ABORTED }
        }
    }
    for i in 0..8 {
        let b = parse byte else { return XDP_PASS }
        if b.value == 0 { return XDP_DROP }
    }
    return XDP_PASS""",
    "resize-in-loop-then-parse": """
    for i in 0..2 {
        let eth = parse ethernet else { return XDP_PASS }
        if eth.h_proto != ETH_P_8021Q { break }
        if adjust_head(4) != 0 { return XDP_ABORTED }
    }
    let e = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.ttl == 1 { return XDP_DROP }
    return XDP_PASS""",
}


@pytest.mark.kernel
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_objects_with_resizes_in_branches_load(shape):
    src = f'license "GPL"\nxdp fn f(ctx) {{{SHAPES[shape]}\n}}\n'
    frames = [v4(10), v4(100), tagged(), bytes(eth(0x86DD) / IPv6() / UDP())]
    got = run(src, frames)  # loads (verifier accepted) and both engines agree
    assert len(got) == len(frames)
