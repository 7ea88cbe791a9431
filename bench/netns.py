"""Throw-away network namespaces and veth pairs for the benchmarks (iproute2 commands).

Every name carries a random suffix; :class:`VethNs` removes its namespace (which takes the
veths and any XDP attached to them with it) in ``__exit__``, also after an exception or
Ctrl-C.  Commands run inside the namespace through ``nsenter --net=/run/netns/NAME`` rather
than ``ip netns exec``: the latter mounts a fresh sysfs, hiding /sys/fs/bpf pins.
"""

from __future__ import annotations

import secrets
import subprocess
from collections.abc import Sequence

import benchlib as B


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
        self._made = False

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
        B.run(["ip", "netns", "add", self.name])
        self._made = True
        try:
            self.ip("link", "set", "lo", "up")
            for a, b in self.pairs:
                self.ip(
                    "link",
                    "add",
                    a,
                    "mtu",
                    str(self.mtu),
                    "type",
                    "veth",
                    "peer",
                    "name",
                    b,
                    "mtu",
                    str(self.mtu),
                )
                self.ip("link", "set", a, "up")
                self.ip("link", "set", b, "up")
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        if self._made:
            subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)
            self._made = False

    def __exit__(self, *exc) -> None:
        self.close()
