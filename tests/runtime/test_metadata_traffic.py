"""XDP metadata on real traffic, on a veth pair between two namespaces the test makes:
progs/xdp_meta_mark.bpfd leaves a mark in front of each UDP frame (adjust_meta + meta(S));
the cpumap's on-CPU program reads it and counts per mark, an AF_XDP reader finds the mark
bytes just before the frame in its UMEM; and the rx_hash kfunc of a device-bound program
returns 0 and the skb's nonzero flow hash on veth (drivers/net/veth.c veth_xdp_rx_hash:
the frame comes through veth's XDP path as an skb), rx_timestamp 0 and the skb's hardware
timestamp (0: no NIC stamped it)."""

from __future__ import annotations

import errno
import struct
import time
from collections.abc import Callable

import pytest
from support.netns import VethNet, veth_net
from support.paths import PROGS, ROOT
from support.redirect_testlib import load_bpfdsl, quiet_ipv6

from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.attach import attach_xdp
from bpfdsl.runtime.cpumap import cpumap_set
from bpfdsl.runtime.loader import load_collection
from bpfdsl.runtime.xsk import XskSocket, xsk_map_set

pytestmark = pytest.mark.kernel
MARK_PROG = PROGS / "xdp_meta_mark.bpfd"
RX_HASH_PROG = ROOT / "tests" / "data" / "metadata" / "xdp_rx_hash.bpfd"
MARK_MAGIC = 0x4B52414D  # progs/xdp_meta_mark.bpfd


def until(cond: Callable[[], bool], limit: float = 5.0) -> bool:
    """Poll ``cond`` every 20 ms for at most ``limit`` seconds."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def u64_at(map_fd, key: int) -> int:
    raw = S.map_lookup(map_fd, struct.pack("<I", key), 8)
    return 0 if raw is None else struct.unpack("<Q", raw)[0]


def attach(net: VethNet, prog_fd) -> object:
    with net.in_xdp_ns():
        return attach_xdp(prog_fd, net.xdp_dev, mode="native")


def test_the_on_cpu_program_counts_the_mark_per_port() -> None:
    with veth_net("m17m") as net, load_bpfdsl(MARK_PROG, {"mark_cpu": 0}) as ld:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        cpumap_set(ld.maps["cpu_map"], 0, 192, int(ld.progs["count_marks"]), map_name="cpu_map")
        att = attach(net, ld.progs["mark_to_cpu"])
        try:
            assert net.send_udp(7001, 20) == 20 and net.send_udp(7002, 30) == 30
            marks = ld.maps["marks"]
            assert until(lambda: u64_at(marks, 7001) >= 20 and u64_at(marks, 7002) >= 30)
            assert (u64_at(marks, 7001), u64_at(marks, 7002)) == (20, 30)
            assert u64_at(marks, 7003) == 0  # no frame to that port: no count
        finally:
            if att.link_fd is not None:
                att.link_fd.close()


def test_the_af_xdp_reader_sees_the_mark_in_front_of_the_frame() -> None:
    with veth_net("m17s") as net, load_bpfdsl(MARK_PROG) as ld:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        with net.in_xdp_ns():
            sock = XskSocket(netlink.ifindex(net.xdp_dev), 0)
        att = None
        with sock:
            xsk_map_set(ld.maps["xsks"], 0, sock.fileno(), map_name="xsks")
            att = attach(net, ld.progs["mark_to_xsk"])
            try:
                assert net.send_udp(7003, 10, payload=b"marked-frame") == 10
                got: list[tuple[bytes, bytes]] = []
                for _ in range(50):  # bounded: 50 x 0.1 s
                    got += sock.recv_meta(8, timeout=0.1)
                    if len(got) >= 10:
                        break
            finally:
                if att is not None and att.link_fd is not None:
                    att.link_fd.close()
        assert len(got) == 10
        assert all(f.endswith(b"marked-frame") for _m, f in got)
        assert {m for m, _f in got} == {struct.pack("<II", 7003, MARK_MAGIC)}


def test_rx_hash_on_veth_is_the_flow_hash() -> None:
    spec = read_object(compile_file(RX_HASH_PROG).obj)
    with veth_net("m17h") as net:
        with net.in_xdp_ns():
            ifindex = netlink.ifindex(net.xdp_dev)
            coll = load_collection(spec, pinning=False, ifindex=ifindex)
        with coll:
            out = coll.maps["rx_hash_out"].fd
            att = attach(net, coll.programs["rx_hash_read"].fd)
            try:
                hashes = []
                for sport in (40000, 40000, 40001):
                    seen = u64_at(out, 3)
                    assert net.send_udp(9000, 5, sport=sport) == 5
                    assert until(lambda s=seen: u64_at(out, 3) >= s + 5)
                    assert u64_at(out, 0) == 0  # the kfunc returned 0: veth had the hint
                    hashes.append(u64_at(out, 1))
            finally:
                if att.link_fd is not None:
                    att.link_fd.close()
        # nonzero, the same for one flow, another for another flow (skb_get_hash)
        # (equal hashes for one flow are not asserted: each send is a new socket, and a UDP
        # socket's skb hash may come from its random sk_txhash; CI saw two values for one flow)
        assert all(h != 0 for h in hashes), hashes


RX_TIMESTAMP = """license "GPL"
// [0] the kfunc's return (0, or a negative errno as u32), [1] the timestamp, [2] frames seen,
// [3] rx_vlan_tag's return
map ts_out: array<u32, u64>(max_entries: 4)

xdp(dev_bound) fn ts_read(ctx) {
    let ts: u64 = 1
    let err = rx_timestamp(ts)
    ts_out[0] = (err as u32) as u64
    ts_out[1] = ts
    ts_out[2] += 1
    let proto: be16 = 0
    let tci: u16 = 0
    ts_out[3] = (rx_vlan_tag(proto, tci) as u32) as u64
    return XDP_PASS
}
"""


def test_rx_timestamp_on_veth_returns_the_skb_hardware_stamp() -> None:
    """veth has the rx_timestamp hint (drivers/net/veth.c veth_xdp_rx_timestamp): for a
    frame that comes through veth's XDP path as an skb the kfunc returns 0 and writes the
    skb's hardware timestamp, which is 0 for traffic a socket sent (no NIC stamped it);
    rx_vlan_tag of an untagged frame is -ENODATA."""
    spec = read_object(compile_source(RX_TIMESTAMP, "rx_timestamp.bpfd").obj)
    with veth_net("habits") as net:
        with net.in_xdp_ns():
            coll = load_collection(spec, pinning=False, ifindex=netlink.ifindex(net.xdp_dev))
        with coll:
            out = coll.maps["ts_out"].fd
            att = attach(net, coll.programs["ts_read"].fd)
            try:
                assert net.send_udp(9000, 5) == 5
                assert until(lambda: u64_at(out, 2) >= 5)
            finally:
                if att.link_fd is not None:
                    att.link_fd.close()
            # the kfunc returned 0 (veth has the hint) and wrote over the 1 the local held
            assert (u64_at(out, 0), u64_at(out, 1)) == (0, 0)
            assert u64_at(out, 3) == (1 << 32) - errno.ENODATA
