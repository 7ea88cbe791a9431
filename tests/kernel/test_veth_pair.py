"""bpfdsl.kernel.netlink.veth_pair: the one set-up of namespaces and veth pairs: it yields
interfaces that carry frames, and removes everything it made (also when the body raises
or is interrupted), and nothing it did not make."""

from __future__ import annotations

import errno
import json
import subprocess
from contextlib import ExitStack

import pytest
from support.netns import capture, send_frames

from bpfdsl.kernel import netlink
from bpfdsl.runtime.packets import udp_frame

pytestmark = pytest.mark.kernel

TAG = "vethpair"  # every name these tests make contains it


def _ours() -> tuple[list[str], list[str]]:
    """(namespaces, root-namespace links) whose names contain TAG, as iproute2 lists them."""
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=30)
    return (
        sorted(line.split()[0] for line in ns.stdout.splitlines() if TAG in line),
        sorted(
            line.split(":")[1].strip().split("@")[0]
            for line in links.stdout.splitlines()
            if TAG in line
        ),
    )


def _frame(p: netlink.VethPair, ident: int) -> bytes:
    assert p.a.address and p.b.address
    return udp_frame(
        src_mac=p.a.mac,
        dst_mac=p.b.mac,
        src_ip=p.a.address,
        dst_ip=p.b.address,
        sport=40000,
        dport=9,
        payload=b"vethpair",
        ident=ident,
    )


def test_two_namespaces_carry_a_frame_and_leave_nothing():
    before = _ours()
    ns_a, ns_b = netlink.unique_name(f"{TAG}-a"), netlink.unique_name(f"{TAG}-b")
    with netlink.veth_pair(
        netns_a=ns_a,
        netns_b=ns_b,
        addrs=("198.18.7.1", "198.18.7.2"),
        prefixlen=30,
        neighbours=True,
        disable_ipv6=True,
        prefix=TAG,
    ) as p:
        assert p.made_netns == (ns_a, ns_b)
        assert TAG in p.a.name and TAG in p.b.name and p.a.name != p.b.name
        assert len(p.a.name) <= 15
        assert {ns_a, ns_b} <= set(_ours()[0])
        with netlink.in_netns(ns_b):
            assert netlink.ifindex(p.b.name) == p.b.ifindex
            facts = netlink.link_facts(p.b.ifindex)
        assert facts is not None and facts.kind == "veth" and facts.lower_up
        with capture(ns_b, p.b.name) as cap:
            assert send_frames(ns_a, p.a.name, [_frame(p, i) for i in range(3)]) == 3
            got = [f for f in cap.frames(limit=3.0) if b"vethpair" in f]
        assert len(got) == 3  # only our frames: IPv6 is off, ARP is static
        assert got[0][:6] == bytes.fromhex(p.b.mac.replace(":", ""))
    assert _ours() == before


@pytest.mark.parametrize("exc", [RuntimeError, KeyboardInterrupt])
def test_body_raising_still_removes_namespace_and_link(exc):
    before = _ours()
    ns = netlink.unique_name(f"{TAG}-x")
    with pytest.raises(exc):
        with netlink.veth_pair(netns_b=ns, prefix=TAG, mtu=1400) as p:
            assert p.a.netns is None and p.b.netns == ns
            here = _ours()
            assert ns in here[0] and p.a.name in here[1]  # the test can see what it made
            with open(f"/sys/class/net/{p.a.name}/mtu") as f:
                assert int(f.read()) == 1400
            raise exc
    assert _ours() == before


def test_taken_name_is_refused_and_not_deleted():
    before = _ours()
    with netlink.veth_pair(prefix=TAG, up=False) as outer:
        assert outer.made_netns == ()
        with pytest.raises(Exception) as e:  # pyroute2 NetlinkError EEXIST
            with netlink.veth_pair(outer.a.name, prefix=TAG):
                pass  # pragma: no cover
        assert getattr(e.value, "code", None) == 17
        assert netlink.ifindex(outer.a.name) == outer.a.ifindex  # still there
    assert _ours() == before


def test_existing_namespace_is_used_and_kept():
    with netlink.netns(netlink.unique_name(f"{TAG}-k")) as ns:
        with netlink.veth_pair(netns_a=ns, netns_b=ns, make_netns=False, prefix=TAG) as p:
            assert p.made_netns == ()
            with netlink.in_netns(ns):
                assert netlink.ifindex(p.a.name) == p.a.ifindex
        assert ns in _ours()[0]
        with netlink.in_netns(ns):
            assert TAG not in " ".join(netlink.interface_names())  # the pair is gone


def _details(ns: str, dev: str) -> dict:
    """``ip -d -j link show DEV`` in ``ns``: iproute2's view, independent of pyroute2."""
    out = subprocess.run(
        ["ip", "-n", ns, "-d", "-j", "link", "show", dev],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    (link,) = json.loads(out.stdout)
    return link


def test_pairs_share_a_hub_namespace_with_queues_and_leave_nothing():
    """netns() makes the hub; each veth_pair(make_netns=(False, True)) makes only its spoke's
    namespace; ``queues`` sets both ends' rx/tx queue counts; exit removes all of it."""
    before = _ours()
    hub = netlink.unique_name(f"{TAG}-h")
    spokes = [netlink.unique_name(f"{TAG}-s") for _ in range(2)]
    with netlink.netns(hub) as h:
        assert h == hub and hub in _ours()[0]
        with ExitStack() as stack:
            pairs = [
                stack.enter_context(
                    netlink.veth_pair(
                        netns_a=hub, netns_b=s, make_netns=(False, True), queues=4, prefix=TAG
                    )
                )
                for s in spokes
            ]
            assert [p.made_netns for p in pairs] == [(s,) for s in spokes]
            for p in pairs:
                for end in (p.a, p.b):
                    link = _details(str(end.netns), end.name)
                    assert link["ifindex"] == end.ifindex and link["address"] == end.mac
                    assert (link["num_rx_queues"], link["num_tx_queues"]) == (4, 4)
            assert _details(hub, pairs[0].a.name)["link_netnsid"] is not None
        assert set(_ours()[0]) & set(spokes) == set()  # the spokes went with their pairs
        with netlink.in_netns(hub):
            assert TAG not in " ".join(netlink.interface_names())  # and the hub's ends
        with pytest.raises(OSError) as e:  # a taken name: refused, and the hub stays
            with netlink.netns(hub):
                pass  # pragma: no cover
        assert e.value.errno == errno.EEXIST and hub in _ours()[0]
    assert _ours() == before
    with pytest.raises(ValueError, match="both to be made and not"):
        with netlink.veth_pair(netns_a=hub, netns_b=hub, make_netns=(False, True)):
            pass  # pragma: no cover
    assert _ours() == before
