"""Throw-away network namespaces and veth pairs for the benchmarks
(:func:`bpfdsl.kernel.netlink.veth_pair`; iproute2 for the scripts' own commands).

Every name carries a random suffix; :class:`VethNs` removes its namespace (which takes the
veths and any XDP attached to them with it) in ``__exit__``, also after an exception or
Ctrl-C.  Commands run inside the namespace through ``nsenter --net=/run/netns/NAME`` rather
than ``ip netns exec``: the latter mounts a fresh sysfs, hiding /sys/fs/bpf pins.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from contextlib import ExitStack

import benchlib as B

from bpfdsl.kernel import netlink


class VethNs:
    """A namespace ``bpfb-XXXX`` holding veth pairs ``(a0, b0), (a1, b1), ...`` all up.

    ``pairs`` = number of veth pairs.  ``in_ns(cmd)`` prefixes a command with nsenter;
    ``ifindex(dev)`` reads an interface index inside the namespace.
    """

    def __init__(self, pairs: int = 1, *, mtu: int = 1500):
        self.suffix = secrets.token_hex(3)
        self.name = f"bpfb-{self.suffix}"
        self.pairs = [(f"va{i}-{self.suffix}", f"vb{i}-{self.suffix}") for i in range(pairs)]
        self.mtu = mtu
        self._stack: ExitStack | None = None

    def in_ns(self, cmd: Sequence[str]) -> list[str]:
        return ["nsenter", f"--net=/run/netns/{self.name}", *cmd]

    def ip(self, *args: str, check: bool = True):
        return B.run(["ip", "-n", self.name, *args], check=check)

    def ifindex(self, dev: str) -> int:
        out = self.ip("-o", "link", "show", "dev", dev).stdout
        return int(out.split(":", 1)[0])

    def __enter__(self) -> VethNs:
        B.require_root()
        B.require_tool("ip", "apt-get install iproute2")
        B.require_tool("nsenter", "apt-get install util-linux")
        with ExitStack() as stack:
            stack.callback(netlink.remove_netns, self.name)  # first: an interrupt may come
            netlink.create_netns(self.name)  # loopback up
            for a, b in self.pairs:
                stack.enter_context(
                    netlink.veth_pair(
                        a, b, netns_a=self.name, netns_b=self.name, make_netns=False, mtu=self.mtu
                    )
                )
            self._stack = stack.pop_all()
        return self

    def close(self) -> None:
        if self._stack is not None:
            stack, self._stack = self._stack, None
            stack.close()

    def __exit__(self, *exc) -> None:
        self.close()
