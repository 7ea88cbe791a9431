"""The words bpfdsl's ``hash()`` takes from IPv6 frames, and the slot
progs/xdp_cpumap_steer6.bpfd picks for a frame (by the model of support.flowhash)."""

from __future__ import annotations

import ipaddress

from scapy.layers.inet import TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from support.flowhash import flow_hash


def words(raw: bytes) -> list[int]:
    """An address's bytes as the words hash() takes: 4 bytes each read little-endian (the
    value a be32 field holding them has), a trailing 2 bytes zero-extended."""
    return [int.from_bytes(raw[i : i + 4], "little") for i in range(0, len(raw), 4)]


def a6(text: str) -> bytes:
    return ipaddress.IPv6Address(text).packed


def be16(v: int) -> int:
    """The raw word of a be16 field with value ``v``."""
    return int.from_bytes(v.to_bytes(2, "big"), "little")


def flow_slot(frame: Ether, n: int) -> int:
    """The slot progs/xdp_cpumap_steer6.bpfd picks for ``frame`` with ``n`` CPUs."""
    ip6 = frame[IPv6]
    l4 = frame[UDP] if UDP in frame else frame[TCP]
    proto = 17 if UDP in frame else 6
    ws = words(a6(ip6.src)) + words(a6(ip6.dst)) + [proto, be16(l4.sport), be16(l4.dport)]
    return flow_hash(*ws) % n
