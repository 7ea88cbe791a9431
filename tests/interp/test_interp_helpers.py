"""Helpers of the userspace machine behave as the kernel's: csum_diff, adjust_head/tail/meta
limits, redirect/redirect_map fallbacks and flags, map update flags and errors,
xdp_load/store_bytes bounds.  tests/data/interp/helpers_probe.c (clang-19) turns packet
bytes into helper arguments and writes the results back into the packet, so one grid of
packets is run on both engines and compared; interpreter-only tests pin the values the
kernel documents."""

from __future__ import annotations

import errno
import os
import random
import shutil
import struct
import subprocess

import pytest
from support.paths import DATA

from bpfdsl.interp import InterpCollection
from bpfdsl.obj.collection import read_object

PROBE = DATA / "interp" / "helpers_probe.c"
ARCH_INC = f"/usr/include/{os.uname().machine}-linux-gnu"


@pytest.fixture(scope="module")
def probe_obj(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    out = tmp_path_factory.mktemp("probe") / "probe.o"
    cmd = [
        "clang-19",
        "-O2",
        "-g",
        "-target",
        "bpf",
        f"-I{ARCH_INC}",
        "-c",
        str(PROBE),
        "-o",
        str(out),
    ]
    subprocess.run(cmd, check=True, timeout=120)
    return out.read_bytes()


def _grid() -> dict[str, list[bytes]]:
    rng = random.Random(1)

    def pk(b0: int, b1: int, rest: bytes = b"") -> bytes:
        p = bytearray(rng.randbytes(64))
        p[0], p[1] = b0 & 255, b1 & 255
        p[4 : 4 + len(rest)] = rest
        return bytes(p)

    def big(head: bytes, n: int) -> bytes:
        return head + bytes(rng.randrange(256) for _ in range(n - len(head)))

    def s16(o: int) -> bytes:
        return struct.pack("<h", o) + bytes(62)

    return {
        "csum": [pk(rng.randrange(256), rng.randrange(256)) for _ in range(60)]
        + [pk(0, 0, bytes(4)), pk(1, 0, b"\xff" * 4), pk(0, 1, bytes(4))],
        "head": [s16(o) for o in (-300, -256, -216, -217, -215, -1, 0, 1, 49, 50, 51, 64)],
        "tail": [s16(o) for o in (-100, -51, -50, -49, 0, 1, 3456, 3457, 3712, 3713, 4000)]
        # 5000-byte frames: 3520 linear bytes + one 1480-byte frag with 2616 bytes tailroom
        + [
            big(struct.pack("<h", o), 5000) for o in (2616, 2617, 0, -1, -1480, -1481, -4986, -4987)
        ],
        "meta": [s16(o) for o in (-300, -256, -252, -255, -216, -36, -32, -4, -3, 0, 4)],
        "redir": [
            pk(w, k, struct.pack("<I", f))
            for w in range(4)
            for k in (0, 1, 2, 5)
            for f in (0, 1, 2, 3, 4, 8, 16, 24, 9, 0x100)
        ],
        "upd": [
            pk(k, fl, struct.pack("<I", 7) + bytes(4)) for k in range(6) for fl in (0, 1, 2, 3, 4)
        ]
        + [bytes([k, 0, 1]) + bytes(61) for k in range(6)],
        "bytes": [
            struct.pack("<HB", o, n) + bytes(61)
            for o in (0, 1, 48, 49, 50, 63, 64, 0xFFFF)
            for n in (0, 1, 4, 15)
        ]
        + [
            big(struct.pack("<HB", o, n), 9000)  # across linear part and frags
            for o in (3510, 3519, 3520, 7610, 7615, 8990, 8995)
            for n in (4, 15)
        ],
    }


GRID = _grid()
SLOTS = [("dm", 0, 1), ("dm", 1, 1), ("cm", 0, 192)]  # devmap -> lo, cpumap cpu 0


def _interp(obj: bytes) -> InterpCollection:
    coll = InterpCollection(read_object(obj), ncpus=2)
    for m, k, v in SLOTS:
        coll.maps[m].set(k, v)
    return coll


@pytest.mark.kernel
@pytest.mark.parametrize("prog", sorted(GRID))
def test_interp_helpers_match_kernel(probe_obj: bytes, prog: str) -> None:
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime import loader
    from bpfdsl.testing.pytest_plugin import _InterpMap, _KernelMap

    n = syscall.possible_cpus()
    spec = read_object(probe_obj)
    with loader.load_collection(spec) as kc:
        km = {k: _KernelMap(v, n) for k, v in kc.maps.items() if v.spec}
        for m, k, v in SLOTS:
            km[m].set(k, v)
        ic = _interp(probe_obj)
        hmap = _InterpMap(ic.maps["h"])
        for pkt in GRID[prog]:
            k = syscall.prog_test_run(kc.programs[prog].fd, pkt)
            i = ic.programs[prog].run_xdp(pkt)
            assert (i.retval, i.data_out.hex()) == (k.retval, k.data_out.hex()), pkt[:8].hex()
            assert hmap.items() == km["h"].items()


def run(coll: InterpCollection, prog: str, pkt: bytes):
    return coll.programs[prog].run_xdp(pkt)


def test_interp_csum_diff_is_rfc1071_sum(probe_obj: bytes) -> None:
    coll = _interp(probe_obj)
    data = bytearray(64)
    data[0], data[1] = 0, 2  # from_size 0, to_size 8: checksum of bytes 32..39, seed 0
    data[32:40] = bytes.fromhex("4500001c00004000")
    out = run(coll, "csum", bytes(data)).data_out
    got = int.from_bytes(out[8:12], "little")
    words = sum(struct.unpack("<4H", bytes(data[32:40])))  # ones' complement sum (host order)
    while words >> 16:
        words = (words & 0xFFFF) + (words >> 16)
    assert got == words


def test_interp_adjust_head_limits(probe_obj: bytes) -> None:
    coll = _interp(probe_obj)
    # headroom is 256 bytes, of which struct xdp_frame (40 bytes) may not be taken
    assert run(coll, "head", struct.pack("<h", -216) + bytes(62)).retval == 2
    assert len(run(coll, "head", struct.pack("<h", -216) + bytes(62)).data_out) == 64 + 216
    r = run(coll, "head", struct.pack("<h", -217) + bytes(62))
    assert r.retval == 3 and int.from_bytes(r.data_out[:4], "little", signed=True) == -errno.EINVAL
    # at least ETH_HLEN bytes must stay
    assert run(coll, "head", struct.pack("<h", 50) + bytes(62)).retval == 2
    assert run(coll, "head", struct.pack("<h", 51) + bytes(62)).retval == 3


def test_interp_adjust_tail_grows_zeroed_within_tailroom(probe_obj: bytes) -> None:
    coll = _interp(probe_obj)
    r = run(coll, "tail", struct.pack("<h", 100) + bytes(62))
    assert r.retval == 2 and len(r.data_out) == 164 and r.data_out[64:] == bytes(100)
    # frame 4096 - 256 headroom - 320 skb_shared_info: the packet may end at 3520 bytes
    assert run(coll, "tail", struct.pack("<h", 3520 - 64) + bytes(62)).retval == 2
    assert run(coll, "tail", struct.pack("<h", 3521 - 64) + bytes(62)).retval == 3
    assert run(coll, "tail", struct.pack("<h", -51) + bytes(62)).retval == 3  # < ETH_HLEN left


def test_interp_redirect_map_fallback_and_flags(probe_obj: bytes) -> None:
    coll = _interp(probe_obj)

    def redir(which: int, key: int, flags: int) -> int:
        return run(
            coll, "redir", bytes([which, key, 0, 0]) + struct.pack("<I", flags) + bytes(56)
        ).retval

    assert redir(0, 0, 0) == 4  # devmap slot 0 filled: XDP_REDIRECT
    r = run(coll, "redir", bytes([0, 1, 0, 0]) + bytes(60))
    assert r.redirect == ("dm", 1, 0)
    assert redir(0, 2, 2) == 2  # empty slot: the low bits of flags (XDP_PASS)
    assert redir(0, 2, 0) == 0
    assert redir(0, 2, 8) == 4  # BPF_F_BROADCAST redirects even from an empty slot
    assert redir(1, 0, 0) == 4 and redir(1, 1, 1) == 1  # cpumap: cpu 0 set, cpu 1 empty
    assert redir(1, 1, 8) == 0  # broadcast is devmap-only: XDP_ABORTED
    assert redir(2, 0, 2) == 2  # xskmap without sockets: fallback
    assert redir(3, 5, 0) == 4 and redir(3, 5, 1) == 0  # bpf_redirect: flags must be 0


def test_interp_map_update_flags(probe_obj: bytes) -> None:
    coll = _interp(probe_obj)

    def upd(key: int, flags: int) -> int:
        out = run(coll, "upd", bytes([key, flags, 0, 0, 9, 0, 0, 0]) + bytes(56)).data_out
        return int.from_bytes(out[8:12], "little", signed=True)

    assert upd(1, 2) == -errno.ENOENT  # BPF_EXIST on a missing key
    assert upd(1, 1) == 0  # BPF_NOEXIST creates
    assert upd(1, 1) == -errno.EEXIST
    assert upd(1, 4) == -errno.EINVAL  # BPF_F_LOCK without a bpf_spin_lock
    for k in (2, 3, 4):
        assert upd(k, 0) == 0
    assert upd(5, 0) == -errno.E2BIG  # max_entries 4
    assert coll.maps["h"].get(1) == (9).to_bytes(8, "little")


def test_interp_unmodelled_maps_are_placeholders_until_used(tmp_path) -> None:
    # the object's PROG_ARRAY and RINGBUF maps are both modelled now: a tail call through
    # an empty slot falls through, as on the kernel, and a ring buffer's records are
    # drained, not looked up
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    src = PROBE.parent / "unmodelled_maps.c"
    out = tmp_path / "unmodelled_maps.o"
    cmd = ["clang-19", "-O2", "-g", "-target", "bpf", f"-I{ARCH_INC}", "-c", str(src), "-o"]
    subprocess.run([*cmd, str(out)], check=True, timeout=120)
    coll = InterpCollection(read_object(out))
    assert coll.programs["plain"].run(bytes(64)).retval == 2  # XDP_PASS
    assert coll.programs["plain"].run(bytes(10)).retval == 1  # XDP_DROP
    assert coll.programs["jump"].run(bytes(64)).retval == 2  # empty slot 0: XDP_PASS
    with pytest.raises(ValueError, match="map 'rb' holds events, not entries"):
        coll.maps["rb"].get(0)
