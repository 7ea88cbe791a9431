"""The tunnel decapsulators of progs/ (xdp_vxlan_decap, xdp_gre_decap), written with the
standard library's vxlan and gre headers: on the kernel (BPF_PROG_TEST_RUN) and on the
interpreter, an encapsulated frame comes out as exactly the inner frame scapy built (GRE
carrying IP: with an Ethernet header of the outer MAC addresses and the inner protocol),
every other frame unchanged, and the counter counts the decapsulations.  The clang-19 twins
in tests/data/c give the same verdict and bytes on the same frames."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from scapy.layers.inet import IP, TCP, UDP, IPOption_NOP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import GRE, Ether
from scapy.layers.vxlan import VXLAN
from support.paths import ROOT

PROGS = ROOT / "progs"
C_DIR = ROOT / "tests" / "data" / "c"
OUTER = Ether(src="02:00:00:00:00:aa", dst="02:00:00:00:00:bb")
INNER = (
    Ether(src="02:00:00:00:01:01", dst="02:00:00:00:01:02")
    / IP(src="192.168.1.1", dst="192.168.1.2")
    / TCP(sport=40000, dport=80, flags="S")
    / b"inner payload"
)
INNER_IP = IP(src="192.168.7.1", dst="192.168.7.2") / UDP(sport=7, dport=9) / b"l3 payload"
INNER_IP6 = IPv6(src="2001:db8::7", dst="2001:db8::9") / UDP(sport=7, dport=9) / b"v6"


def vxlan(inner=INNER, *, flags: int = 0x08, dport: int = 4789, **ip) -> bytes:
    ip = {"src": "10.0.0.1", "dst": "10.0.0.2", **ip}
    return bytes(
        OUTER / IP(**ip) / UDP(sport=5555, dport=dport) / VXLAN(vni=0x1234, flags=flags) / inner
    )


def gre(inner, proto: int, **fields) -> bytes:
    return bytes(OUTER / IP(src="10.0.0.1", dst="10.0.0.2") / GRE(proto=proto, **fields) / inner)


def with_eth(l3, etype: int) -> bytes:
    """``l3`` behind the Ethernet header a GRE decapsulation builds from the outer one."""
    return bytes(Ether(src=OUTER.src, dst=OUTER.dst, type=etype) / l3)


def test_vxlan_decap_gives_the_inner_frame(bpf_program) -> None:
    prog = bpf_program(PROGS / "xdp_vxlan_decap.bpfd")
    for frame in (vxlan(), vxlan(options=[IPOption_NOP()] * 4), vxlan(ttl=3, id=77)):
        r = prog.run(frame)
        assert (r.verdict, r.data_out) == ("XDP_PASS", bytes(INNER))
    assert prog.maps["decapped"].total(0) == 3


@pytest.mark.parametrize(
    "frame",
    [
        vxlan(flags=0x00),  # no I flag: the VNI is not valid
        vxlan(dport=4790),
        vxlan(flags=0x08, frag=1),  # a later fragment: no UDP header in it
        vxlan(proto=6),  # the IPv4 header says TCP
        bytes(OUTER / IP() / UDP(dport=4789) / b"\x08\x00\x00\x00"),  # VXLAN cut short
        vxlan()[: 14 + 20 + 8 + 8 + 10],  # inner Ethernet header cut short
        bytes(OUTER / IPv6() / UDP(dport=4789) / VXLAN() / INNER),
    ],
    ids=["no-I-flag", "other-port", "fragment", "not-udp", "short-vxlan", "short-inner", "ipv6"],
)
def test_vxlan_decap_leaves_other_frames(bpf_program, frame: bytes) -> None:
    prog = bpf_program(PROGS / "xdp_vxlan_decap.bpfd")
    r = prog.run(frame)
    assert (r.verdict, r.data_out) == ("XDP_PASS", frame)
    assert prog.maps["decapped"].total(0) == 0


GRE_OPTIONS = {
    "plain": {},
    "key": {"key_present": 1, "key": 0x01020304},
    "seq": {"seqnum_present": 1, "sequence_number": 9},
    "csum-key-seq": {
        "chksum_present": 1,
        "key_present": 1,
        "key": 5,
        "seqnum_present": 1,
        "sequence_number": 6,
    },
}


@pytest.mark.parametrize("opts", GRE_OPTIONS.values(), ids=GRE_OPTIONS.keys())
def test_gre_decap_ethernet_and_ip_payloads(bpf_program, opts: dict) -> None:
    """The GRE header's length follows its C, K and S bits (RFC 2890's optional fields)."""
    prog = bpf_program(PROGS / "xdp_gre_decap.bpfd")
    r = prog.run(gre(INNER, 0x6558, **opts))
    assert (r.verdict, r.data_out) == ("XDP_PASS", bytes(INNER))
    r = prog.run(gre(INNER_IP, 0x0800, **opts))
    assert (r.verdict, r.data_out) == ("XDP_PASS", with_eth(INNER_IP, 0x0800))
    r = prog.run(gre(INNER_IP6, 0x86DD, **opts))
    assert (r.verdict, r.data_out) == ("XDP_PASS", with_eth(INNER_IP6, 0x86DD))
    assert prog.maps["decapped"].total(0) == 3


@pytest.mark.parametrize(
    "frame",
    [
        gre(INNER, 0x6558, version=1),
        gre(INNER, 0x6558, routing_present=1),
        gre(b"\x00" * 20, 0x88CC),  # LLDP: not a protocol it decapsulates
        gre(INNER, 0x6558)[: 14 + 20 + 4 + 13],  # inner Ethernet header cut short
        gre(b"", 0x0800),  # no inner packet at all
        gre(INNER, 0x6558, key_present=1)[: 14 + 20 + 6],  # GRE key cut short
        bytes(OUTER / IP(frag=3, proto=47) / GRE(proto=0x6558) / INNER),
        vxlan(),
    ],
    ids=["version-1", "routing", "lldp", "short-inner", "empty", "short-key", "fragment", "udp"],
)
def test_gre_decap_leaves_other_frames(bpf_program, frame: bytes) -> None:
    prog = bpf_program(PROGS / "xdp_gre_decap.bpfd")
    r = prog.run(frame)
    assert (r.verdict, r.data_out) == ("XDP_PASS", frame)
    assert prog.maps["decapped"].total(0) == 0


# ---- the C twins behave the same (what the benchmark compares) ----
CORPUS = [
    vxlan(),
    vxlan(options=[IPOption_NOP()] * 8),
    vxlan(flags=0),
    vxlan(dport=53),
    vxlan(frag=2),
    *(gre(INNER, 0x6558, **o) for o in GRE_OPTIONS.values()),
    *(gre(INNER_IP, 0x0800, **o) for o in GRE_OPTIONS.values()),
    gre(INNER_IP6, 0x86DD, key_present=1, key=3),
    gre(INNER, 0x6558, version=1),
    gre(INNER, 0x6558, routing_present=1),
    gre(b"\x00" * 30, 0x88CC),
]


@pytest.fixture(scope="module")
def twins(tmp_path_factory) -> Path:
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    out = tmp_path_factory.mktemp("decap-c")
    proc = subprocess.run(
        [str(C_DIR / "build.sh"), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["xdp_vxlan_decap", "xdp_gre_decap"])
def test_c_twin_gives_the_same_bytes(twins: Path, name: str) -> None:
    from bpfdsl.testing.pytest_plugin import BpfProgram, load_spec

    ours = BpfProgram("kernel", load_spec(PROGS / f"{name}.bpfd"), None, None)
    theirs = BpfProgram("kernel", load_spec(twins / f"{name}.o"), None, None)
    try:
        frames = [f[:n] for f in CORPUS for n in sorted({len(f), 14, 40, 50, 60, len(f) - 1})]
        for frame in frames:
            a, b = ours.run(frame), theirs.run(frame)
            assert (a.retval, a.data_out) == (b.retval, b.data_out), frame.hex()
        assert ours.maps["decapped"].total(0) == theirs.maps["decapped"].total(0) > 0
    finally:
        ours.close()
        theirs.close()
