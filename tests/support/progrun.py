"""Programs loaded into the kernel and run with BPF_PROG_TEST_RUN on packets built with
scapy (an independent packet library that also checks checksums): :class:`Prog` and the
frames and checksum checks the tests of program behaviour share."""

from __future__ import annotations

import re
import struct

from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.runtime.loader import load_collection
from support.paths import PROGS

XDP_ABORTED, XDP_DROP, XDP_PASS, XDP_TX = 0, 1, 2, 3
MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


class Prog:
    """A compiled, loaded object (source text or progs/ file name); closes fds on exit."""

    def __init__(self, src: str, config: dict | None = None):
        from bpfdsl.obj.collection import read_object
        from bpfdsl.runtime.loader import load_collection

        if src.endswith(".bpfd"):
            res = compile_file(PROGS / src)
        else:
            res = compile_source(src, "test.bpfd")
        self.name = res.programs[0]
        self.coll = load_collection(read_object(res.obj), config=config or {})

    def __enter__(self) -> Prog:
        return self

    def __exit__(self, *exc) -> None:
        self.coll.close()

    def run(self, pkt) -> tuple[int, bytes]:
        from bpfdsl.kernel import syscall

        r = syscall.prog_test_run(self.coll.programs[self.name].fd, bytes(pkt))
        return r.retval, r.data_out

    def verdict(self, pkt) -> int:
        return self.run(pkt)[0]

    def counter(self, map_name: str, key: int = 0) -> int:
        """Sum over CPUs of a u64 (per-CPU) array slot."""
        from bpfdsl.kernel import syscall

        m = self.coll.maps[map_name]
        size = syscall.percpu_value_size(8) if m.map_type in (5, 6, 10) else 8
        raw = syscall.map_lookup(m.fd, struct.pack("<I", key), size)
        return sum(struct.unpack_from("<Q", raw, o)[0] for o in range(0, size, 8))

    def update(self, map_name: str, key: bytes, value: bytes) -> None:
        from bpfdsl.kernel import syscall

        syscall.map_update(self.coll.maps[map_name].fd, key, value)

    def lookup(self, map_name: str, key: bytes) -> bytes | None:
        from bpfdsl.kernel import syscall

        m = self.coll.maps[map_name]
        return syscall.map_lookup(m.fd, key, m.value_size)


def scapy():
    from scapy.all import (  # noqa: F401
        ICMP,
        IP,
        TCP,
        UDP,
        Dot1AD,
        Dot1Q,
        Ether,
        IPv6,
        IPv6ExtHdrDestOpt,
        IPv6ExtHdrFragment,
        IPv6ExtHdrHopByHop,
        IPv6ExtHdrRouting,
        Raw,
    )

    return locals()


S = scapy()
Ether, IP, IPv6, UDP, TCP, ICMP = (S[n] for n in ("Ether", "IP", "IPv6", "UDP", "TCP", "ICMP"))


def eth(t=None):
    return Ether(src=MAC_A, dst=MAC_B) if t is None else Ether(src=MAC_A, dst=MAC_B, type=t)


def udp4(dport=9999, src="192.0.2.1", dst="192.0.2.2", payload=b"x" * 18):
    return eth() / IP(src=src, dst=dst) / UDP(sport=1234, dport=dport) / payload


def cuts(pkt, start: int, end: int) -> list[bytes]:
    """The frame cut to every length in [start, end) (XDP test runs need >= 14 bytes)."""
    b = bytes(pkt)
    return [b[:n] for n in range(max(start, 14), end)]


def checksums_ok(frame: bytes) -> None:
    """scapy recomputes every checksum of ``frame``: each must equal the one sent."""
    p = Ether(frame)
    for layer, field in (
        (S["IP"], "chksum"),
        (S["UDP"], "chksum"),
        (S["TCP"], "chksum"),
        (S["ICMP"], "chksum"),
    ):
        if layer in p:
            got = p[layer].getfieldval(field)
            q = Ether(frame)
            q[layer].setfieldval(field, None)
            want = Ether(bytes(q))[layer].getfieldval(field)
            assert got == want, f"{layer.__name__} checksum {got:#06x} != {want:#06x}"


def kernel_processed(spec, log_size: int = 1 << 22) -> int:
    """The kernel's "processed N insns" for the object's one program (``spec``: a
    CollectionSpec, loaded with its BTF at log level 1|4)."""
    with load_collection(spec, log_level=1 | 4, log_size=log_size) as coll:
        log = next(iter(coll.programs.values())).log
    return int(re.search(r"processed (\d+) insns", log).group(1))
