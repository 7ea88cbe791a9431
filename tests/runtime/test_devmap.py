"""devmap forwarding on real veths (issue 4): frames sent into port A leave on port B and
arrive in B's namespace; the devmap program's counter matches; broadcast with
BPF_F_EXCLUDE_INGRESS reaches every port but the ingress one; devmap entries by interface
name, unknown interfaces and wrong program flavours are clear errors.

Topology (all namespaces made here, removed on exit): a router namespace R holding ports
r_a, r_b, r_c whose veth peers a, b, c sit in namespaces A, B, C.  The programs are the
clang-19 references (tests/data/c) and tests/data/redirect_c, loaded with bpftool until
the bpfdsl loader and the .bpfd programs land.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
import uuid
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import pytest
from support.netns import capture, send_frames, veth_star
from support.paths import DATA, ROOT
from support.redirect_testlib import (
    VARIANTS,
    Loaded,
    build_c,
    load_bpfdsl,
    load_object,
    load_variant,
    percpu_sum,
)

from bpfdsl.abi.flags import BPF_F_BROADCAST, BPF_F_EXCLUDE_INGRESS, XdpFlags
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.devmap import devmap_entries, devmap_set
from bpfdsl.runtime.packets import udp_frame

pytestmark = pytest.mark.kernel
N = 40  # frames per run


@dataclass
class Port:
    ns: str  # namespace of the outer end
    dev: str  # outer end (sends / captures)
    rdev: str  # router end (in R)
    mac: str


@dataclass
class Router:
    ns: str
    ports: dict[str, Port]


@contextmanager
def router(names: tuple[str, ...] = ("a", "b", "c")):
    """Namespace R with one veth port per name, peers in their own namespaces."""
    tag = uuid.uuid4().hex[:6]
    rns = f"dmr{tag}"
    spokes = [(f"dmr{n}{tag}", f"dm{n}{tag}", f"dm{n}{tag}") for n in names]
    with veth_star(rns, spokes, disable_ipv6=True) as pairs:
        ports = zip(names, pairs, strict=True)
        yield Router(rns, {n: Port(str(p.b.netns), p.b.name, p.a.name, p.b.mac) for n, p in ports})


def attach(ns: str, dev: str, prog: int) -> None:
    with netlink.in_netns(ns):
        netlink.xdp_set(netlink.ifindex(dev), int(prog), XdpFlags.DRV_MODE, dev=dev)


def frames(src: Port, marker: bytes, n: int = N) -> list[bytes]:
    return [
        udp_frame(
            src_mac=src.mac,
            dst_mac="ff:ff:ff:ff:ff:ff",
            src_ip="192.0.2.1",
            dst_ip="192.0.2.255",
            sport=5000,
            dport=6000,
            payload=marker + struct.pack("!I", i),
            ident=i,
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("devmap"))


@pytest.fixture(params=VARIANTS)
def fwd(objs, request) -> Loaded:
    with load_variant(request.param, objs, "xdp_devmap_forward") as ld:
        yield ld


@pytest.fixture
def passprog(objs) -> Loaded:
    with load_object(objs["xdp_pass"]) as ld:
        yield ld


def test_devmap_forward_a_to_b_arrives_in_b(fwd: Loaded, passprog: Loaded) -> None:
    """A frame entering r_a is redirected by the devmap_hash port table to r_b, runs the
    devmap program, leaves r_b and is captured on b in namespace B -- every frame, once."""
    with router(("a", "b")) as r:
        a, b = r.ports["a"], r.ports["b"]
        with netlink.in_netns(r.ns):
            ra_idx = netlink.ifindex(a.rdev)
            got_idx = devmap_set(
                fwd.maps["tx_ports"],
                ra_idx,
                b.rdev,
                fwd.progs["egress"],
                map_name="tx_ports",
                prog_name="egress",
            )
            assert got_idx == netlink.ifindex(b.rdev)
            (entry,) = devmap_entries(fwd.maps["tx_ports"])
            assert (entry.key, entry.ifname) == (ra_idx, b.rdev) and entry.prog_id != 0
        attach(r.ns, a.rdev, fwd.progs["forward"])
        attach(b.ns, b.dev, passprog.progs["xdp_pass"])  # veth rx of redirected frames (NAPI)
        marker = b"DEVMAP-" + uuid.uuid4().bytes[:8]
        with capture(b.ns, b.dev) as cap_b, capture(a.ns, a.dev) as cap_a:
            assert send_frames(a.ns, a.dev, frames(a, marker)) == N
            got = [f for f in cap_b.frames() if marker in f]
            back = [f for f in cap_a.frames(quiet=0.1) if marker in f]
        seqs = sorted(struct.unpack("!I", f[f.index(marker) + len(marker) :][:4])[0] for f in got)
        assert seqs == list(range(N)), "every frame arrives on b exactly once"
        assert back == []
        assert percpu_sum(fwd.maps["egress_count"], 0) == N


BPFD_BROADCAST = DATA / "redirect_bpfd" / "xdp_devmap_broadcast.bpfd"


@pytest.mark.parametrize(
    ("source", "exclude"),
    [("clang", True), ("clang", False), ("bpfd", True)],
    ids=["exclude_ingress", "all_ports", "bpfd_exclude_ingress"],
)
def test_devmap_broadcast_reaches_every_port_but_ingress(
    objs, passprog: Loaded, source: str, exclude: bool
) -> None:
    """redirect_map(ports, 0, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS) from r_a: b and c get
    every frame, a none; without EXCLUDE_INGRESS a gets them back too (so the check can fail).
    The clang program takes its flags from a config map; the .bpfd one has them in the code."""
    flags = BPF_F_BROADCAST | (BPF_F_EXCLUDE_INGRESS if exclude else 0)
    if source == "clang":
        loading = load_object(objs["xdp_devmap_broadcast"])
    else:
        loading = load_bpfdsl(BPFD_BROADCAST)
    with loading as bcast, router() as r:
        with netlink.in_netns(r.ns):
            for slot, name in enumerate("abc"):
                devmap_set(bcast.maps["ports"], slot, r.ports[name].rdev, map_name="ports")
        if source == "clang":
            S.map_update(bcast.maps["config"], struct.pack("<I", 0), struct.pack("<Q", flags))
        attach(r.ns, r.ports["a"].rdev, bcast.progs["broadcast"])
        for p in r.ports.values():
            attach(p.ns, p.dev, passprog.progs["xdp_pass"])
        marker = b"BCAST-" + uuid.uuid4().bytes[:8]
        a = r.ports["a"]
        with ExitStack() as st:
            caps = {n: st.enter_context(capture(p.ns, p.dev)) for n, p in r.ports.items()}
            assert send_frames(a.ns, a.dev, frames(a, marker)) == N
            counts = {n: sum(marker in f for f in c.frames()) for n, c in caps.items()}
        assert counts == {"a": 0 if exclude else N, "b": N, "c": N}


def test_devmap_unknown_interface_is_clear_error(fwd: Loaded) -> None:
    with pytest.raises(DiagnosticError) as ei:
        devmap_set(fwd.maps["tx_ports"], 1, "nosuchdev0", map_name="tx_ports")
    assert "no network interface named 'nosuchdev0'" in str(ei.value)


def test_devmap_entry_rejects_plain_xdp_program(fwd: Loaded) -> None:
    """The kernel answers a bare EINVAL; we name the program and the flavour it needs."""
    with pytest.raises(DiagnosticError) as ei:
        devmap_set(
            fwd.maps["tx_ports"],
            1,
            "lo",
            fwd.progs["forward"],
            map_name="tx_ports",
            prog_name="forward",
        )
    msg = str(ei.value)
    assert "devmap-wrong-program" in msg and "'forward'" in msg and "xdp/devmap" in msg
    assert devmap_entries(fwd.maps["tx_ports"]) == []


def test_devmap_program_cannot_attach_to_interface(fwd: Loaded) -> None:
    from bpfdsl.runtime.attach import attach_xdp

    with router(("a",)) as r:
        with netlink.in_netns(r.ns), pytest.raises(DiagnosticError) as ei:
            attach_xdp(fwd.progs["egress"], r.ports["a"].rdev)
    assert "entry-program-on-interface" in str(ei.value)


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_cli_devmap_set_show_delete(objs) -> None:
    """`bpfdsl devmap set MAP KEY IFACE --netns NS --prog egress`, show, delete; an unknown
    interface and a plain XDP program are errors naming what is wrong (no traceback)."""
    pin = f"/sys/fs/bpf/bpfdsl_dm_{uuid.uuid4().hex[:8]}"
    with router(("a",)) as r:
        a = r.ports["a"]
        try:
            res = bpfdsl("load", str(objs["xdp_devmap_forward"]), "--pin-dir", pin)
            assert res.returncode == 0, res.stderr
            m = f"{pin}:tx_ports"
            res = bpfdsl("devmap", "set", m, "7", a.rdev, "--netns", r.ns, "--prog", "egress")
            assert res.returncode == 0, res.stderr
            res = bpfdsl("-j", "devmap", "show", m, "--netns", r.ns)
            (row,) = json.loads(res.stdout)
            assert (row["key"], row["iface"]) == (7, a.rdev) and row["prog_id"] > 0
            res = bpfdsl("devmap", "set", m, "8", "nosuchdev0", "--netns", r.ns)
            assert res.returncode == 3 and "no network interface named 'nosuchdev0'" in res.stderr
            res = bpfdsl("devmap", "set", m, "8", a.rdev, "--netns", r.ns, "--prog", "forward")
            assert res.returncode == 1 and "devmap-wrong-program" in res.stderr
            res = bpfdsl("-j", "devmap", "set", m, a.rdev, a.rdev, "--netns", r.ns)
            assert res.returncode == 0, res.stderr
            with netlink.in_netns(r.ns):
                assert json.loads(res.stdout)["key"] == netlink.ifindex(a.rdev)
            res = bpfdsl("devmap", "delete", m, str(json.loads(res.stdout)["key"]))
            assert res.returncode == 0, res.stderr
            res = bpfdsl("devmap", "delete", m, "7")
            assert res.returncode == 0 and "removed" in res.stdout
            assert json.loads(bpfdsl("-j", "devmap", "show", m).stdout) == []
            assert "Traceback" not in res.stderr
        finally:
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)
