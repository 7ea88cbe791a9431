"""A constant step of a u8 field covered by its header's checksum (`ip.ttl -= 1`, `ip.tos -= 3`,
`ip.tos += 1`) updates the checksum with the short form of
``bpfdsl.backend.codegen.csum.byte_delta_addends`` (ip_decrease_ttl's ``check += htons(0x0100)``
plus the end-around carry, with the wrap of the byte handled): proved here against a full
recomputation of the IPv4 header checksum for every checksum value a valid header can have
(0x0000..0xfffe), with and without the byte wrapping, and against RFC 1624 eqn. 3 (the
general update) for every value including the -0 checksum 0xffff; then on both engines for
a sample of headers, the rewritten frames carry exactly the recomputed checksum."""

from __future__ import annotations

import struct

import pytest

from bpfdsl.backend.codegen.csum import byte_delta_addends
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

SAMPLE_HC = (0x0000, 0x0001, 0x00FF, 0x0100, 0x7FFF, 0xFEFF, 0xFF00, 0xFFFD, 0xFFFE)


def ones_sum(words) -> int:
    s = sum(words)
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s


def full_checksum(hdr: bytes) -> int:
    """RFC 791/1071: ~(one's complement sum of the header's words, checksum as 0)."""
    words = list(struct.unpack("!10H", hdr[:10] + b"\0\0" + hdr[12:20]))
    return ~ones_sum(words) & 0xFFFF


def ipv4_header(hc: int, ttl: int, tos: int, proto: int) -> bytes:
    """A valid 20-byte IPv4 header whose checksum field is ``hc`` (0..0xfffe): the id word
    makes the sum come out (the one's complement sum of the words must be 0xffff - hc)."""

    def make(ident: int) -> bytes:
        return struct.pack("!BBHHHBBH4s4s", 0x45, tos, 40, ident, 0x4000, ttl, proto, hc,
                           bytes([10, 1, 2, 3]), bytes([192, 168, 7, 9]))  # fmt: skip

    s0 = ~full_checksum(make(0)) & 0xFFFF  # the sum without the id word
    ident = ones_sum([0xFFFF - hc, ~s0 & 0xFFFF])  # (0xffff - hc) - s0, one's complement
    for cand in (ident, ident ^ 0xFFFF):  # 0 and 0xffff are both zero in one's complement
        h = make(cand)
        if full_checksum(h) == hc:
            return h
    raise AssertionError(f"no header with checksum {hc:#06x}")


def short_form(hc_le: int, old: int, offset: int, k: int) -> int:
    """The emitted instructions, as Python: diff = old - k; bit = diff < 0; c = HC + addend;
    c + ((c + 1) >> 16), 16 bits (HC as loaded little-endian)."""
    d, dw = byte_delta_addends(offset, k)
    c = hc_le + (dw if old - k < 0 else d)
    return (c + ((c + 1) >> 16)) & 0xFFFF


def eqn3(hc_le: int, old_w: int, new_w: int) -> int:
    """codegen.csum.csum_update (RFC 1624 eqn. 3) as Python, little-endian words."""
    s = (~hc_le & 0xFFFF) + (~old_w & 0xFFFF) + new_w
    for _ in range(2):
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def swap16(v: int) -> int:
    return ((v & 0xFF) << 8) | (v >> 8)


# (field offset in the IPv4 header, k of `f -= k`, old values: with and without a wrap)
CASES = [(8, 1, (0, 1, 2, 64, 255)), (1, 3, (0, 2, 3, 4, 200)), (1, 255, (0, 1, 254, 255))]
IDS = ["ttl-1", "tos-3", "tos+1"]


@pytest.mark.parametrize("offset,k,olds", CASES, ids=IDS)
def test_short_form_is_a_full_recomputation_for_every_checksum(offset, k, olds):
    for old in olds:
        new = (old - k) % 256
        for hc in range(0xFFFF):  # every checksum a valid header can carry
            fields = {"ttl": 64, "tos": 0, "proto": 17}
            fields[{8: "ttl", 1: "tos"}[offset]] = old
            h = bytearray(ipv4_header(hc, **fields))
            h[offset] = new
            want = full_checksum(bytes(h))
            got = swap16(short_form(swap16(hc), old, offset, k))
            assert got == want, (hex(hc), old)


@pytest.mark.parametrize("offset,k,olds", CASES, ids=IDS)
def test_short_form_is_eqn3_for_every_value_and_every_old_byte(offset, k, olds):
    """Every checksum (0xffff too: a wrong header stays as eqn. 3 leaves it), the old bytes
    of CASES and every old byte for a stride of checksums; the other byte of the word is
    arbitrary (0x5a)."""
    pairs = [(old, hc) for old in olds for hc in range(0x10000)]
    pairs += [(old, hc) for old in range(256) for hc in range(0, 0x10000, 251)]
    pairs += [(old, hc) for old in range(256) for hc in (0xFFFE, 0xFFFF)]
    lo = offset % 2 == 0  # even offset: the low byte of the little-endian word
    for old, hc_le in pairs:
        new = (old - k) % 256
        old_w = old | 0x5A00 if lo else old << 8 | 0x5A
        new_w = new | 0x5A00 if lo else new << 8 | 0x5A
        assert short_form(hc_le, old, offset, k) == eqn3(hc_le, old_w, new_w), (hex(hc_le), old)


SRC = """license "GPL"
xdp fn step(ctx) {
    let eth = parse ethernet else { return XDP_ABORTED }
    if eth.h_proto != ETH_P_IP { return XDP_ABORTED }
    let ip = parse ipv4 else { return XDP_ABORTED }
    ip.STEP
    return XDP_TX
}
"""
STEPS = {"ttl -= 1": (8, "ttl", -1), "tos -= 3": (1, "tos", -3), "tos += 1": (1, "tos", 1)}


@pytest.mark.parametrize("step", list(STEPS))
def test_engines_write_the_recomputed_checksum(bpf_program, step):
    offset, name, change = STEPS[step]
    obj = compile_source(SRC.replace("STEP", step), "step.bpfd").obj  # the kernel takes it
    prog = bpf_program(obj)
    eth = bytes.fromhex("020000000002 020000000001 0800")
    for hc in SAMPLE_HC:
        for old in (0, 1, 3, 255):
            fields = {"ttl": 64, "tos": 0, "proto": 17, name: old}
            hdr = ipv4_header(hc, **fields)
            res = prog.run(eth + hdr + bytes(26))
            assert res.verdict == "XDP_TX"
            out = res.data_out[14:34]
            assert out[offset] == (old + change) % 256
            assert out[10:12] == full_checksum(out).to_bytes(2, "big"), (hex(hc), old)


def test_ttl_decrement_is_the_short_form():
    """``ip.ttl -= 1``: a u16 load and store of the checksum, no load of the ttl/protocol
    word around the byte store (the general update reads it before and after)."""
    spec = read_object(compile_source(SRC.replace("STEP", "ttl -= 1"), "step.bpfd").obj)
    (prog,) = spec.programs.values()
    u16_loads = [i for i in prog.insns if i.opcode == 0x69]  # ldxh
    assert [i.off for i in u16_loads] == [12, 24]  # h_proto, then the checksum only
