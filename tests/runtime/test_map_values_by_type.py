"""Map keys and values are printed and parsed by their BTF type, never by a member name:
bpfdsl names its address types in BTF (`__be32`, `typedef __u8 ipv6_addr[16]`,
`typedef __u8 mac_addr[6]`), so `bpfdsl map` shows a.b.c.d / IPv6 / MAC text wherever such
a type sits (key, value, any struct member), and parses text strictly by the type: an
`ipv6_prefix` key refuses `10.0.0.0/8` (it used to store `a00::/8`), an `ipv6_addr`
refuses an IPv4 address, a prefix with host bits is refused.  The kernel tests show the
bytes that land in the map are the ones the program matches against."""

from __future__ import annotations

import ipaddress
import json
import shutil
import struct
import subprocess

import pytest
from support.netns import bpffs_dir

from bpfdsl.abi.btf.core import Kind
from bpfdsl.abi.btf.values import format_value, parse_value
from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object

SOURCE = """license "GPL"

struct peer { x: be32, y: ipv6_addr, z: mac_addr, port: be16, n: u32 }
struct named { saddr: [u8; 16], count: be32 }

map by_ip: hash<be32, u64>(max_entries: 8)
map by_ip6: hash<ipv6_addr, u64>(max_entries: 8)
map by_mac: hash<mac_addr, peer>(max_entries: 8)
map odd: hash<u32, named>(max_entries: 8)
map v6_block: lpm_trie<ipv6_prefix, u8>(max_entries: 8)
map v4_block: lpm_trie<ipv4_prefix, u8>(max_entries: 8)

xdp fn typed(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if by_mac.contains(eth.h_source) { return XDP_DROP }
    if odd.contains(1) { return XDP_DROP }
    if eth.h_proto == ETH_P_IPV6 {
        let ip6 = parse ipv6 else { return XDP_PASS }
        if v6_block.contains(ip6.saddr) { return XDP_DROP }
        by_ip6[ip6.saddr] += 1
        return XDP_PASS
    }
    let ip = parse ipv4 else { return XDP_PASS }
    if v4_block.contains(ip.saddr) { return XDP_DROP }
    by_ip[ip.saddr] += 1
    return XDP_PASS
}
"""
XDP_DROP, XDP_PASS = 1, 2


@pytest.fixture(scope="module")
def obj() -> bytes:
    return compile_source(SOURCE, "typed.bpfd").obj


@pytest.fixture(scope="module")
def spec(obj):
    return read_object(obj)


def _key(spec, name: str) -> tuple:
    m = spec.maps[name]
    return spec.btf, m.key_type_id


def _value(spec, name: str) -> tuple:
    m = spec.maps[name]
    return spec.btf, m.value_type_id


def test_btf_names_the_address_types(spec):
    btf = spec.btf
    for name, chain in (
        ("by_ip", ["__be32", "__u32", "unsigned int"]),
        ("by_ip6", ["ipv6_addr"]),
        ("by_mac", ["mac_addr"]),
    ):
        tid = spec.maps[name].key_type_id
        assert btf.name_chain(tid) == chain, name
        assert btf[tid].kind == Kind.TYPEDEF
    arr = btf.resolve(spec.maps["by_ip6"].key_type_id)
    assert arr.kind == Kind.ARRAY and arr.nelems == 16  # typedef __u8 ipv6_addr[16]


def test_ipv6_prefix_refuses_ipv4_and_host_bits(spec):
    btf, tid = _key(spec, "v6_block")
    with pytest.raises(ValueError, match=r"expected an IPv6 prefix .* \(an IPv4 prefix\)"):
        parse_value(btf, tid, "10.0.0.0/8")
    with pytest.raises(ValueError, match="host bits set past /32: give 2001:db8::/32"):
        parse_value(btf, tid, "2001:db8::1/32")
    with pytest.raises(ValueError, match="expected a prefix like 2001:db8::/32"):
        parse_value(btf, tid, "2001:db8::")
    raw = parse_value(btf, tid, "2001:db8::/32")
    assert raw == struct.pack("<I", 32) + ipaddress.IPv6Address("2001:db8::").packed
    assert format_value(btf, tid, raw) == "2001:db8::/32"
    btf, tid = _key(spec, "v4_block")
    with pytest.raises(ValueError, match=r"expected an IPv4 prefix .* \(an IPv6 prefix\)"):
        parse_value(btf, tid, "2001:db8::/32")
    assert parse_value(btf, tid, "10.0.0.0/8") == struct.pack("<I", 8) + bytes([10, 0, 0, 0])


def test_addresses_parse_strictly_by_type(spec):
    btf, tid = _key(spec, "by_ip6")
    with pytest.raises(ValueError, match="its IPv4-mapped form is ::ffff:10.0.0.1"):
        parse_value(btf, tid, "10.0.0.1")
    assert parse_value(btf, tid, "::ffff:10.0.0.1") == bytes(10) + b"\xff\xff" + bytes(
        [10, 0, 0, 1]
    )
    btf, tid = _key(spec, "by_mac")
    with pytest.raises(ValueError, match=r"expected a MAC address .* \(an IPv4 address\)"):
        parse_value(btf, tid, "10.0.0.1")
    assert parse_value(btf, tid, "02:00:00:00:00:0a") == bytes.fromhex("02000000000a")
    btf, tid = _key(spec, "by_ip")  # a be32 takes an address or a number (network order)
    assert parse_value(btf, tid, "10.0.0.1") == parse_value(btf, tid, "0x0a000001")
    with pytest.raises(ValueError, match=r"expected an IPv4 address .* \(an IPv6 address\)"):
        parse_value(btf, tid, "fd00::1")


def test_format_by_type_not_by_member_name(spec):
    btf, tid = _key(spec, "by_ip")
    assert format_value(btf, tid, bytes([10, 0, 0, 1])) == "10.0.0.1"
    btf, tid = _key(spec, "by_ip6")
    assert format_value(btf, tid, ipaddress.IPv6Address("fd00::1").packed) == "fd00::1"
    btf, tid = _value(spec, "by_mac")  # members x, y, z: names that say nothing
    v = {"x": "10.1.2.3", "y": "fd00::2", "z": "02:00:00:00:00:02", "port": 53, "n": 7}
    raw = parse_value(btf, tid, json.dumps(v))
    assert raw[0:4] == bytes([10, 1, 2, 3]) and raw[20:26] == bytes.fromhex("020000000002")
    assert format_value(btf, tid, raw) == v
    btf, tid = _value(spec, "odd")  # a member named saddr of type [u8; 16] is bytes
    raw = bytes(range(16)) + bytes([0, 0, 1, 0])
    assert format_value(btf, tid, raw) == {"saddr": list(range(16)), "count": "0.0.1.0"}


# ---- on the kernel ----


@pytest.fixture
def loaded(obj, tmp_path):
    path = tmp_path / "typed.o"
    path.write_bytes(obj)
    d = bpffs_dir("bdtyped_")
    try:
        assert main(["load", str(path), "--pin-dir", d]) == 0
        yield d
    finally:
        main(["unload", d])
        shutil.rmtree(d, ignore_errors=True)


def _frame6(src: str) -> bytes:
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    return bytes(Ether(src="02:00:00:00:00:09") / IPv6(src=src, dst="fd00::99") / UDP())


def _verdict(pin_dir: str, frame: bytes) -> int:
    with syscall.obj_get(f"{pin_dir}/progs/typed") as fd:
        return syscall.prog_test_run(int(fd), frame).retval


def _dump(capsys, ref: str) -> list:
    capsys.readouterr()
    assert main(["-j", "map", "dump", ref]) == 0
    return json.loads(capsys.readouterr().out)["entries"]


@pytest.mark.kernel
def test_ipv6_prefix_update_refused_kernel_matches_what_is_stored(loaded, capsys):
    v6 = f"{loaded}:v6_block"
    assert main(["map", "update", v6, "10.0.0.0/8", "1"]) == 2
    err = capsys.readouterr().err
    assert "expected an IPv6 prefix like 2001:db8::/32 for ipv6_prefix" in err
    assert _dump(capsys, v6) == []  # nothing stored (before: a00::/8)
    assert _verdict(loaded, _frame6("a00::1")) == XDP_PASS
    assert main(["map", "update", v6, "2001:db8::/32", "1"]) == 0
    assert _dump(capsys, v6) == [{"key": "2001:db8::/32", "value": 1}]
    assert _verdict(loaded, _frame6("2001:db8::5")) == XDP_DROP  # the kernel's trie matches
    assert _verdict(loaded, _frame6("2001:db9::5")) == XDP_PASS


@pytest.mark.kernel
def test_dump_shows_addresses_written_by_the_program_and_bpftool_reads_the_btf(loaded, capsys):
    from bpfdsl.runtime.packets import udp_frame

    frame = udp_frame(
        src_mac="02:00:00:00:00:09",
        dst_mac="02:00:00:00:00:01",
        src_ip="10.0.0.7",
        dst_ip="10.0.0.1",
        sport=1,
        dport=2,
    )
    assert _verdict(loaded, frame) == XDP_PASS and _verdict(loaded, _frame6("fd00::7")) == XDP_PASS
    assert _dump(capsys, f"{loaded}:by_ip") == [{"key": "10.0.0.7", "value": 1}]
    assert _dump(capsys, f"{loaded}:by_ip6") == [{"key": "fd00::7", "value": 1}]
    value = '{"x": "10.1.2.3", "y": "fd00::2", "z": "02:00:00:00:00:02", "port": 53}'
    assert main(["map", "update", f"{loaded}:by_mac", "02:00:00:00:00:09", value]) == 0
    assert _dump(capsys, f"{loaded}:by_mac") == [
        {
            "key": "02:00:00:00:00:09",
            "value": {
                "x": "10.1.2.3",
                "y": "fd00::2",
                "z": "02:00:00:00:00:02",
                "port": 53,
                "n": 0,
            },
        }
    ]
    assert _verdict(loaded, frame) == XDP_DROP  # the program finds the MAC key we wrote
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool not installed")
    pin = f"{loaded}/maps/by_mac"
    show = json.loads(
        subprocess.run(
            ["bpftool", "-j", "map", "show", "pinned", pin],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    types = subprocess.run(
        ["bpftool", "btf", "dump", "id", str(show["btf_id"])],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    for t in ("TYPEDEF 'ipv6_addr'", "TYPEDEF 'mac_addr'", "TYPEDEF '__be32'"):
        assert t in types
    dump = json.loads(
        subprocess.run(
            ["bpftool", "-j", "map", "dump", "pinned", pin],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    shown = dump[0]["formatted"]  # bpftool formats by BTF kind: the same bytes as lists
    assert shown["key"] == [2, 0, 0, 0, 0, 9]
    assert shown["value"]["y"] == list(ipaddress.IPv6Address("fd00::2").packed)
    assert shown["value"]["x"] == int.from_bytes(bytes([10, 1, 2, 3]), "little")
