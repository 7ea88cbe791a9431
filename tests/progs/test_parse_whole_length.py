"""``parse`` of a variable-length header runs ``else`` when the packet does not hold the
header's whole length (C's ``pos + ihl * 4 > data_end``), on the kernel."""

from __future__ import annotations

import pytest
from support.progrun import IP, XDP_DROP, XDP_PASS, Prog, eth

pytestmark = pytest.mark.kernel

SRC = """
license "GPL"
xdp fn main(ctx) {
    let eh = parse ethernet else { return XDP_ABORTED }
    let ip = parse ipv4 else { return XDP_DROP }
    return XDP_PASS
}
"""


def test_ipv4_ihl_past_packet_end_runs_else():
    whole = bytes(eth() / IP(ihl=6, options=b"\x01\x01\x01\x01"))
    with Prog(SRC) as p:
        assert p.verdict(whole) == XDP_PASS
        assert p.verdict(whole[:-4]) == XDP_DROP  # ihl=6, only 20 IP bytes
