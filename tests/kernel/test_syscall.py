"""bpf(2) layer: attr layouts agree with the kernel (it accepts them and does what was asked)."""

from __future__ import annotations

import ctypes
import os
import struct
import uuid

import pytest

from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import BPF_NOEXIST
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import ProgramType, XdpAction
from bpfdsl.kernel import syscall as S


# r0 = imm; exit   (raw encodings; the instruction table is tested in tests/abi/test_insn.py)
def _ret(imm: int) -> bytes:
    return struct.pack("<BBhi", 0xB7, 0, 0, imm) + struct.pack("<BBhi", 0x95, 0, 0, 0)


def _fd_count() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_attr_sizes_match_kernel_prefixes():
    # offsets from union bpf_attr on 6.18 (bpftool btf dump): log_true_size at 140,
    # test.batch_size at 72, link_update.old_prog_fd at 12
    assert S.ProgLoadAttr.log_true_size.offset == 140
    assert S.TestRunAttr.batch_size.offset == 72
    assert S.LinkUpdateAttr.old_prog_fd.offset == 12
    assert ctypes.sizeof(S.ProgInfo) == 232


def test_possible_cpus_matches_sysfs():
    n = S.possible_cpus()
    assert n >= 1 and S.percpu_value_size(4) == 8 * n


@pytest.mark.kernel
def test_map_roundtrip_and_iteration():
    with S.map_create(MapType.HASH, 4, 8, 16, name="t_rt") as m:
        for k in range(3):
            S.map_update(m, struct.pack("<I", k), struct.pack("<Q", k * 100))
        assert S.map_lookup(m, struct.pack("<I", 2), 8) == struct.pack("<Q", 200)
        assert S.map_lookup(m, struct.pack("<I", 9), 8) is None
        keys, k = [], None
        for _ in range(10):
            k = S.map_get_next_key(m, k, 4)
            if k is None:
                break
            keys.append(struct.unpack("<I", k)[0])
        assert sorted(keys) == [0, 1, 2]
        with pytest.raises(S.BpfError) as ei:
            S.map_update(m, struct.pack("<I", 1), bytes(8), BPF_NOEXIST)
        assert ei.value.errno == 17 and ei.value.cmd == BpfCmd.MAP_UPDATE_ELEM
        assert S.map_delete(m, struct.pack("<I", 1)) is True
        assert S.map_delete(m, struct.pack("<I", 1)) is False
        info = S.map_info(m)
        assert (info.type, info.key_size, info.value_size, info.max_entries) == (1, 4, 8, 16)
        assert info.name == b"t_rt"


@pytest.mark.kernel
def test_prog_load_and_test_run():
    fd, log = S.prog_load(ProgramType.XDP, _ret(XdpAction.DROP), "GPL", name="t_drop", log_level=1)
    with fd:
        assert "processed 2 insns" in log
        pkt = bytes(range(64))
        r = S.prog_test_run(fd, pkt, repeat=5)
        assert r.retval == XdpAction.DROP and r.data_out == pkt
        assert S.prog_info(fd).type == ProgramType.XDP
        assert len(S.prog_xlated(fd)) == 16


@pytest.mark.kernel
def test_rejection_carries_log_and_is_not_permission_error():
    bad = struct.pack("<BBhi", 0x95, 0, 0, 0)  # exit without setting r0
    with pytest.raises(S.BpfError) as ei:
        S.prog_load(ProgramType.XDP, bad, "GPL")
    assert not isinstance(ei.value, PermissionError)
    assert "R0 !read_ok" in ei.value.log


@pytest.mark.kernel
def test_log_buffer_grows_on_enospc():
    fd, log = S.prog_load(ProgramType.XDP, _ret(2), "GPL", log_level=2, log_size=16)
    with fd:
        assert "processed 2 insns" in log  # whole log although the first buffer was 16 bytes


@pytest.mark.kernel
def test_pin_get_and_fd_hygiene():
    d = f"/sys/fs/bpf/bpfdsl_t_{uuid.uuid4().hex[:8]}"
    os.mkdir(d)
    before = _fd_count()
    try:
        with S.map_create(MapType.ARRAY, 4, 4, 1) as m:
            S.obj_pin(m, f"{d}/m")
            S.map_update(m, bytes(4), b"\x2a\0\0\0")
        with S.obj_get(f"{d}/m") as m2:
            assert S.map_lookup(m2, bytes(4), 4) == b"\x2a\0\0\0"
        with pytest.raises(S.BpfError):
            S.obj_get(f"{d}/missing")
        assert _fd_count() == before
    finally:
        for f in os.listdir(d):
            os.unlink(f"{d}/{f}")
        os.rmdir(d)


@pytest.mark.kernel
def test_ids_enumerate_our_map():
    with S.map_create(MapType.ARRAY, 4, 4, 1, name="t_ids") as m:
        my_id = S.map_info(m).id
        ids, i = [], 0
        for _ in range(100000):
            i = S.map_get_next_id(i)
            if i is None:
                break
            ids.append(i)
        assert my_id in ids
        with S.map_get_fd_by_id(my_id) as m2:
            assert S.map_info(m2).name == b"t_ids"


def test_probe_reports_reason_or_none():
    r = S.probe_bpf()
    assert r is None or isinstance(r, str) and r


def _flat(btf, tid: int, base: int = 0) -> dict[str, int]:
    """member name -> byte offset, anonymous structs/unions flattened (all alternatives)."""
    out: dict[str, int] = {}
    for m in btf.resolve(tid).members:
        if m.bitfield_size:
            continue
        off = base + m.bit_offset // 8
        sub = btf.resolve(m.type)
        if not m.name and sub.kind.name in ("STRUCT", "UNION"):
            out.update(_flat(btf, sub.id, off))
        elif m.name:
            out.setdefault(m.name, off)
    return out


@pytest.fixture(scope="module")
def vmlinux():
    from bpfdsl.abi.btf.core import parse_btf

    path = "/sys/kernel/btf/vmlinux"
    if not os.path.exists(path):
        pytest.skip("no /sys/kernel/btf/vmlinux")
    with open(path, "rb") as f:
        return parse_btf(f.read())


def test_attr_layouts_match_vmlinux_btf(vmlinux):
    from bpfdsl.abi.btf.core import Kind

    attr = vmlinux.find("bpf_attr", Kind.UNION)
    candidates = []
    for m in attr.members:
        sub = vmlinux.resolve(m.type)
        candidates.append(_flat(vmlinux, sub.id) if sub.kind == Kind.STRUCT else {})
    classes = [
        S.MapCreateAttr,
        S.MapElemAttr,
        S.ProgLoadAttr,
        S.ObjAttr,
        S.ProgAttachAttr,
        S.TestRunAttr,
        S.GetIdAttr,
        S.InfoAttr,
        S.BtfLoadAttr,
        S.LinkCreateAttr,
        S.LinkUpdateAttr,
        S.LinkDetachAttr,
        S.RawTracepointAttr,
    ]
    for cls in classes:
        ours = {n: getattr(cls, n).offset for n, *_ in cls._fields_ if not n.startswith("_")}
        best = max(candidates, key=lambda c: sum(c.get(n) == o for n, o in ours.items()))
        assert ours == {n: best.get(n) for n in ours}, cls.__name__
    for cls, name in (
        (S.ProgInfo, "bpf_prog_info"),
        (S.MapInfo, "bpf_map_info"),
        (S.LinkInfo, "bpf_link_info"),
        (S.BtfInfo, "bpf_btf_info"),
    ):
        theirs = _flat(vmlinux, vmlinux.find(name, Kind.STRUCT).id)
        ours = {
            n: getattr(cls, n).offset
            for n, t, *bits in cls._fields_
            if not n.startswith("_") and n != "u" and not bits
        }
        assert ours == {n: theirs.get(n) for n in ours}, name
