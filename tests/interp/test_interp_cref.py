"""The interpreter runs the program kinds BPF_PROG_TEST_RUN refuses — xdp(cpumap),
xdp(devmap), sk_msg — and the redirect programs, on the clang-built C references of
tests/data/c, with the verdicts the kernel gives on real traffic (veth/socket tests):
cpumap steering by flow hash, devmap forwarding by ingress ifindex, AF_XDP queue
redirects with the XDP_PASS fallback, sk_msg drop/apply_bytes by port and sockhash
redirects with BPF_F_INGRESS.  Needs clang-19, not root."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether
from support.flowhash import flow_hash
from support.paths import DATA

from bpfdsl.abi.flags import BPF_F_INGRESS
from bpfdsl.abi.prog_types import SockOpsOp
from bpfdsl.interp import InterpCollection, SockInfo
from bpfdsl.obj.collection import read_object

C_DIR = DATA / "c"
ARCH_INC = f"/usr/include/{os.uname().machine}-linux-gnu"
XDP_DROP, XDP_PASS, XDP_REDIRECT = 1, 2, 4
SK_DROP, SK_PASS = 0, 1


@pytest.fixture(scope="module")
def cref(tmp_path_factory: pytest.TempPathFactory):
    """cref(name, config=None, ncpus=2) -> InterpCollection of tests/data/c/<name>.c."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    out = tmp_path_factory.mktemp("cref")

    def build(name: str, config: dict | None = None, ncpus: int = 2) -> InterpCollection:
        obj = out / f"{name}.o"
        if not obj.exists():
            src = C_DIR / f"{name}.c"
            cmd = [
                "clang-19",
                "-O2",
                "-g",
                "-target",
                "bpf",
                f"-I{ARCH_INC}",
                "-c",
                str(src),
                "-o",
                str(obj),
            ]
            subprocess.run(cmd, check=True, timeout=120)
        return InterpCollection(read_object(obj), config=config or {}, ncpus=ncpus)

    return build


def udp(src: str, dst: str, dport: int = 1000) -> bytes:
    return bytes(Ether() / IP(src=src, dst=dst) / UDP(sport=1, dport=dport) / b"hello")


def test_interp_cpumap_steer_by_flow_hash(cref) -> None:
    coll = cref("xdp_cpumap_steer", config={"n_cpus": 2})
    coll.maps["cpus"].set(0, 0)
    coll.maps["cpus"].set(1, 1)
    steer = coll.programs["steer"]
    pkt = udp("10.0.0.1", "10.0.0.2")
    assert steer.run(pkt).retval == XDP_PASS  # empty cpumap: the fallback in the flags (B09)
    coll.maps["cpu_map"].set(0, (192).to_bytes(4, "little") + bytes(4))
    coll.maps["cpu_map"].set(1, (192).to_bytes(4, "little") + bytes(4))
    seen = set()
    for i in range(1, 9):
        src = f"10.0.{i}.1"
        r = steer.run(udp(src, "10.0.0.2"))
        saddr = int.from_bytes(socket.inet_aton(src), "little")  # the word as loaded
        daddr = int.from_bytes(socket.inet_aton("10.0.0.2"), "little")
        want_cpu = flow_hash(saddr, daddr, 17) % 2
        assert r.retval == XDP_REDIRECT
        assert r.redirect == ("cpu_map", want_cpu, XDP_PASS)
        seen.add(want_cpu)
    assert seen == {0, 1}


def test_interp_cpumap_program_runs_on_its_cpu(cref) -> None:
    coll = cref("xdp_cpumap_steer", config={"drop_port": 9})
    on_cpu = coll.programs["on_cpu"]
    assert on_cpu.kind.section == "xdp/cpumap"
    coll.env.cpu = 1
    assert on_cpu.run(udp("10.0.0.1", "10.0.0.2", dport=9)).retval == XDP_DROP
    assert on_cpu.run(udp("10.0.0.1", "10.0.0.2", dport=10)).retval == XDP_PASS
    counts = [int.from_bytes(v, "little") for v in coll.maps["on_cpu_count"].get(0)]
    assert counts == [0, 2]


def test_interp_devmap_forward_and_egress(cref) -> None:
    coll = cref("xdp_devmap_forward")
    coll.maps["tx_ports"].set(5, (7).to_bytes(4, "little") + bytes(4))
    fwd = coll.programs["forward"]
    r = fwd.run(udp("10.0.0.1", "10.0.0.2"), ingress_ifindex=5)
    assert (r.retval, r.redirect) == (XDP_REDIRECT, ("tx_ports", 5, XDP_PASS))
    assert fwd.run(udp("10.0.0.1", "10.0.0.2"), ingress_ifindex=6).retval == XDP_PASS
    egress = coll.programs["egress"]
    assert egress.kind.section == "xdp/devmap"
    assert egress.run(udp("10.0.0.1", "10.0.0.2"), egress_ifindex=7).retval == XDP_PASS
    assert coll.maps["egress_count"].get(0)[0] == (1).to_bytes(8, "little")


class _Xsk:
    queue_id = 3


def test_interp_xsk_redirect_by_queue(cref) -> None:
    coll = cref("xdp_xsk_redirect")
    prog = coll.programs["xsk_redirect"]
    assert prog.run(udp("10.0.0.1", "10.0.0.2"), rx_queue_index=3).retval == XDP_PASS
    coll.maps["xsks"].set_socket(3, _Xsk())
    r = prog.run(udp("10.0.0.1", "10.0.0.2"), rx_queue_index=3)
    assert (r.retval, r.redirect) == (XDP_REDIRECT, ("xsks", 3, XDP_PASS))
    assert prog.run(udp("10.0.0.1", "10.0.0.2"), rx_queue_index=2).retval == XDP_PASS


def test_interp_sk_msg_policy_ports(cref) -> None:
    coll = cref("sk_msg_policy", config={"limit_bytes": 100})
    prog = coll.programs["policy"]
    msg = b"x" * 300

    def to(port: int):
        return prog.run_sk_msg(msg, SockInfo(remote_port=port, local_port=40000))

    assert to(7001).retval == SK_DROP
    r = to(7002)
    assert (r.retval, r.apply_bytes) == (SK_PASS, 100)
    r = to(80)
    assert (r.retval, r.apply_bytes, r.data_out) == (SK_PASS, 0, msg)


def test_interp_sk_msg_redirect_hash_ingress(cref) -> None:
    coll = cref("sk_msg_redirect_ingress")
    prog = coll.programs["redir"]
    me = SockInfo(socket.AF_INET, "10.0.0.1", "10.0.0.2", local_port=5000, remote_port=6000)
    r = prog.run_sk_msg(b"ping", me)
    assert r.retval == SK_DROP  # no peer in the sockhash
    # the peer socket's key as sock_ops stored it: its local = our remote
    key = (
        socket.inet_aton("10.0.0.2")
        + socket.inet_aton("10.0.0.1")
        + (6000).to_bytes(2, "big")
        + (5000).to_bytes(2, "big")
    )
    coll.maps["socks"].set_socket(key, "peer")
    r = prog.run_sk_msg(b"ping", me)
    assert r.retval == SK_PASS
    assert r.redirect == ("socks", key, "peer", BPF_F_INGRESS)
    assert sum(int.from_bytes(v, "little") for v in coll.maps["redirects"].get(0)) == 1
    ipv6 = SockInfo(socket.AF_INET6, "fd00::1", "fd00::2", 5000, 6000)
    assert prog.run_sk_msg(b"ping", ipv6).retval == SK_PASS  # not IPv4: passes untouched


def test_interp_sock_ops_fills_sockhash_for_sk_msg(cref) -> None:
    coll = cref("sk_msg_redirect_ingress")
    track, redir = coll.programs["track"], coll.programs["redir"]
    client = SockInfo(socket.AF_INET, "10.0.0.1", "10.0.0.2", local_port=40000, remote_port=80)
    server = SockInfo(socket.AF_INET, "10.0.0.2", "10.0.0.1", local_port=80, remote_port=40000)
    assert track.run_sock_ops(SockOpsOp.TCP_CONNECT_CB, client).retval == 1
    assert coll.maps["socks"].items() == []  # not established yet: nothing stored
    track.run_sock_ops(SockOpsOp.ACTIVE_ESTABLISHED_CB, client)
    track.run_sock_ops(SockOpsOp.PASSIVE_ESTABLISHED_CB, server)
    assert len(coll.maps["socks"].items()) == 2
    r = redir.run_sk_msg(b"GET /", client)
    assert r.retval == SK_PASS and r.redirect[2] is server  # into the peer's receive queue
    assert redir.run_sk_msg(b"200 OK", server).redirect[2] is client


UNCHECKED = """\
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp") int unchecked(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	return *(__u32 *)(data + 100) ? XDP_DROP : XDP_PASS;	/* no data_end check */
}
char LICENSE[] SEC("license") = "GPL";
"""


def test_interp_out_of_bounds_names_c_source_line(cref, tmp_path: Path) -> None:
    """The safety net: an access the verifier would refuse stops with the source line."""
    from bpfdsl.interp import InterpError

    src = tmp_path / "unchecked.c"
    src.write_text(UNCHECKED)
    obj = tmp_path / "unchecked.o"
    cmd = [
        "clang-19",
        "-O2",
        "-g",
        "-target",
        "bpf",
        f"-I{ARCH_INC}",
        "-c",
        str(src),
        "-o",
        str(obj),
    ]
    subprocess.run(cmd, check=True, timeout=120)
    coll = InterpCollection(read_object(obj))
    with pytest.raises(InterpError) as ei:
        coll.programs["unchecked"].run(bytes(64))
    d = ei.value.diagnostics[0]
    assert d.span is not None and d.span.file.endswith("unchecked.c") and d.span.line == 6
    assert "out-of-bounds 4-byte access to packet at offset 100 (valid: 0..64)" in d.message
    assert "no data_end check" in ei.value.render()  # the source line is shown
