"""The embedded benchmark setup: network namespaces and veth pairs made for one benchmark
and removed when it ends (also on errors, Ctrl-C and SIGTERM).

Two namespaces ``bpfdsl-bench-TAG-gen`` and ``bpfdsl-bench-TAG-dut`` joined by the veth
pair ``gen0`` <-> ``dut0``: the traffic generator sends out of ``gen0``, the program under
test runs on ``dut0`` (native XDP).  With ``egress``, a second pair ``egr1`` <-> ``snk1``
in the dut namespace is where devmap redirects go (``snk1`` runs a drop program, which
both counts arrivals and lets veth accept XDP frames: drivers/net/veth.c sends
ndo_xdp_xmit frames only to a peer with XDP or GRO on).  Addresses are 198.18.0.1/30
(gen0) and 198.18.0.2/30 (dut0) of the benchmarking range of RFC 2544, with static
neighbour entries; IPv6 is off on all four interfaces (``veth_pair(disable_ipv6=True)``),
so nothing but the benchmark's traffic is counted; gen0 computes its checksums itself
(transmit checksum offload off: a cpumap rebuilds redirected frames without the skb's
partial-checksum state, :func:`bpfdsl.kernel.ethtool.set_tx_checksum`).  The names inside
the namespaces are fixed: the namespaces are private to one benchmark.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

from bpfdsl.abi import insn
from bpfdsl.abi.prog_types import ProgramType, XdpAction
from bpfdsl.kernel import ethtool, netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import attach
from bpfdsl.runtime.demo import sigterm_as_interrupt

NS_PREFIX = "bpfdsl-bench-"  # every namespace a benchmark makes starts with this
GEN_IP, DUT_IP = "198.18.0.1", "198.18.0.2"  # RFC 2544 benchmarking range
GEN_DEV, DUT_DEV, EGRESS_DEV, SINK_DEV = "gen0", "dut0", "egr1", "snk1"


@dataclass(slots=True)
class BenchNet:
    """What :func:`bench_net` made: namespace names, MAC addresses (text) of gen0/dut0."""

    tag: str
    gen_ns: str
    dut_ns: str
    gen_mac: str
    dut_mac: str
    egress: bool = False

    @property
    def namespaces(self) -> tuple[str, str]:
        return (self.gen_ns, self.dut_ns)

    def ifindex(self, ns: str, dev: str) -> int:
        with netlink.in_netns(ns):
            return netlink.ifindex(dev)

    def netns_path(self, ns: str) -> str:
        return os.path.join(netlink.NETNS_RUN_DIR, ns)


def drop_program() -> S.Fd:
    """A two-instruction XDP program returning XDP_DROP (the sinks)."""
    code = insn.encode([insn.mov64_imm(0, int(XdpAction.DROP)), insn.exit_()])
    fd, _log = S.prog_load(ProgramType.XDP, code, "GPL", name="bpfdsl_sink")
    return fd


def attach_xdp(ns: str, dev: str, prog_fd: int, mode: str = "native") -> None:
    """Attach (or atomically replace) XDP on ``dev`` of namespace ``ns`` (netlink: the
    program stays until replaced or the namespace is removed)."""
    with netlink.in_netns(ns):
        attach.attach_xdp(int(prog_fd), dev, mode=mode, method="netlink", replace=True)


@contextmanager
def bench_net(*, egress: bool = False) -> Iterator[BenchNet]:
    """Make the namespaces and veth pairs (see the module docstring); remove them on exit.
    Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN for the namespaces)."""
    tag = netlink.unique_name("")  # 6 hex digits
    gen_ns, dut_ns = f"{NS_PREFIX}{tag}-gen", f"{NS_PREFIX}{tag}-dut"
    with sigterm_as_interrupt(), ExitStack() as stack:
        gen = stack.enter_context(
            netlink.veth_pair(
                GEN_DEV,
                DUT_DEV,
                netns_a=gen_ns,
                netns_b=dut_ns,
                addrs=(GEN_IP, DUT_IP),
                prefixlen=30,
                neighbours=True,
                disable_ipv6=True,
            )
        )
        with netlink.in_netns(gen_ns):
            ethtool.set_tx_checksum(GEN_DEV, False)
        if egress:
            stack.enter_context(
                netlink.veth_pair(
                    EGRESS_DEV,
                    SINK_DEV,
                    netns_a=dut_ns,
                    netns_b=dut_ns,
                    make_netns=False,
                    disable_ipv6=True,
                )
            )
        yield BenchNet(tag, gen_ns, dut_ns, gen.a.mac, gen.b.mac, egress)
