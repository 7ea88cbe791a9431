"""The interpreter runs socket lookups and spin locks (issue #23): it has no sockets, so
bpf_sk_lookup_tcp/udp and bpf_skc_lookup_tcp read the tuple and return NULL (no socket
matches: the program's "no socket" path runs); bpf_spin_lock/unlock are uncontended (one
program runs at a time).  The programs are tests/data/checker's, which the checker and
the kernel judge in tests/checker/test_checker_sk_lookup.py and test_checker_spin_lock.py."""

from __future__ import annotations

import struct

import pytest
from support.objbuild import compile_c
from support.paths import DATA

from bpfdsl.interp import InterpCollection
from bpfdsl.obj.collection import read_object

XDP_DROP, XDP_PASS = 1, 2


def _frame(proto: int) -> bytes:
    """Ethernet + IPv4 (protocol ``proto``) 10.0.0.1 -> 10.0.0.2, ports 40000 -> 9."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 1, 0, 64, proto, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))  # fmt: skip
    return (
        bytes(6)
        + bytes([2, 0, 0, 0, 0, 1])
        + b"\x08\x00"
        + ip
        + struct.pack("!HHHH", 40000, 9, 8, 0)
    )


@pytest.fixture(scope="module")
def sk(tmp_path_factory):
    obj = compile_c(DATA / "checker" / "sk_lookup.c", tmp_path_factory.mktemp("sk") / "sk.o")
    return read_object(obj)


def _seen(coll, k: int) -> int:
    v = coll.maps["seen"].lookup(k.to_bytes(4, "little"))
    return int.from_bytes(bytes(v.buf), "little")


def test_udp_lookup_finds_no_socket(sk):
    coll = InterpCollection(sk)
    r = coll.programs["ok_udp_count"].run_xdp(_frame(17))
    assert r.retval == XDP_PASS
    assert _seen(coll, 0) == 1  # k stays 0: the NULL branch


@pytest.mark.parametrize("name", ["ok_tcp_state", "ok_skc_lookup", "ok_tuple_in_packet",
                                  "ok_across_calls", "ok_join_paths", "ok_lookup_loop"])  # fmt: skip
def test_tcp_lookups_take_the_no_socket_path(sk, name):
    coll = InterpCollection(sk)
    assert coll.programs[name].run_xdp(_frame(6)).retval == XDP_PASS


def test_spin_locked_counter_counts(tmp_path):
    obj = compile_c(DATA / "checker" / "spin_lock.c", tmp_path / "lock.o")
    coll = InterpCollection(read_object(obj))
    prog = coll.programs["ok_const_key_array"]
    got = [prog.run_xdp(_frame(17)).retval for _ in range(3)]
    assert got == [XDP_DROP, XDP_PASS, XDP_DROP]  # packets 1, 2, 3: odd drops
    v = bytes(coll.maps["slots"].lookup((1).to_bytes(4, "little")).buf)
    assert int.from_bytes(v[:8], "little") == 3
