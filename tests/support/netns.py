"""Test utilities: network namespaces, veth pairs, sending and capturing packets.

Every object made here carries a unique suffix and is removed when its context exits,
also on failure.  Traffic only goes over the veth pair the context made, between two
namespaces it made (nothing touches the root namespace's addresses or routes).  Every
send/receive loop is bounded in count and time.  Uses bpfdsl.kernel.netlink (the project's one
rtnetlink module) and plain sockets; namespaces are entered with setns(), not
``ip netns exec`` (which remounts /sys and hides /sys/fs/bpf).
"""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field

from bpfdsl.abi.net import ETH_P_ALL
from bpfdsl.kernel import netlink
from bpfdsl.runtime.packets import udp_frame


def unique(prefix: str) -> str:
    """``prefix`` + 6 random hex digits (interface names must stay <= 15 characters)."""
    name = f"{prefix}{uuid.uuid4().hex[:6]}"
    assert len(name) <= 15, name
    return name


@dataclass
class VethNet:
    """A veth pair between two test namespaces.

    ``xdp_ns``/``xdp_dev`` (address ``xdp_ip``, MAC ``xdp_mac``) is the end where tests
    attach XDP; ``peer_ns``/``peer_dev`` (``peer_ip``, ``peer_mac``) sends to it.
    """

    xdp_ns: str
    xdp_dev: str
    xdp_ip: str
    xdp_mac: str
    peer_ns: str
    peer_dev: str
    peer_ip: str
    peer_mac: str
    extra_cleanup: list = field(default_factory=list)

    @contextmanager
    def in_xdp_ns(self) -> Iterator[None]:
        """Run the body in the XDP end's namespace (this thread only)."""
        with netlink.in_netns(self.xdp_ns):
            yield

    def nsenter(self, *argv: str) -> list[str]:
        """A command line running ``argv`` in the XDP namespace, keeping /sys/fs/bpf."""
        return ["nsenter", f"--net={netlink.NETNS_RUN_DIR}/{self.xdp_ns}", *argv]

    def bpfdsl(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        """Run ``python -m bpfdsl ARGS`` inside the XDP namespace; returns the completed process."""
        return subprocess.run(
            self.nsenter(sys.executable, "-m", "bpfdsl", *args),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def send_udp(
        self,
        dport: int,
        count: int,
        *,
        sport: int = 40000,
        payload: bytes = b"bpfdsl-test",
        interval: float = 0.0,
    ) -> int:
        """Send ``count`` UDP frames from the peer to ``xdp_ip:dport`` (raw, no ARP needed).

        Returns the number sent.  Frames carry a sequence number in the IP id field.
        """
        frames = [
            udp_frame(
                src_mac=self.peer_mac,
                dst_mac=self.xdp_mac,
                src_ip=self.peer_ip,
                dst_ip=self.xdp_ip,
                sport=sport,
                dport=dport,
                payload=payload,
                ident=i,
            )
            for i in range(count)
        ]
        return send_frames(self.peer_ns, self.peer_dev, frames, interval=interval)

    @contextmanager
    def udp_receiver(self, port: int) -> Iterator[UdpReceiver]:
        """A UDP socket bound to ``xdp_ip:port`` in the XDP namespace."""
        with netlink.in_netns(self.xdp_ns):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            # room for every frame of a bounded test stream (root: SO_RCVBUFFORCE = 33)
            s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)
            s.bind((self.xdp_ip, port))
            s.setblocking(False)
            yield UdpReceiver(s)
        finally:
            s.close()


class UdpReceiver:
    """Counts datagrams arriving on a bound UDP socket."""

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def drain(self, *, quiet: float = 0.3, limit: float = 5.0, max_count: int = 1_000_000) -> int:
        """Datagrams received until nothing arrives for ``quiet`` s (at most ``limit`` s)."""
        n = 0
        end = time.monotonic() + limit
        while n < max_count and time.monotonic() < end:
            r, _w, _x = select.select([self.sock], [], [], quiet)
            if not r:
                break
            while n < max_count:
                try:
                    self.sock.recv(65536)
                except BlockingIOError:
                    break
                n += 1
        return n


def send_frames(
    ns: str, dev: str, frames: list[bytes], *, interval: float = 0.0, time_limit: float = 20.0
) -> int:
    """Send raw Ethernet ``frames`` out of ``dev`` in namespace ``ns`` (AF_PACKET).

    Bounded by ``len(frames)`` and ``time_limit`` seconds; returns how many were sent.
    """
    with netlink.in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sent = 0
    end = time.monotonic() + time_limit
    try:
        s.bind((dev, 0))
        for f in frames:
            if time.monotonic() > end:
                break
            for _ in range(100):  # ENOBUFS: the tx queue is full, wait a moment
                try:
                    s.send(f)
                    break
                except OSError:
                    time.sleep(0.001)
            else:
                continue
            sent += 1
            if interval:
                time.sleep(interval)
    finally:
        s.close()
    return sent


@contextmanager
def capture(ns: str, dev: str) -> Iterator[Capture]:
    """Capture frames arriving on ``dev`` in namespace ``ns`` (AF_PACKET, incoming only)."""
    with netlink.in_netns(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        s.bind((dev, 0))
        s.setblocking(False)
        yield Capture(s)
    finally:
        s.close()


class Capture:
    """Frames seen by a capture socket; :meth:`frames` reads them (bounded)."""

    PACKET_OUTGOING = 4

    def __init__(self, sock: socket.socket):
        self.sock = sock

    def frames(
        self, *, quiet: float = 0.3, limit: float = 5.0, max_count: int = 100_000
    ) -> list[bytes]:
        """Incoming frames until nothing arrives for ``quiet`` s (at most ``limit`` s)."""
        out: list[bytes] = []
        end = time.monotonic() + limit
        while len(out) < max_count and time.monotonic() < end:
            r, _w, _x = select.select([self.sock], [], [], quiet)
            if not r:
                break
            while len(out) < max_count:
                try:
                    data, addr = self.sock.recvfrom(65536)
                except BlockingIOError:
                    break
                if addr[2] != self.PACKET_OUTGOING:
                    out.append(data)
        return out


@contextmanager
def veth_net(prefix: str = "bd") -> Iterator[VethNet]:
    """Two fresh namespaces joined by a veth pair with IPv4 addresses and static ARP.

    Yields a :class:`VethNet`; removes both namespaces (and with them the pair) on exit.
    """
    tag = uuid.uuid4().hex[:6]
    xdp_ns, peer_ns = f"{prefix}x{tag}", f"{prefix}p{tag}"
    # a random /30 in the benchmarking range 198.18.0.0/15 (RFC 2544), per test
    n = int(tag, 16) % (1 << 15)
    base = (198 << 24) | (18 << 16) | (n << 2)
    ip = lambda k: socket.inet_ntoa((base + k).to_bytes(4, "big"))  # noqa: E731
    with netlink.veth_pair(
        f"{prefix}p{tag}",
        f"{prefix}x{tag}",
        netns_a=peer_ns,
        netns_b=xdp_ns,
        addrs=(ip(2), ip(1)),
        prefixlen=30,
        neighbours=True,
    ) as p:
        net = VethNet(xdp_ns, p.b.name, ip(1), p.b.mac, peer_ns, p.a.name, ip(2), p.a.mac)
        try:
            yield net
        finally:
            for fn in reversed(net.extra_cleanup):
                fn()


def bpffs_dir(prefix: str = "bpfdsl_test_") -> str:
    """A fresh, unique directory path under /sys/fs/bpf (not created)."""
    return os.path.join("/sys/fs/bpf", f"{prefix}{uuid.uuid4().hex[:10]}")


@contextmanager
def veth_here(prefix: str = "bh") -> Iterator[int]:
    """A veth pair with one end in this network namespace (down, no address) and its
    peer in a fresh namespace; yields this end's ifindex: a device to load device-bound
    XDP programs for.  Removes the namespace and the pair on exit."""
    ns = unique(f"{prefix}n")
    with netlink.veth_pair(netns_b=ns, up=False, prefix=prefix) as p:
        yield p.a.ifindex


@contextmanager
def veth_star(
    hub: str,
    ports: Sequence[tuple[str, str, str]],
    *,
    addrs: Sequence[tuple[str | None, str | None]] | None = None,
    prefixlen: int = 24,
    disable_ipv6: bool = False,
) -> Iterator[list[netlink.VethPair]]:
    """A fresh namespace ``hub`` (a router, a switch) with one veth pair per port
    ``(hub_dev, spoke_dev, spoke_ns)``: end ``a`` is ``hub_dev`` in ``hub``, end ``b`` is
    ``spoke_dev`` in its own fresh namespace ``spoke_ns``; both up.  ``addrs``: per port,
    the IPv4 addresses of (a, b) or None, each ``/prefixlen``.  ``disable_ipv6``: no
    IPv6 on the ends (no router solicitation, DAD or MLD frames on the wire).  Yields the
    pairs in port order; removes every namespace and pair on exit, also on failure
    (:func:`bpfdsl.kernel.netlink.netns` and :func:`~bpfdsl.kernel.netlink.veth_pair`)."""
    with ExitStack() as stack:
        stack.enter_context(netlink.netns(hub))
        pairs = [
            stack.enter_context(
                netlink.veth_pair(
                    hub_dev,
                    spoke_dev,
                    netns_a=hub,
                    netns_b=spoke_ns,
                    make_netns=(False, True),
                    addrs=addrs[i] if addrs else (None, None),
                    prefixlen=prefixlen,
                    disable_ipv6=disable_ipv6,
                )
            )
            for i, (hub_dev, spoke_dev, spoke_ns) in enumerate(ports)
        ]
        yield pairs
