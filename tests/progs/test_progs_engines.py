"""The example programs of progs/ do what their comments say, on the kernel
(BPF_PROG_TEST_RUN) and on the userspace interpreter alike: every test runs once per
engine through the plugin's ``bpf_program`` fixture (``bpf_engine`` parameter)."""

from __future__ import annotations

from pathlib import Path

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Dot1AD, Dot1Q, Ether
from support.paths import PROGS

MAC_A, MAC_B = "02:00:00:00:00:0a", "02:00:00:00:00:0b"


def prog_path(name: str) -> Path:
    p = PROGS / name
    if not p.exists():
        pytest.skip(f"progs/{name} is not written yet")
    return p


def udp4(src: str = "10.1.2.3", dport: int = 9999) -> Ether:
    return (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src=src, dst="10.9.9.9")
        / UDP(sport=1234, dport=dport)
        / b"payload!"
    )


def checksums_valid(frame: bytes) -> bool:
    """True when every IP/UDP/TCP/ICMP checksum in ``frame`` equals a fresh computation."""
    pkt = Ether(frame)
    fresh = pkt.copy()
    for layer in (IP, UDP, TCP, ICMP):
        if layer in fresh:
            fresh[layer].chksum = None
    fresh = Ether(bytes(fresh))
    return all(pkt[la].chksum == fresh[la].chksum for la in (IP, UDP, TCP, ICMP) if la in pkt)


def test_progs_xdp_pass_and_drop(bpf_program) -> None:
    assert bpf_program(prog_path("xdp_pass.bpfd")).run(udp4()).verdict == "XDP_PASS"
    assert bpf_program(prog_path("xdp_drop.bpfd")).run(udp4()).verdict == "XDP_DROP"


def test_progs_udp_filter_drops_port_and_counts(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_udp_filter.bpfd"))
    r = prog.run(udp4(dport=9999))
    assert r.verdict == "XDP_DROP"
    assert prog.run(udp4(dport=53)).verdict == "XDP_PASS"
    v6 = Ether() / IPv6(src="fd00::1", dst="fd00::2") / UDP(dport=9999) / b"x"
    assert prog.run(v6).verdict == "XDP_DROP"
    assert prog.maps["drops"].total(0) == 2
    assert prog.maps["passes"].total(0) == 1


def test_progs_udp_filter_port_is_a_load_time_config(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_udp_filter.bpfd"), config={"port": 5353})
    assert prog.run(udp4(dport=5353)).verdict == "XDP_DROP"
    assert prog.run(udp4(dport=9999)).verdict == "XDP_PASS"


def _v4_prefix(addr: str, plen: int) -> bytes:
    return plen.to_bytes(4, "little") + bytes(int(x) for x in addr.split("."))


def test_progs_acl_longest_prefix_and_vlan(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_acl.bpfd"))
    prog.maps["v4_block"].set(_v4_prefix("10.0.0.0", 8), 1)
    assert prog.run(udp4(src="10.200.1.1")).verdict == "XDP_DROP"
    assert prog.run(udp4(src="11.0.0.1")).verdict == "XDP_PASS"
    tagged = Ether() / Dot1AD(vlan=5) / Dot1Q(vlan=7) / IP(src="10.1.1.1") / UDP() / b"x"
    assert prog.run(tagged).verdict == "XDP_DROP"
    v6key = (48).to_bytes(4, "little") + bytes.fromhex("fd000000000a") + bytes(10)
    prog.maps["v6_block"].set(v6key, 1)
    v6 = Ether() / IPv6(src="fd00:0:a::5", dst="fd00::1") / UDP() / b"x"
    assert prog.run(v6).verdict == "XDP_DROP"
    assert prog.maps["dropped"].total(0) == 2
    assert prog.maps["dropped"].total(1) == 1


def test_progs_reflect_swaps_and_keeps_checksums(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_reflect.bpfd"))
    r = prog.run(udp4(src="10.1.2.3", dport=7))
    assert r.verdict == "XDP_TX"
    out = r.packet
    assert (out.src, out.dst) == (MAC_B, MAC_A)
    assert (out[IP].src, out[IP].dst) == ("10.9.9.9", "10.1.2.3")
    assert (out[UDP].sport, out[UDP].dport) == (7, 1234)
    assert checksums_valid(r.data_out)


def test_progs_pong_answers_ping_with_valid_checksums(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_pong.bpfd"))
    ping = (
        Ether(src=MAC_A, dst=MAC_B)
        / IP(src="10.0.0.1", dst="10.0.0.2", ttl=9)
        / ICMP(type=8, id=3, seq=1)
        / b"abc"
    )
    r = prog.run(ping)
    assert r.verdict == "XDP_TX"
    out = r.packet
    assert out[ICMP].type == 0 and out[IP].ttl == 64
    assert (out[IP].src, out[IP].dst) == ("10.0.0.2", "10.0.0.1")
    assert checksums_valid(r.data_out)
    assert prog.run(Ether() / IP() / ICMP(type=0)).verdict == "XDP_PASS"
    assert prog.maps["reflected"].total(0) == 1


def test_progs_vlan_strip_pops_outer_tag(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_vlan_strip.bpfd"))
    inner = IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=5) / b"data"
    r = prog.run(Ether(src=MAC_A, dst=MAC_B) / Dot1Q(vlan=42) / inner)
    assert r.verdict == "XDP_PASS"
    assert r.data_out == bytes(Ether(src=MAC_A, dst=MAC_B, type=0x0800) / inner)
    assert prog.run(udp4()).data_out == bytes(udp4())  # untagged: unchanged
    assert prog.maps["popped"].total(0) == 1


def _slot(value: int, size: int) -> bytes:
    """A cpumap/devmap value: qsize or ifindex, then no second-stage program (fd -1)."""
    return value.to_bytes(4, "little") + b"\xff" * (size - 4)


def test_progs_cpumap_steer_redirects_flows(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_cpumap_steer.bpfd"), "steer", config={"n_cpus": 2})
    prog.maps["cpus"].set(0, 0)
    prog.maps["cpus"].set(1, 1)
    assert prog.run(udp4()).verdict == "XDP_PASS"  # empty cpumap slot: the XDP_PASS fallback
    vs = prog.maps["cpu_map"].value_size
    prog.maps["cpu_map"].set(0, _slot(192, vs))
    prog.maps["cpu_map"].set(1, _slot(192, vs))
    cpus = set()
    for i in range(16):
        r = prog.run(udp4(src=f"{10 + i}.0.0.1"))
        assert r.verdict == "XDP_REDIRECT"
        if r.redirect is not None:  # the interpreter also says where to
            assert r.redirect[0] == "cpu_map"
            cpus.add(r.redirect[1])
    assert cpus in ({0, 1}, set())
    assert prog.run(Ether() / IPv6() / UDP()).verdict == "XDP_PASS"


@pytest.mark.bpf_engines("interp")  # the kernel side: tests/runtime/test_cpumap.py, test_devmap.py
def test_progs_cpumap_on_cpu_program(bpf_program) -> None:
    steer = bpf_program(prog_path("xdp_cpumap_steer.bpfd"), "steer", config={"drop_port": 9})
    on_cpu = steer.program("on_cpu")
    assert on_cpu.kind.section == "xdp/cpumap"
    if steer.interp is not None:
        steer.interp.env.cpu = 1
    assert on_cpu.run(udp4(dport=9)).verdict == "XDP_DROP"
    assert on_cpu.run(udp4(dport=10)).verdict == "XDP_PASS"
    per_cpu = [int.from_bytes(v, "little") for v in steer.maps["on_cpu_count"].get(0)]
    assert per_cpu[1] == 2 and sum(per_cpu) == 2


def test_progs_devmap_forward_by_ingress_ifindex(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_devmap_forward.bpfd"), "forward")
    assert prog.run(udp4()).verdict == "XDP_PASS"  # test runs arrive on lo (ifindex 1)
    prog.maps["tx_ports"].set(1, _slot(1, prog.maps["tx_ports"].value_size))
    r = prog.run(udp4())
    assert r.verdict == "XDP_REDIRECT"
    assert r.redirect in (None, ("tx_ports", 1, 2))


@pytest.mark.bpf_engines("interp")  # the kernel side: tests/runtime/test_cpumap.py, test_devmap.py
def test_progs_devmap_egress_counts(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_devmap_forward.bpfd"), "forward").program("egress")
    assert prog.kind.section == "xdp/devmap"
    assert prog.run(udp4(), egress_ifindex=3).verdict == "XDP_PASS"
    assert prog.maps["egress_count"].total(0) == 1


def test_progs_xsk_redirect_fallback(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_xsk_redirect.bpfd"))
    assert prog.run(udp4()).verdict == "XDP_PASS"  # no AF_XDP socket on queue 0


class _Xsk:
    queue_id = 2


@pytest.mark.bpf_engines("interp")
def test_progs_xsk_redirect_to_socket(bpf_program) -> None:
    prog = bpf_program(prog_path("xdp_xsk_redirect.bpfd"))
    if prog.interp is None:
        pytest.skip("an AF_XDP socket is needed on the kernel (tests/runtime/test_xsk.py)")
    prog.interp.maps["xsks"].set_socket(2, _Xsk())
    r = prog.run(udp4(), rx_queue_index=2)
    assert (r.verdict, r.redirect) == ("XDP_REDIRECT", ("xsks", 2, 2))


def test_progs_sk_msg_policy(bpf_program) -> None:
    """Kernel engine: a loopback TCP connection whose sends go through the program."""
    from bpfdsl.interp import SockInfo

    prog = bpf_program(prog_path("sk_msg_policy.bpfd"), config={"limit_bytes": 64})
    r = prog.run(b"x" * 200, sock=SockInfo(remote_port=7001))
    assert (r.verdict, r.data_out) == ("SK_DROP", b"")  # nothing delivered, in both engines
    r = prog.run(b"y" * 200, sock=SockInfo(remote_port=7002))
    assert (r.verdict, r.data_out) == ("SK_PASS", b"y" * 200)  # 64 bytes at a time, all pass
    r = prog.run(b"z" * 20, sock=SockInfo(remote_port=7003))
    assert (r.verdict, r.data_out) == ("SK_PASS", b"z" * 20)
    if prog.interp is not None:
        policy = prog.interp.programs["policy"]
        assert policy.run_sk_msg(b"x", SockInfo(remote_port=7002)).apply_bytes == 64


@pytest.mark.bpf_engines("interp")
def test_progs_sockops_and_sk_msg_redirect_pair(bpf_program) -> None:
    import socket

    from bpfdsl.abi.flags import BPF_F_INGRESS
    from bpfdsl.abi.prog_types import SockOpsOp
    from bpfdsl.interp import SockInfo

    redir = bpf_program(prog_path("sk_msg_redirect_ingress.bpfd"), "redir")
    track = redir.program("track")
    client = SockInfo(socket.AF_INET, "10.0.0.1", "10.0.0.2", local_port=40000, remote_port=80)
    server = SockInfo(socket.AF_INET, "10.0.0.2", "10.0.0.1", local_port=80, remote_port=40000)
    if redir.interp is None:
        pytest.skip("sock_ops/sk_msg need real sockets on the kernel (tests/runtime/test_sockops)")
    prog = redir.interp.programs
    assert redir.run(b"hi", sock=client).verdict == "SK_DROP"  # no peer yet
    prog["track"].run_sock_ops(SockOpsOp.ACTIVE_ESTABLISHED_CB, client)
    prog["track"].run_sock_ops(SockOpsOp.PASSIVE_ESTABLISHED_CB, server)
    assert track.kind.section == "sockops"
    r = redir.run(b"GET /", sock=client)
    assert r.verdict == "SK_PASS"
    assert r.redirect[2] is server and r.redirect[3] == BPF_F_INGRESS
    assert redir.maps["redirects"].total(0) == 1
