"""`bpfdsl run --fib-route ROUTE` / `--fib-routes FILE`: the routes the interpreter's
bpf_fib_lookup finds, so progs/xdp_router.bpfd is tested from the command line: the frame
is redirected through the devmap to the route's interface with the route's MACs, the TTL /
hop limit one lower and the IPv4 checksum right; longest prefix wins; a route without
neighbour (dmac:none) and no route pass the frame to the stack unchanged.  On the kernel
engine, whose fib_lookup reads the kernel's own tables, routes are refused; run in a
namespace whose kernel FIB holds the same route, the kernel gives the same answer as the
interpreter with ``--fib-route``."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import uuid

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from bpfdsl.cli import main
from bpfdsl.kernel import netlink

SMAC, DMAC, HOST = "02:00:00:00:00:03", "02:00:00:00:00:04", "02:00:00:00:00:01"
ROUTE3 = f"10.2.0.0/24=ifindex:3,smac:{SMAC},dmac:{DMAC}"


def v4(dst: str, ttl: int = 64) -> bytes:
    return bytes(
        Ether(src=HOST, dst="02:00:00:00:00:02")
        / IP(src="10.1.0.2", dst=dst, ttl=ttl)
        / UDP(sport=4000, dport=53)
        / b"query"
    )


def v6(dst: str) -> bytes:
    return bytes(
        Ether(src=HOST, dst="02:00:00:00:00:02")
        / IPv6(src="fd01::2", dst=dst, hlim=64)
        / UDP(sport=4000, dport=53)
        / b"query"
    )


def run(capsys, root, frame: bytes, *args: str) -> tuple[int, dict, str]:
    rc = main(["run", str(root / "progs" / "xdp_router.bpfd"), "--json", "--hex", frame.hex(),
               "--ctx", "ingress_ifindex=2", *args])  # fmt: skip
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out)["packets"][0] if rc == 0 else {}), cap.err


def run_err(capsys, root, frame: bytes, *args: str) -> tuple[int, str]:
    """A run whose error is read as a user reads it (text, not --json)."""
    rc = main(["run", str(root / "progs" / "xdp_router.bpfd"), "--hex", frame.hex(), *args])
    return rc, capsys.readouterr().err


def routed_checksum(frame: bytes, ttl: int) -> int:
    """The IPv4 header checksum of ``frame`` with its TTL set to ``ttl``, computed by scapy."""
    pkt = Ether(frame)
    pkt[IP].ttl, pkt[IP].chksum = ttl, None
    return Ether(bytes(pkt))[IP].chksum


def test_router_forwards_by_the_route(capsys, root):
    frame = v4("10.2.0.5")
    ports = ["--map", "tx_ports", "3", "3", "--map", "tx_ports", "4", "4"]
    rc, p, err = run(capsys, root, frame, *ports, "--fib-route", ROUTE3,
                     "--fib-route", "10.0.0.0/8=ifindex:4,smac:02:00:00:00:00:0a,"
                     "dmac:02:00:00:00:00:0b")  # fmt: skip
    assert rc == 0, err
    assert "engine: interp (--fib-route" in err  # auto picks the engine that has the routes
    assert p["verdict"] == "XDP_REDIRECT"
    assert p["outcome"]["redirect"]["map"] == "tx_ports" and p["outcome"]["redirect"]["key"] == 3
    old = Ether(frame)[IP].chksum
    assert p["changes"] == [
        f"eth.h_dest: 02:00:00:00:00:02 -> {DMAC}",
        f"eth.h_source: {HOST} -> {SMAC}",
        "ip.ttl: 64 -> 63",
        f"ip.check: {old} -> {routed_checksum(frame, 63)}",
    ]
    # the /8 answers for the rest of 10/8: longest prefix wins, not first given
    rc, p, err = run(capsys, root, v4("10.9.0.1"), *ports, "--fib-route", ROUTE3,
                     "--fib-route", "10.0.0.0/8=ifindex:4,smac:02:00:00:00:00:0a,"
                     "dmac:02:00:00:00:00:0b")  # fmt: skip
    assert rc == 0 and p["outcome"]["redirect"]["key"] == 4, (err, p)
    assert "eth.h_dest: 02:00:00:00:00:02 -> 02:00:00:00:00:0b" in p["changes"]


def test_router_forwards_ipv6_from_a_routes_file(capsys, root, tmp_path):
    f = tmp_path / "routes.json"
    f.write_text(json.dumps([{"prefix": "fd02::/64", "ifindex": 5, "smac": SMAC, "dmac": DMAC},
                             "10.2.0.0/24=ifindex:5"]))  # fmt: skip
    rc, p, err = run(capsys, root, v6("fd02::9"), "--map", "tx_ports", "5", "5",
                     "--fib-routes", str(f), "--engine", "interp")  # fmt: skip
    assert rc == 0 and p["verdict"] == "XDP_REDIRECT", (err, p)
    assert p["outcome"]["redirect"]["key"] == 5
    assert p["changes"] == [
        f"eth.h_dest: 02:00:00:00:00:02 -> {DMAC}",
        f"eth.h_source: {HOST} -> {SMAC}",
        "ip6.hop_limit: 64 -> 63",
    ]
    # the command line's route for a prefix replaces the file's (ip route replace)
    rc, p, err = run(capsys, root, v6("fd02::9"), "--map", "tx_ports", "5", "5",
                     "--fib-routes", str(f), "--fib-route", "fd02::/64=ifindex:5,dmac:none")  # fmt: skip
    assert rc == 0 and p["verdict"] == "XDP_PASS" and p["changes"] == [], (err, p)


@pytest.mark.parametrize(
    "frame, routes",
    [
        (v4("10.2.0.5"), ["--fib-route", "10.2.0.0/24=ifindex:3,smac:02:00:00:00:00:03,dmac:none"]),
        (v4("192.0.2.1"), ["--fib-route", ROUTE3]),  # no route: NOT_FWDED
        (v4("10.2.0.5", ttl=1), ["--fib-route", ROUTE3]),  # TTL 1: the stack answers
        (v4("10.2.0.5"), []),  # no routes at all (the default)
    ],
)
def test_router_passes_what_it_cannot_forward(capsys, root, frame, routes):
    rc, p, err = run(capsys, root, frame, "--map", "tx_ports", "3", "3", "--engine", "interp",
                     *routes)  # fmt: skip
    assert rc == 0 and p["verdict"] == "XDP_PASS" and p["changes"] == [], (err, p)


BAD = [
    ("10.2.0.1/24=ifindex:3", "bad prefix '10.2.0.1/24'", "host bits set"),
    ("10.2.0.0/24", "expected PREFIX=ifindex:N", None),
    ("10.2.0.0/24=smac:02:00:00:00:00:03", "no ifindex", None),
    ("10.2.0.0/24=ifindex:0", "ifindex '0'", "1..2147483647"),
    ("10.2.0.0/24=ifindex:eth0", "ifindex 'eth0'", None),
    ("10.2.0.0/24=ifindex:3,dmac:02:00:00:00:04", "dmac '02:00:00:00:04'", "or none"),
    ("10.2.0.0/24=ifindex:3,via:10.2.0.1", "unknown field 'via'", "ifindex, smac, dmac"),
    ("10.2.0.0/24=ifindex:3,ifindex:4", "'ifindex' given twice", None),
    ("10.2.0.0/24=ifindex:3,", "'' is no FIELD:VALUE", None),
]


@pytest.mark.parametrize("route, words, more", BAD)
def test_bad_routes_name_what_is_wrong(capsys, root, route, words, more):
    rc, err = run_err(capsys, root, v4("10.2.0.5"), "--fib-route", route)
    assert rc == 2 and "error[bad-fib-route]" in err and words in err, err
    assert f"--fib-route {route!r}" in err and "help: give PREFIX=ifindex:N" in err
    if more:
        assert more in err
    assert "Traceback" not in err


def test_bad_routes_files(capsys, root, tmp_path):
    f = tmp_path / "r.json"
    for text, words in (("{nope", "r.json:1:2: not JSON"),
                        ('{"10.0.0.0/8": 3}', "expected a JSON list of routes"),
                        ('[{"prefix": "10.0.0.0/8"}]', "route 1: no ifindex"),
                        ('["10.0.0.0/8=ifindex:1", 7]', "route 2: 7: give a string")):  # fmt: skip
        f.write_text(text)
        rc, err = run_err(capsys, root, v4("10.2.0.5"), "--fib-routes", str(f))
        assert rc == 2 and "error[bad-fib-route]" in err and words in err, (text, err)
    rc, err = run_err(capsys, root, v4("10.2.0.5"), "--fib-routes", str(tmp_path / "none.json"))
    assert rc == 2 and "none.json: cannot read: No such file" in err


def test_kernel_engine_refuses_routes(capsys, root):
    rc, err = run_err(capsys, root, v4("10.2.0.5"), "--engine", "kernel", "--fib-route", ROUTE3)
    assert rc == 2 and "error[bad-fib-route]" in err, err
    assert "reads the kernel's own routing and neighbour tables" in err
    assert "--engine interp" in err


def test_routes_for_a_program_without_fib_lookup_warn(capsys, root):
    rc = main(["run", str(root / "progs" / "xdp_acl.bpfd"), "--hex", v4("10.2.0.5").hex(),
               "--fib-route", ROUTE3])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 0 and "calls no bpf_fib_lookup: the routes are not used" in err, err


def ip(ns: str, *args: str) -> None:
    subprocess.run(["ip", "-n", ns, *args], capture_output=True, text=True, timeout=20,
                   check=True)  # fmt: skip


@pytest.mark.kernel
def test_interpreter_routes_agree_with_the_kernels_fib(root):
    """One namespace, two veth ends (a: in, b: out to 10.2.0.0/24 with a static neighbour),
    forwarding on.  `bpfdsl run --engine kernel` there (BPF_PROG_TEST_RUN looks the route
    up in the namespace's FIB) and `--engine interp --fib-route` with the same route give the
    same verdict, redirect target and output frame changes."""
    tag = uuid.uuid4().hex[:6]
    ns, a, a_peer, b, b_peer = f"fibr{tag}", f"fa{tag}", f"fA{tag}", f"fb{tag}", f"fB{tag}"
    with (
        netlink.netns(ns),
        netlink.veth_pair(a, a_peer, netns_a=ns, netns_b=ns, make_netns=False,
                          addrs=("10.1.0.1", None)) as pa,
        netlink.veth_pair(b, b_peer, netns_a=ns, netns_b=ns, make_netns=False,
                          addrs=("10.2.0.1", None)) as pb,
    ):  # fmt: skip
        netlink.add_neighbour(b, "10.2.0.2", DMAC, netns=ns)
        ip(ns, "route", "add", "10.3.0.0/16", "via", "10.2.0.2", "dev", b)
        with netlink.in_netns(ns), open("/proc/sys/net/ipv4/ip_forward", "w") as f:
            f.write("1")
        ia, ib, bmac = pa.a.ifindex, pb.a.ifindex, pb.a.mac
        frame = v4("10.3.7.7")
        base = [sys.executable, "-m", "bpfdsl", "--json", "run",
                str(root / "progs" / "xdp_router.bpfd"), "--hex", frame.hex(),
                "--ctx", f"ingress_ifindex={ia}", "--map", "tx_ports", str(ib), str(ib)]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(root)}
        got = {}
        for engine, extra in (
            ("kernel", []),
            ("interp", ["--fib-route", f"10.3.0.0/16=ifindex:{ib},smac:{bmac},dmac:{DMAC}"]),
        ):
            out = subprocess.run(["nsenter", f"--net=/run/netns/{ns}", *base, "--engine",
                                  engine, *extra], capture_output=True, text=True, timeout=60,
                                 env=env)  # fmt: skip
            assert out.returncode == 0, out.stderr
            got[engine] = json.loads(out.stdout)["packets"][0]
        k, i = got["kernel"], got["interp"]
        assert k["verdict"] == i["verdict"] == "XDP_REDIRECT"
        assert k["changes"] == i["changes"]
        assert f"eth.h_dest: 02:00:00:00:00:02 -> {DMAC}" in k["changes"]
        assert f"eth.h_source: {HOST} -> {bmac}" in k["changes"]
        assert "ip.ttl: 64 -> 63" in k["changes"]


def test_the_documented_run_is_what_the_cli_prints(capsys, root):
    """The `bpfdsl run ... --fib-route` example of docs/language.md, run as written: the
    output shown there is the output."""
    text = (root / "docs" / "language.md").read_text()
    m = re.search(r"^\$ (bpfdsl run progs/xdp_router\.bpfd .*?)\n(?!      )(.*?)^```", text,
                  re.M | re.S)  # fmt: skip
    assert m, "docs/language.md has no `bpfdsl run progs/xdp_router.bpfd` example"
    argv = shlex.split(m.group(1).replace("\\\n", " "))[1:]
    argv[1] = str(root / argv[1])
    assert main(argv) == 0
    cap = capsys.readouterr()
    assert (cap.err + cap.out).splitlines() == m.group(2).splitlines()  # stderr first
