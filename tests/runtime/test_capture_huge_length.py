"""A capture whose length field claims gigabytes is refused as corrupt, also where memory is
limited: scapy reads a pcapng block's claimed length in one go, and the MemoryError reached
the user as a traceback (found by tests/fuzz/captures.py)."""

from __future__ import annotations

import resource
import struct
import subprocess
import sys

from support.paths import PCAPS, PROGS, ROOT


def _pcapng(block_len: int) -> bytes:
    """A section header block (pcapng spec 4.1) claiming ``block_len`` bytes, then an IDB."""
    shb = struct.pack("<IIIHHq", 0x0A0D0D0A, block_len, 0x1A2B3C4D, 1, 0, -1)
    shb += struct.pack("<I", 28)
    idb = struct.pack("<IIHHII", 1, 20, 1, 0, 65535, 20)
    return shb + idb


def _limited_1g() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, resource.RLIM_INFINITY))


def test_huge_pcapng_block_length_is_a_clean_error(tmp_path) -> None:
    cap = tmp_path / "huge.pcapng"
    cap.write_bytes(_pcapng(0xFFFFFFFC))
    proc = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "run", str(PROGS / "xdp_pass.bpfd"), "--pcap", str(cap),
         "--engine", "interp", "-q"],
        capture_output=True, text=True, timeout=120, cwd=ROOT, preexec_fn=_limited_1g,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert "error[bad-capture]" in proc.stderr and "invalid length 4294967292" in proc.stderr


def test_an_ordinary_capture_still_reads() -> None:
    from bpfdsl.runtime.packets import read_pcap

    assert len(read_pcap(PCAPS / "vrrp.pcap")) > 0
