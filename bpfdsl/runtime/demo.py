"""``bpfdsl demo``: the main job end to end on a throw-away veth pair.

Compiles the packaged ``progs/xdp_udp_filter.bpfd``, loads it, attaches it (native XDP,
through a BPF link held by this process -- nothing is pinned) to the end of a fresh veth
pair that sits in a temporary network namespace, sends real UDP frames from the other end
(bounded), and reports what arrived at sockets and what the program's maps counted.
Everything is removed on exit, also on errors, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib import resources
from types import FrameType
from typing import NoReturn

from rich.console import Console
from rich.table import Table

from bpfdsl.abi.net import ETH_P_ALL
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import netlink
from bpfdsl.kernel.syscall import map_info
from bpfdsl.obj import collection as objfile
from bpfdsl.obj.spec import CollectionSpec
from bpfdsl.runtime import attach, loader
from bpfdsl.runtime.mapview import MapView
from bpfdsl.runtime.packets import udp_frame

PROGRAM = "xdp_udp_filter.bpfd"
MAX_PACKETS = 10_000


@dataclass
class DemoResult:
    """What the demo saw: per UDP port ``sent``/``arrived`` counts, the XDP ``mode``,
    map contents (name -> list of (key, value)), and the names it created."""

    mode: str
    namespace: str
    devs: tuple[str, str]
    ports: dict[int, dict[str, int]] = field(default_factory=dict)
    maps: dict[str, list] = field(default_factory=dict)
    blocked_port: int = 0

    def to_dict(self) -> dict:
        return {
            "mode": self.mode,
            "namespace": self.namespace,
            "devs": list(self.devs),
            "blocked_port": self.blocked_port,
            "ports": {str(p): v for p, v in self.ports.items()},
            "maps": self.maps,
        }


def source_text() -> str:
    """The packaged program's source (package ``bpfdsl.progs``)."""
    return resources.files("bpfdsl.progs").joinpath(PROGRAM).read_text()


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Turn SIGTERM into KeyboardInterrupt while the body runs (main thread only), so the
    ``finally`` blocks that remove namespaces, links and cgroups run on ``kill`` too."""

    def handler(_signum: int, _frame: FrameType | None) -> NoReturn:
        raise KeyboardInterrupt

    try:
        old = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def _wait_up(dev: str, limit: float = 3.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            with open(f"/sys/class/net/{dev}/operstate") as f:
                if f.read().strip() == "up":
                    return
        except OSError:
            pass
        time.sleep(0.02)


def run_demo(
    *, packets: int = 20, port: int = 9999, mode: str = "native", allowed_port: int | None = None
) -> DemoResult:
    """Run the demo; returns what it measured.  Raises DiagnosticError on failure, after
    removing everything it made."""
    if not 1 <= packets <= MAX_PACKETS:
        raise UsageError(error("bad-args", f"--packets {packets}: give 1..{MAX_PACKETS}"))
    if not 1 <= port <= 65535:
        raise UsageError(error("bad-args", f"--port {port}: give 1..65535"))
    allowed = allowed_port or (port + 1 if port < 65535 else port - 1)
    obj = compile_source(source_text(), f"progs/{PROGRAM}").obj
    spec = objfile.read_object(obj)
    config = _config_for(spec, port)
    tag = uuid.uuid4().hex[:6]
    ns, outer, inner = f"bpfdsl-demo-{tag}", f"bdo{tag}", f"bdi{tag}"
    n = int(tag, 16) % (1 << 15)
    base = (198 << 24) | (18 << 16) | (n << 2)  # a /30 of 198.18.0.0/15 (RFC 2544)
    inner_ip = socket.inet_ntoa((base + 1).to_bytes(4, "big"))
    outer_ip = socket.inet_ntoa((base + 2).to_bytes(4, "big"))
    result = DemoResult(mode, ns, (outer, inner), blocked_port=port)
    with sigterm_as_interrupt(), ExitStack() as stack:
        # removal registered before each creation: a signal may come at any moment.
        # IPv6 off on both ends: no neighbour discovery chatter, the maps count our frames
        veth = stack.enter_context(
            netlink.veth_pair(
                outer,
                inner,
                netns_b=ns,
                addrs=(None, inner_ip),
                prefixlen=30,
                disable_ipv6=True,
            )
        )
        inner_mac, outer_mac = veth.b.mac, veth.a.mac
        coll = stack.enter_context(loader.load_collection(spec, config=config))
        prog = next(iter(coll.programs))
        with netlink.in_netns(ns):
            att = attach.attach_xdp(coll.programs[prog].fd, inner, mode=mode)
            socks = {p: socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for p in (port, allowed)}
        if att.link_fd is not None:
            stack.callback(att.link_fd.close)  # closing the link detaches the program
        for s in socks.values():
            stack.callback(s.close)
        for p, s in socks.items():
            s.bind((inner_ip, p))
            s.setblocking(False)
        _wait_up(outer)
        for p in (port, allowed):
            frames = [
                udp_frame(
                    src_mac=outer_mac,
                    dst_mac=inner_mac,
                    src_ip=outer_ip,
                    dst_ip=inner_ip,
                    sport=40000 + i % 1000,
                    dport=p,
                    payload=b"bpfdsl demo",
                    ident=i,
                )
                for i in range(packets)
            ]
            sent = _send(outer, frames)
            result.ports[p] = {"sent": sent, "arrived": _drain(socks[p], sent)}
        for name, m in coll.maps.items():
            result.maps[name] = _map_entries(m)
    return result


def _config_for(spec: CollectionSpec, port: int) -> dict[str, int]:
    ro = spec.data_sections.get(".rodata")
    names = set(ro.vars) if ro else set()
    for name in ("blocked_port", "BLOCKED_PORT", "port"):
        if name in names:
            return {name: port}
    if port != 9999:
        raise UsageError(error("bad-args", f"{PROGRAM} has no port config; it blocks 9999"))
    return {}


def _send(dev: str, frames: list[bytes], time_limit: float = 10.0) -> int:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    sent = 0
    end = time.monotonic() + time_limit
    try:
        s.bind((dev, 0))
        for f in frames:
            if time.monotonic() > end:
                break
            for _ in range(50):  # ENOBUFS: the queue is full for a moment
                try:
                    s.send(f)
                    sent += 1
                    break
                except OSError:
                    time.sleep(0.002)
    finally:
        s.close()
    return sent


def _drain(sock: socket.socket, expect: int, quiet: float = 0.3, limit: float = 3.0) -> int:
    n = 0
    end = time.monotonic() + limit
    while n < expect and time.monotonic() < end:
        r, _w, _x = select.select([sock], [], [], quiet)
        if not r:
            break
        while True:
            try:
                sock.recv(2048)
            except BlockingIOError:
                break
            n += 1
    return n


def _map_entries(m: loader.LoadedMap) -> list:
    try:
        with MapView(f"id:{int(map_info(m.fd).id)}") as v:
            if v.name.endswith((".rodata", ".bss", ".data")):
                return []
            out = []
            for k, val in v.entries(limit=64):
                value = None if val is None else v.value_value(val)
                if v.percpu and isinstance(value, list) and all(isinstance(x, int) for x in value):
                    value = sum(value)
                out.append([v.key_value(k), value])
            return out
    except Exception as e:  # the report must not fail on one map
        return [["error", str(e)]]


def render(r: DemoResult) -> None:
    """Print the demo's result as tables (rich)."""
    con = Console()
    con.print(
        f"[bold]bpfdsl demo[/]: progs/{PROGRAM} attached ({r.mode} XDP) to "
        f"{r.devs[1]} in namespace {r.namespace}; UDP sent from {r.devs[0]}"
    )
    t = Table("UDP port", "sent", "arrived at socket", "result")
    for p, c in r.ports.items():
        lost = c["sent"] - c["arrived"]
        res = (
            (f"dropped by XDP ({lost})" if lost else "all dropped?")
            if p == r.blocked_port
            else ("passed" if not lost else f"passed, {lost} missing")
        )
        t.add_row(str(p), str(c["sent"]), str(c["arrived"]), res)
    con.print(t)
    for name, entries in r.maps.items():
        if entries:
            con.print(f"map [bold]{name}[/]: " + ", ".join(f"{k} -> {v}" for k, v in entries))
    con.print("cleaned up: program detached, veth pair and namespace removed")


def main(
    *, packets: int = 20, port: int = 9999, mode: str = "native", as_json: bool = False
) -> int:
    """CLI entry: 0 when the filter dropped the blocked port and passed the other, 1 if not,
    3 when not root."""
    if os.geteuid() != 0:
        print(
            "error: bpfdsl demo needs root (it creates a network namespace and loads XDP); "
            "run: sudo bpfdsl demo",
            file=sys.stderr,
        )
        return 3
    r = run_demo(packets=packets, port=port, mode=mode)
    if as_json:
        print(json.dumps(r.to_dict(), indent=2))
    else:
        render(r)
    ok = all(
        (c["arrived"] == 0) if p == port else (c["arrived"] == c["sent"])
        for p, c in r.ports.items()
    )
    return 0 if ok else 1
