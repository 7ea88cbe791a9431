"""In-memory maps and the sk_msg context of the userspace machine follow the kernel's rules:
LPM longest-prefix match bounded by the key's prefixlen, update flags and errnos, LRU
eviction, per-CPU values, empty redirect slots, msg pull/push/pop data pointers, and
faults that name the source line."""

from __future__ import annotations

import errno
import socket

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.flags import BPF_EXIST, BPF_NOEXIST
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_LSH, BPF_OR, BPF_SUB
from bpfdsl.diagnostics import Span
from bpfdsl.interp import InterpError, Machine, SkMsgContext, SockInfo, make_map
from bpfdsl.interp.maps import SlotMap


def v4(prefix: str, plen: int) -> bytes:
    return plen.to_bytes(4, "little") + socket.inet_aton(prefix)


def test_interp_lpm_longest_prefix_wins() -> None:
    m = make_map("acl", MapType.LPM_TRIE, 8, 1, 16)
    m.set(v4("10.0.0.0", 8), 1)
    m.set(v4("10.1.0.0", 16), 2)
    m.set(v4("0.0.0.0", 0), 9)

    def hit(addr: str, plen: int = 32):
        r = m.lookup(v4(addr, plen))
        return None if r is None else r.buf[0]

    assert hit("10.1.2.3") == 2
    assert hit("10.2.2.3") == 1
    assert hit("11.0.0.1") == 9
    assert hit("10.1.2.3", 8) == 1  # the key's prefixlen bounds the match
    assert m.update(v4("10.0.0.0", 33), b"\x01") == -errno.EINVAL
    assert m.update(v4("10.0.0.0", 8), b"\x05", BPF_NOEXIST) == -errno.EEXIST
    assert m.update(v4("12.0.0.0", 8), b"\x05", BPF_EXIST) == -errno.ENOENT
    assert m.delete(v4("10.1.0.0", 24)) == -errno.ENOENT  # delete needs that prefixlen
    assert m.delete(v4("10.1.0.0", 16)) == 0
    assert hit("10.1.2.3") == 1


def test_interp_lpm_full_is_enospc() -> None:
    m = make_map("acl", MapType.LPM_TRIE, 8, 1, 2)
    m.set(v4("10.0.0.0", 8), 1)
    m.set(v4("11.0.0.0", 8), 1)
    assert m.update(v4("12.0.0.0", 8), b"\x01") == -errno.ENOSPC


def test_interp_array_rules() -> None:
    m = make_map("a", MapType.ARRAY, 4, 8, 4)
    assert m.get(3) == bytes(8)  # preallocated, zero-filled
    assert m.update((4).to_bytes(4, "little"), bytes(8)) == -errno.E2BIG
    assert m.update(bytes(4), bytes(8), BPF_NOEXIST) == -errno.EEXIST
    assert m.delete(bytes(4)) == -errno.EINVAL


def test_interp_lru_evicts_least_recently_used() -> None:
    m = make_map("lru", MapType.LRU_HASH, 4, 4, 2)
    m.set(1, 10)
    m.set(2, 20)
    assert m.lookup((1).to_bytes(4, "little")) is not None  # 1 is now the most recent
    m.set(3, 30)
    assert m.get(2) is None and m.get(1) == (10).to_bytes(4, "little")
    h = make_map("h", MapType.HASH, 4, 4, 2)
    h.set(1, 1)
    h.set(2, 2)
    assert h.update((3).to_bytes(4, "little"), bytes(4)) == -errno.E2BIG
    assert h.update((2).to_bytes(4, "little"), bytes(4)) == 0  # replacing needs no room


def test_interp_percpu_hash_program_update_touches_one_cpu() -> None:
    m = make_map("pc", MapType.PERCPU_HASH, 4, 4, 8, ncpus=3)
    assert m.update(bytes(4), (7).to_bytes(4, "little"), 0, cpu=1) == 0
    assert m.get(0) == [bytes(4), (7).to_bytes(4, "little"), bytes(4)]
    # BPF_MAP_LOOKUP_ELEM layout: each CPU's value padded to 8 bytes
    assert m.kernel_dump()[bytes(4)] == bytes(8) + (7).to_bytes(8, "little") + bytes(8)


def test_interp_empty_redirect_slots() -> None:
    dm = make_map("dm", MapType.DEVMAP, 4, 8, 4)
    cm = make_map("cm", MapType.CPUMAP, 4, 8, 2)
    assert isinstance(dm, SlotMap) and isinstance(cm, SlotMap)
    dm.set(0, bytes(8))  # ifindex 0: no device
    cm.set(0, bytes(8))  # qsize 0: no CPU entry
    dm.set(1, (3).to_bytes(4, "little") + bytes(4))
    assert dm.target(bytes(4)) is None and cm.target(bytes(4)) is None
    assert dm.target((1).to_bytes(4, "little")) is not None
    assert cm.update((2).to_bytes(4, "little"), bytes(8)) == -errno.E2BIG


def _msg_prog(helper: int, a2: int, a3: int) -> list[I.Insn]:
    """r0 = helper(ctx, a2, a3, 0) << 32 | (data_end - data) afterwards."""
    return [
        I.mov64_reg(6, 1),
        I.mov64_imm(2, a2),
        I.mov64_imm(3, a3),
        I.mov64_imm(4, 0),
        I.call(helper),
        I.alu64_imm(BPF_LSH, 0, 32),
        I.ldx_mem(8, 2, 6, 0),
        I.ldx_mem(8, 3, 6, 8),
        I.alu64_reg(BPF_SUB, 3, 2),
        I.alu64_reg(BPF_OR, 0, 3),
        I.exit_(),
    ]


@pytest.mark.parametrize(
    "helper,a2,a3,rc,window,out",
    [
        (63, 2, 5, 0, 3, b"0123456789"),  # msg_pull_data: data..data_end = [2, 5)
        (63, 5, 5, -errno.EINVAL, 10, b"0123456789"),  # end <= start
        (63, 8, 11, -errno.EINVAL, 10, b"0123456789"),  # past the message
        (90, 2, 3, 0, 13, b"01\0\0\x0023456789"),  # msg_push_data: 3 bytes at 2
        (91, 1, 4, 0, 6, b"056789"),  # msg_pop_data: 4 bytes at 1
        (91, 0, 0, -errno.EINVAL, 10, b"0123456789"),
    ],
)
def test_interp_msg_data_helpers(helper, a2, a3, rc, window, out) -> None:
    ctx = SkMsgContext(b"0123456789", SockInfo())
    r0 = Machine(_msg_prog(helper, a2, a3)).run(ctx)
    assert (r0 >> 32) == rc & 0xFFFFFFFF
    assert r0 & 0xFFFFFFFF == window
    assert ctx.data_out() == out


def test_interp_sk_msg_ctx_fields_in_kernel_byte_order() -> None:
    sock = SockInfo(socket.AF_INET, "10.0.0.1", "10.0.0.2", local_port=8080, remote_port=443)

    def field(off: int) -> int:
        return Machine([I.ldx_mem(4, 0, 1, off), I.exit_()]).run(SkMsgContext(b"x", sock))

    assert field(16) == socket.AF_INET
    assert field(20).to_bytes(4, "little") == socket.inet_aton("10.0.0.2")  # remote_ip4
    assert field(24).to_bytes(4, "little") == socket.inet_aton("10.0.0.1")  # local_ip4
    assert field(60).to_bytes(4, "little")[2:] == (443).to_bytes(2, "big")  # remote_port
    assert field(64) == 8080  # local_port: host order
    assert field(68) == 1  # size


def test_interp_fault_names_source_line() -> None:
    prog = [I.mov64_imm(0, 0), I.ldx_mem(4, 0, 0, 0), I.exit_()]
    where = {1: Span("prog.bpfd", 7, 12)}
    with pytest.raises(InterpError) as ei:
        Machine(prog, where=where.get).run(SkMsgContext(b"", SockInfo()))
    assert str(ei.value).startswith("prog.bpfd:7:12: error[interp-fault]: load through a scalar")
    assert ei.value.slot == 1
