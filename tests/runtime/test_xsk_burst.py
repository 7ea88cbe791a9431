"""AF_XDP burst API (#25): frames sent to a veth arrive through ``rx_burst`` byte for
byte and go back to the fill ring with ``fill``; frames written with ``tx_alloc`` /
``write`` / ``tx_burst`` arrive at the peer byte for byte and come back through
``complete`` (copy mode on veth)."""

from __future__ import annotations

import contextlib
import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import bpfdsl
from bpfdsl.kernel.netlink import VethPair, in_netns, veth_pair
from bpfdsl.runtime import xsk as xsk_mod
from bpfdsl.runtime.xsk import XskSocket, xsk_map_set

pytestmark = pytest.mark.kernel

SRC = """license "GPL"
map xsks: xskmap(max_entries: 4)
xdp fn to_xsk(ctx) {
    return redirect_map(xsks, ctx.rx_queue_index, XDP_PASS)
}
"""
ETHERTYPE = 0x88B5  # IEEE 802 local experimental: nothing else on the veth uses it


def _frame(dst: str, src: str, i: int) -> bytes:
    mac = bytes.fromhex
    return (
        mac(dst.replace(":", ""))
        + mac(src.replace(":", ""))
        + b"\x88\xb5"
        + i.to_bytes(4, "big") * 12
    )


@contextlib.contextmanager
def _socket_and_peer(
    name: str, **xsk_args: Any
) -> Iterator[tuple[VethPair, XskSocket, socket.socket]]:
    """A veth pair in two namespaces of its own: SRC attached to side a, an XskSocket
    (``xsk_args``) in slot 0 of its xskmap, and a raw socket of ETHERTYPE bound on side b
    (the peer); everything is removed on exit."""
    spec = bpfdsl.read_object(bpfdsl.compile_source(SRC, f"{name}.bpfd").obj)
    tag = uuid.uuid4().hex[:6]
    with (
        veth_pair(netns_a=f"{name}a{tag}", netns_b=f"{name}b{tag}", disable_ipv6=True) as v,
        bpfdsl.load_collection(spec, pinning=False) as coll,
    ):
        with in_netns(v.a.netns):
            bpfdsl.attach_xdp(coll.programs["to_xsk"].fd, v.a.name)
            xsk = XskSocket(v.a.ifindex, 0, **xsk_args)
        with in_netns(v.b.netns):
            peer = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETHERTYPE))
        with xsk, peer:
            peer.bind((v.b.name, ETHERTYPE))
            peer.settimeout(2)
            xsk_map_set(coll.maps["xsks"].fd, 0, xsk.fileno(), map_name="xsks")
            yield v, xsk, peer


def test_rx_and_tx_bursts_carry_the_bytes() -> None:
    with _socket_and_peer("xbur", frames=64, tx_frames=16) as (v, xsk, peer):
        a, b = v.a, v.b
        # 300 frames through a 64-frame UMEM: only works if fill() returns each burst
        sent = [_frame(a.mac, b.mac, i) for i in range(300)]
        got: list[bytes] = []
        for f in sent:
            peer.send(f)
            deadline = time.monotonic() + 2
            while True:
                burst = xsk.rx_burst(64)
                if burst or time.monotonic() > deadline:
                    break
                xsk.wait(0.01)
            got += [bytes(m) for m in burst.views()]
            assert xsk.fill(burst) == len(burst)
        assert got == sent
        # 100 frames out in bursts of 10 through a 16-frame TX pool: complete() must
        # give the chunks back
        out = [_frame(b.mac, a.mac, i) for i in range(100)]
        rcv: list[bytes] = []
        for i in range(0, 100, 10):
            t = xsk.tx_alloc(10)
            assert len(t) == 10
            for j in range(len(t)):
                t.write(j, out[i + j])
            assert xsk.tx_burst(t) == 10
            rcv += [peer.recv(2048) for _ in range(10)]
            deadline = time.monotonic() + 2
            done = 0
            while done < 10 and time.monotonic() < deadline:
                done += xsk.complete()
            assert done == 10
        assert rcv == out
        stats = xsk.statistics()
        assert stats.get("rx_invalid_descs", 0) == 0 and stats.get("tx_invalid_descs", 0) == 0


@pytest.mark.parametrize("step", ["C", "Python"])
def test_l2fwd_sends_each_frame_back_with_its_macs_swapped(step: str, monkeypatch) -> None:
    """XskSocket.l2fwd (xdpsock's l2fwd): 300 frames sent by the peer through a 64-chunk
    UMEM come back to it byte for byte with destination and source MAC swapped, through
    the C step (bpfdsl/runtime/_xsk.c) and the Python one; the socket counts no bad
    descriptor and every chunk returns to the fill ring."""
    if step == "C" and xsk_mod._xsk is None:
        pytest.skip("bpfdsl/runtime/_xsk.c not built (BPFDSL_COMPILE=1): Python step only")
    if step == "Python":
        monkeypatch.setattr(xsk_mod, "_xsk", None)
    with _socket_and_peer("xfw", frames=64, tx=True) as (v, xsk, peer):
        a, b = v.a, v.b
        sent = [_frame(a.mac, b.mac, i) for i in range(300)]
        back: list[bytes] = []
        for i in range(0, 300, 10):  # bursts of 10: more than the UMEM in all
            for f in sent[i : i + 10]:
                peer.send(f)
            deadline = time.monotonic() + 3
            fwd = 0
            while fwd < 10 and time.monotonic() < deadline:
                got = xsk.l2fwd(64)
                fwd += got
                if not got:
                    xsk.wait(0.01)
            assert fwd == 10, (i, fwd)
            back += [peer.recv(2048) for _ in range(10)]
        want = [f[6:12] + f[0:6] + f[12:] for f in sent]
        assert back == want
        deadline = time.monotonic() + 2
        while xsk._fwd and time.monotonic() < deadline:  # the last sends complete
            xsk.l2fwd(64)
        assert xsk._fwd == 0
        stats = xsk.statistics()
        assert stats.get("rx_invalid_descs", 0) == 0 and stats.get("tx_invalid_descs", 0) == 0
