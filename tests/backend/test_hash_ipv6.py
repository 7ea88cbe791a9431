"""hash() over IPv6 addresses (ipv6_addr, 16 bytes: four 32-bit words in the FNV-1a +
fmix32 scheme) and IPv6 flow steering through a cpumap (progs/xdp_cpumap_steer6.bpfd), on
the kernel (BPF_PROG_TEST_RUN) and the interpreter alike (``bpf_program`` fixture): the
slot a flow gets equals a Python model of the hash, and flows of one /64 use both CPUs."""

from __future__ import annotations

import pytest
from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import IPv6, IPv6ExtHdrHopByHop
from scapy.layers.l2 import Ether
from support.flowhash import flow_hash as model_hash
from support.paths import PROGS
from support.steer6 import a6, flow_slot, words

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


HASHES = """license "GPL"
map out: array<u32, u32>(max_entries: 7)
map addrs: array<u32, ipv6_addr>(max_entries: 1)
xdp fn h(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    out[0] = hash(ip6.saddr, ip6.daddr, ip6.nexthdr)
    out[1] = hash(ip6.daddr)
    out[2] = hash(2001:db8::1:2, 7)
    out[3] = hash(eth.h_source)
    let v = addrs.lookup(0) else { return XDP_ABORTED }
    let copy = ip6.saddr
    out[4] = hash(v, copy)
    out[5] = hash(ip6.saddr)
    out[6] = hash(be32(0x20010db8), be32(0xaaaa0000), be32(0), be32(5))
    return XDP_PASS
}"""


def test_hash_of_ipv6_addresses_matches_model(bpf_program) -> None:
    prog = bpf_program(compile_source(HASHES, "hash6.bpfd").obj)
    stored = a6("fd00:1:2:3::44")
    prog.maps["addrs"].set(0, stored)
    sa, da = "2001:db8:aaaa::5", "2001:db8:bbbb:1::9"
    r = prog.run(Ether(src=MAC_A, dst=MAC_B) / IPv6(src=sa, dst=da) / UDP() / b"x")
    assert r.verdict == "XDP_PASS"
    got = [prog.maps["out"].total(i) for i in range(7)]
    mac = bytes.fromhex(MAC_A.replace(":", ""))
    assert got == [
        model_hash(*words(a6(sa)), *words(a6(da)), 17),
        model_hash(*words(a6(da))),
        model_hash(*words(a6("2001:db8::1:2")), 7),
        model_hash(*words(mac)),
        model_hash(*words(stored), *words(a6(sa))),
        model_hash(*words(a6(sa))),
        model_hash(0xB80D0120, 0x0000AAAA, 0, 0x05000000),
    ]
    assert got[5] == got[6], "an address hashes exactly like its four be32 words"


def steer_flows() -> list[tuple[str, Ether]]:
    """(source address, frame): UDP and TCP flows from one /64, some behind a hop-by-hop
    extension header, differing only in the interface identifier."""
    out = []
    for k in range(12):
        src = f"2001:db8:77:1::{k * 0x1111 + 1:x}"
        ip6 = IPv6(src=src, dst="2001:db8:99::1")
        l4 = UDP(sport=5000, dport=53) if k % 3 else TCP(sport=5000, dport=80, flags="S")
        if k % 4 == 1:
            ip6 = ip6 / IPv6ExtHdrHopByHop()
        out.append((src, Ether(src=MAC_A, dst=MAC_B) / ip6 / l4 / b"payload"))
    return out


def test_steer6_slot_equals_model_and_one_64_spreads(bpf_program) -> None:
    prog = bpf_program(PROGS / "xdp_cpumap_steer6.bpfd", "steer6", config={"n_cpus": 2})
    prog.maps["cpus"].set(0, 0)
    prog.maps["cpus"].set(1, 1)
    vs = prog.maps["cpu_map"].value_size
    for cpu in (0, 1):  # qsize 192, no on-CPU program (fd -1)
        prog.maps["cpu_map"].set(cpu, (192).to_bytes(4, "little") + b"\xff" * (vs - 4))
    slots = set()
    for src, frame in steer_flows():
        want = flow_slot(frame, 2)
        before = [prog.maps["steered"].total(s) for s in (0, 1)]
        r = prog.run(frame)
        after = [prog.maps["steered"].total(s) for s in (0, 1)]
        assert r.verdict == "XDP_REDIRECT", src
        assert [a - b for a, b in zip(after, before, strict=True)] == [
            int(s == want) for s in (0, 1)
        ], f"flow from {src}: the program chose another slot than the model ({want})"
        if r.redirect is not None:  # the interpreter also says where to
            assert r.redirect[:2] == ("cpu_map", want)
        slots.add(want)
    assert slots == {0, 1}, "flows of one /64 must spread over both CPUs"


def test_steer6_passes_ipv4_and_truncated(bpf_program) -> None:
    from scapy.layers.inet import IP

    prog = bpf_program(PROGS / "xdp_cpumap_steer6.bpfd", "steer6", config={"n_cpus": 2})
    v4 = Ether(src=MAC_A, dst=MAC_B) / IP() / UDP()
    assert prog.run(v4).verdict == "XDP_PASS"
    _, frame = steer_flows()[0]
    assert TCP in frame and IPv6ExtHdrHopByHop not in frame
    assert prog.run(bytes(frame)[:60]).verdict == "XDP_PASS"  # TCP header cut short
    assert sum(prog.maps["steered"].total(s) for s in range(64)) == 0


@pytest.mark.parametrize(
    "decl,arg,hint_fix",
    [
        ("let x: u64 = ctx.len as u64", "x", "hash((x >> 32) as u32, x as u32)"),
        (
            "let x = w.lookup(0) else { return XDP_PASS }",
            "x",
            "hash((host(x) >> 32) as u32, host(x) as u32)",
        ),
    ],
)
def test_hash_refuses_wide_integers_with_a_hint_that_compiles(decl, arg, hint_fix) -> None:
    src = f"""license "GPL"
map out: array<u32, u32>(max_entries: 1)
map w: array<u32, be64>(max_entries: 1)
xdp fn h(ctx) {{
    {decl}
    out[0] = HASH
    return XDP_PASS
}}"""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src.replace("HASH", f"hash({arg})"), "wide.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == "type-mismatch" and (d.span.line, d.span.col) == (6, 19)
    assert f"`{hint_fix}`" in d.hints[0]
    fixed = compile_source(src.replace("HASH", hint_fix), "wide.bpfd")
    assert fixed.obj[:4] == b"\x7fELF"
