"""``csum_diff(none, to, seed)`` / ``csum_diff(from, none, seed)``: the kernel's forms with
an empty side (``bpf_csum_diff(NULL, 0, &to, sizeof(to), seed)``, how C adds bytes to a
checksum, and the reverse to remove them).  The kernel accepts the calls; on both engines
an empty side sums like the same number of zero bytes, adding bytes gives the ones'-
complement sum of their 16-bit words and the seed, and two empty sides give the seed."""

from __future__ import annotations

import socket
import struct

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

SEED = 0x1234
SIDES = f"""license "GPL"
struct pair {{ a: be32, b: be32 }}
map out: array<u32, u64>(max_entries: 8)
xdp fn sides(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    let ip = parse ipv4 else {{ return XDP_PASS }}
    out[0] = csum_diff(none, ip.saddr, {SEED}) as u64          // add 4 packet bytes
    out[1] = csum_diff(be32(0), ip.saddr, {SEED}) as u64       // the same from 4 zero bytes
    out[2] = csum_diff(ip.daddr, none, {SEED}) as u64          // remove 4 bytes
    out[3] = csum_diff(ip.daddr, be32(0), {SEED}) as u64
    out[4] = csum_diff(none, none, {SEED}) as u64
    let w = pair(a: ip.saddr, b: ip.daddr)
    out[5] = csum_diff(none, w, 0) as u64                       // 8 stack bytes
    return XDP_PASS
}}
"""
SADDR, DADDR = "192.0.2.10", "198.51.100.77"


def fold(v: int) -> int:
    """Ones'-complement fold of a sum to 16 bits (end-around carry)."""
    v &= 0xFFFFFFFF
    while v >> 16:
        v = (v & 0xFFFF) + (v >> 16)
    return v


def words(data: bytes) -> int:
    """Sum of the 16-bit words of ``data`` as the CPU loads them (little endian here)."""
    return sum(struct.unpack(f"<{len(data) // 2}H", data))


def test_empty_sides_sum_as_the_kernel_does(bpf_program) -> None:
    prog = bpf_program(compile_source(SIDES, "sides.bpfd").obj)
    frame = Ether() / IP(src=SADDR, dst=DADDR) / UDP(sport=1, dport=2)
    assert prog.run(bytes(frame)).verdict == "XDP_PASS"
    out = [prog.maps["out"].total(i) for i in range(6)]
    assert all(v < 1 << 32 for v in out), out  # sums, not errnos (-EINVAL as u64 is huge)
    s, d = socket.inet_aton(SADDR), socket.inet_aton(DADDR)
    assert fold(out[0]) == fold(out[1]) == fold(SEED + words(s))
    assert fold(out[2]) == fold(out[3])
    assert fold(out[2] + words(d)) == SEED  # removing, then adding the bytes back: the seed
    assert out[4] == SEED
    assert fold(out[5]) == fold(words(s + d))


@pytest.mark.parametrize(
    "args, code, words_",
    [
        ("none, eth.h_source, 0", "helper-arg", "this mac_addr is 6 bytes"),
        ("ip.saddr, nothing, 0", "unknown-name", "unknown name `nothing`"),
        ("none, none", "arg-count", "csum_diff(from, to, seed) takes 3 arguments"),
        ("none, ip.saddr, none", "unknown-name", "unknown name `none`"),  # the seed is a number
    ],
)
def test_empty_side_errors(args: str, code: str, words_: str) -> None:
    src = (
        'license "GPL"\nxdp fn f(ctx) {\n    let eth = parse ethernet else { return XDP_PASS }\n'
        "    let ip = parse ipv4 else { return XDP_PASS }\n"
        f"    let c = csum_diff({args})\n    return XDP_PASS\n}}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "e.bpfd")
    d = ei.value.diagnostics[0]
    assert d.code == code and words_ in d.message, d.concise()
    assert d.span.line == 5
