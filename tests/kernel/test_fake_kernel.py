"""bpfdsl.kernel.fake, the in-memory bpf(2) for tests without root, agrees with the
kernel: one script of map, program, pin and info commands runs through
bpfdsl.kernel.syscall against the fake and (as root) against the real kernel, and the two
transcripts (results and errnos) are equal.  Where the kernel's order is its own (hash
buckets), the script compares sorted contents.  The fake's own use, a MapView over it
without root, is tested last."""

from __future__ import annotations

import errno as E
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import BPF_ANY, BPF_EXIST, BPF_F_TEST_XDP_LIVE_FRAMES, BPF_NOEXIST
from bpfdsl.abi.limits import TEST_XDP_MAX_BATCH
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.kernel import fake
from bpfdsl.kernel import syscall as S

MOV_R0_2 = bytes([0xB7, 0x00, 0, 0]) + struct.pack("<i", 2)  # r0 = 2 (XDP_PASS)
EXIT = bytes([0x95, 0, 0, 0, 0, 0, 0, 0])


def _ld_map_fd(fd: int) -> bytes:
    """r1 = map fd (ld_imm64, src BPF_PSEUDO_MAP_FD): two slots."""
    return bytes([0x18, 0x11, 0, 0]) + struct.pack("<i", fd) + bytes(8)


def k32(i: int) -> bytes:
    return struct.pack("<I", i)


def v64(i: int) -> bytes:
    return struct.pack("<Q", i)


def _try(f: Callable[[], object]) -> object:
    try:
        return f()
    except S.BpfError as e:
        return f"errno {E.errorcode[e.errno]}"


def script(pin_dir: Path) -> list[tuple[str, object]]:
    """The commands, and what each gave."""
    out: list[tuple[str, object]] = []

    def rec(name: str, f: Callable[[], object]) -> None:
        out.append((name, _try(f)))

    # a hash table of 3 entries
    h = S.map_create(MapType.HASH, 4, 8, 3, name="fk_hash")
    rec("hash lookup absent", lambda: S.map_lookup(h, k32(1), 8))
    rec("hash update exist absent", lambda: S.map_update(h, k32(1), v64(10), BPF_EXIST))
    rec("hash update", lambda: S.map_update(h, k32(1), v64(10), BPF_NOEXIST))
    rec("hash update noexist again", lambda: S.map_update(h, k32(1), v64(11), BPF_NOEXIST))
    rec("hash update exist", lambda: S.map_update(h, k32(1), v64(12), BPF_EXIST))
    rec("hash lookup", lambda: S.map_lookup(h, k32(1), 8))
    rec("hash fill", lambda: [S.map_update(h, k32(i), v64(i * 10), BPF_ANY) for i in (2, 3)])
    rec("hash full", lambda: S.map_update(h, k32(4), v64(40), BPF_ANY))
    rec("hash full, existing key", lambda: S.map_update(h, k32(3), v64(33), BPF_ANY))
    rec("hash next of absent is a key", lambda: S.map_get_next_key(h, k32(99), 4) is not None)

    def walk(fd: S.Fd) -> list[bytes]:
        keys, k = [], S.map_get_next_key(fd, None, 4)
        while k is not None and len(keys) < 10:
            keys.append(k)
            k = S.map_get_next_key(fd, k, 4)
        return sorted(keys)

    rec("hash walk", lambda: walk(h))

    def batch_all(fd: S.Fd, vs: int, count: int = 4) -> list[tuple[bytes, bytes]]:
        # a hash batch takes whole buckets: ENOSPC when one holds more than ``count``
        # (which buckets fill is the kernel's random seed), so ``count`` >= the entries
        rows, tok = [], None
        for _ in range(10):
            ks, vals, n, tok = S.map_lookup_batch(fd, tok, count, 4, vs)
            rows += [(ks[i * 4 : i * 4 + 4], vals[i * vs : (i + 1) * vs]) for i in range(n)]
            if tok is None:
                break
        return sorted(rows)

    rec("hash lookup batch", lambda: batch_all(h, 8))
    rec("hash delete", lambda: S.map_delete(h, k32(2)))
    rec("hash delete absent", lambda: S.map_delete(h, k32(2)))
    rec("hash delete batch with an absent key", lambda: S.map_delete_batch(h, k32(1) + k32(2), 2))
    rec("hash after", lambda: batch_all(h, 8))
    rec("hash update batch", lambda: S.map_update_batch(h, k32(5) + k32(6), v64(5) + v64(6), 2))
    rec("hash update batch noexist", lambda: S.map_update_batch(h, k32(7), v64(7), 1, BPF_NOEXIST))
    rec("hash info", lambda: _map_info(h))
    S.map_freeze(h)
    rec("hash frozen update", lambda: S.map_update(h, k32(5), v64(0), BPF_ANY))
    rec("hash frozen lookup", lambda: S.map_lookup(h, k32(5), 8))

    # an array of 4
    a = S.map_create(MapType.ARRAY, 4, 8, 4, name="fk_array")
    rec("array lookup zero", lambda: S.map_lookup(a, k32(3), 8))
    rec("array lookup past end", lambda: S.map_lookup(a, k32(4), 8))
    rec("array update", lambda: S.map_update(a, k32(2), v64(22), BPF_ANY))
    rec("array update past end", lambda: S.map_update(a, k32(4), v64(1), BPF_ANY))
    rec("array update noexist", lambda: S.map_update(a, k32(1), v64(1), BPF_NOEXIST))
    rec("array delete", lambda: S.map_delete(a, k32(1)))
    rec("array next of none", lambda: S.map_get_next_key(a, None, 4))
    rec("array next of last", lambda: S.map_get_next_key(a, k32(3), 4))
    rec("array next past end", lambda: S.map_get_next_key(a, k32(9), 4))
    rec("array lookup batch", lambda: batch_all(a, 8, count=3))  # two calls: the token
    rec("array bad key size", lambda: S.map_create(MapType.ARRAY, 8, 8, 4).close())
    rec("zero entries", lambda: S.map_create(MapType.HASH, 4, 8, 0).close())

    # per-CPU values
    pa = S.map_create(MapType.PERCPU_ARRAY, 4, 4, 2, name="fk_pcpu")
    size = S.percpu_value_size(4)
    rec("percpu size", lambda: size)
    per = b"".join(struct.pack("<I", c).ljust(8, b"\0") for c in range(S.possible_cpus()))
    rec("percpu update", lambda: S.map_update(pa, k32(1), per, BPF_ANY))
    rec("percpu lookup", lambda: S.map_lookup(pa, k32(1), size))

    # LRU: full, then one more evicts instead of failing
    lru = S.map_create(MapType.LRU_HASH, 4, 8, 64, name="fk_lru")
    rec("lru overfill", lambda: [S.map_update(lru, k32(i), v64(i), BPF_ANY) for i in range(200)])
    rec("lru holds at most max", lambda: len(walk_all(lru)) <= 64)

    # a program that references the hash map: its tag and map ids
    prog = S.prog_load(
        ProgramType.XDP, _ld_map_fd(int(h)) + MOV_R0_2 + EXIT, license="GPL", name="fk_prog"
    )[0]
    rec("prog info", lambda: _prog_info(prog, {S.map_info(h).id: "hash"}))

    # cpumap and devmap entries: the kernel keeps the program's id where the value had its
    # fd, and refuses a program of the wrong flavour, a CPU or device it lacks
    plain, on_cpu, on_dev = (
        S.prog_load(ProgramType.XDP, MOV_R0_2 + EXIT, license="GPL", name=n,
                    expected_attach_type=t)[0]
        for n, t in (("fk_plain", 0), ("fk_cpu", AttachType.XDP_CPUMAP),
                     ("fk_dev", AttachType.XDP_DEVMAP))
    )  # fmt: skip
    ids = {S.prog_info(fd).id: n for fd, n in ((plain, "plain"), (on_cpu, "cpu"), (on_dev, "dev"))}

    def entry(fd: S.Fd, key: int, size: int = 8) -> object:
        """The entry's value as (first u32, name of the program whose id it holds)."""
        raw = S.map_lookup(fd, k32(key), size)
        if raw is None:
            return None
        first, prog_id = struct.unpack("<II", raw.ljust(8, b"\0"))
        return first, ids.get(prog_id, prog_id)

    def val(first: int, fd: int = 0) -> bytes:
        return struct.pack("<Ii", first, fd)

    ncpu = S.possible_cpus()
    cm = S.map_create(MapType.CPUMAP, 4, 8, ncpu + 1, name="fk_cpumap")
    rec("cpumap info", lambda: _map_info(cm))
    rec("cpumap empty slot", lambda: entry(cm, 0))
    rec("cpumap update", lambda: S.map_update(cm, k32(0), val(64, int(on_cpu))))
    rec("cpumap holds the prog id", lambda: entry(cm, 0))
    rec("cpumap no prog", lambda: S.map_update(cm, k32(0), val(32)))
    rec("cpumap no prog entry", lambda: entry(cm, 0))
    rec("cpumap plain prog", lambda: S.map_update(cm, k32(0), val(64, int(plain))))
    rec("cpumap devmap prog", lambda: S.map_update(cm, k32(0), val(64, int(on_dev))))
    rec("cpumap map fd as prog", lambda: S.map_update(cm, k32(0), val(64, int(h))))
    rec("cpumap qsize too big", lambda: S.map_update(cm, k32(0), val(16385)))
    rec("cpumap noexist", lambda: S.map_update(cm, k32(0), val(8), BPF_NOEXIST))
    rec("cpumap past end", lambda: S.map_update(cm, k32(ncpu + 1), val(8)))
    rec("cpumap impossible cpu", lambda: S.map_update(cm, k32(ncpu), val(8)))
    rec("cpumap qsize 0 empties", lambda: (S.map_update(cm, k32(0), val(0)), entry(cm, 0)))
    rec("cpumap walk", lambda: walk_all(cm))
    rec("cpumap delete", lambda: S.map_delete(cm, k32(0)))
    rec("cpumap delete past end", lambda: S.map_delete(cm, k32(ncpu + 1)))
    rec("cpumap value of 12", lambda: S.map_create(MapType.CPUMAP, 4, 12, 1).close())
    cm4 = S.map_create(MapType.CPUMAP, 4, 4, 1, name="fk_cpumap4")
    rec("cpumap qsize only", lambda: (S.map_update(cm4, k32(0), k32(9)), entry(cm4, 0, 4)))
    dm = S.map_create(MapType.DEVMAP, 4, 8, 2, name="fk_devmap")
    rec("devmap info", lambda: _map_info(dm))
    rec("devmap update lo", lambda: S.map_update(dm, k32(1), val(1, int(on_dev))))
    rec("devmap holds the prog id", lambda: entry(dm, 1))
    rec("devmap cpumap prog", lambda: S.map_update(dm, k32(1), val(1, int(on_cpu))))
    rec("devmap unknown ifindex", lambda: S.map_update(dm, k32(1), val(0x7FFFFFF0)))
    rec("devmap prog without ifindex", lambda: S.map_update(dm, k32(1), val(0, int(on_dev))))
    rec("devmap ifindex 0 empties", lambda: (S.map_update(dm, k32(1), val(0)), entry(dm, 1)))
    rec("devmap noexist", lambda: S.map_update(dm, k32(0), val(1), BPF_NOEXIST))
    rec("devmap past end", lambda: S.map_update(dm, k32(2), val(1)))
    rec("devmap walk", lambda: walk_all(dm))
    rec("devmap delete empty slot", lambda: S.map_delete(dm, k32(0)))
    rec("devmap delete past end", lambda: S.map_delete(dm, k32(2)))
    dh = S.map_create(MapType.DEVMAP_HASH, 4, 8, 1, name="fk_devhash")
    rec("devhash info", lambda: _map_info(dh))
    rec("devhash update", lambda: S.map_update(dh, k32(1000), val(1, int(on_dev))))
    rec("devhash entry", lambda: entry(dh, 1000))
    rec("devhash noexist", lambda: S.map_update(dh, k32(1000), val(1), BPF_NOEXIST))
    rec("devhash full", lambda: S.map_update(dh, k32(7), val(1)))
    rec("devhash ifindex 0", lambda: S.map_update(dh, k32(1000), val(0)))
    rec("devhash delete absent", lambda: S.map_delete(dh, k32(7)))
    rec("devhash walk", lambda: walk_all(dh))

    # BPF_PROG_TEST_RUN's refusals (the fake runs nothing past them)
    live = BPF_F_TEST_XDP_LIVE_FRAMES
    rec("run cpumap prog", lambda: S.prog_test_run(on_cpu, bytes(64), flags=live, batch_size=1))
    rec("run devmap prog", lambda: S.prog_test_run(on_dev, bytes(64)))
    rec("run live batch too big",
        lambda: S.prog_test_run(plain, bytes(64), flags=live, batch_size=TEST_XDP_MAX_BATCH + 1))  # fmt: skip
    rec("run batch without live", lambda: S.prog_test_run(plain, bytes(64), batch_size=1))
    rec("run unknown flag", lambda: S.prog_test_run(plain, bytes(64), flags=1 << 30))
    rec("run a map", lambda: S.prog_test_run(int(h), bytes(64)))
    for fd in (plain, on_cpu, on_dev, cm, cm4, dm, dh):
        fd.close()

    # pins
    path = str(pin_dir / "fk_pinned")
    rec("pin", lambda: S.obj_pin(a, path))
    rec("pin again", lambda: S.obj_pin(a, path))
    rec("get is the array", lambda: _map_info(S.obj_get(path)))
    rec("pin into a missing dir", lambda: S.obj_pin(a, str(pin_dir / "nodir" / "x")))
    os.unlink(path)
    rec("get after unlink", lambda: S.obj_get(path))
    rec("get by id", lambda: _map_info(S.map_get_fd_by_id(S.map_info(pa).id)))
    for fd in (h, a, pa, lru, prog):
        fd.close()
    return out


def denied_script() -> list[tuple[str, object]]:
    """What a caller without CAP_BPF gets (kernel.unprivileged_bpf_disabled 1 or 2)."""
    return [
        ("probe", S.probe_bpf()),
        ("map create", _try(lambda: S.map_create(MapType.ARRAY, 4, 4, 1).close())),
        ("prog load", _try(lambda: S.prog_load(ProgramType.XDP, MOV_R0_2 + EXIT, "GPL"))),
        ("get by id", _try(lambda: S.map_get_fd_by_id(1))),
        ("next id", _try(lambda: S.get_next_id("prog", 0))),
    ]


def walk_all(fd: S.Fd) -> list[bytes]:
    keys, k = [], S.map_get_next_key(fd, None, 4)
    while k is not None and len(keys) < 1000:
        keys.append(k)
        k = S.map_get_next_key(fd, k, 4)
    return keys


def _map_info(fd: S.Fd) -> tuple:
    i = S.map_info(fd)
    return (i.type, i.key_size, i.value_size, i.max_entries, i.map_flags, i.name)


def _prog_info(fd: S.Fd, names: dict[int, str]) -> tuple:
    i = S.prog_info(fd)
    return (i.type, bytes(i.tag).hex(), i.name, [names.get(m, m) for m in S.prog_map_ids(fd)])


def _real_kernel_or_skip() -> None:
    reason = S.probe_bpf()
    if reason is not None:
        if os.environ.get("BPFDSL_REQUIRE_KERNEL") == "1":
            pytest.fail(reason)
        pytest.skip(reason)


def test_fake_agrees_with_the_kernel(tmp_path: Path) -> None:
    _real_kernel_or_skip()
    pins = Path("/sys/fs/bpf") / f"fk_{uuid.uuid4().hex[:8]}"
    pins.mkdir()
    try:
        real = script(pins)
    finally:
        for p in pins.iterdir():
            p.unlink()
        pins.rmdir()
    with fake.installed() as k:
        faked = script(tmp_path)
    assert k.calls  # the fake answered (nothing reached the kernel inside the block)
    assert [n for n, _ in faked] == [n for n, _ in real]
    for (name, want), (_, got) in zip(real, faked, strict=True):
        assert got == want, name


def test_fake_answers_without_the_kernel(tmp_path: Path) -> None:
    """The same script runs under the fake whatever the privileges (the kernel is never
    asked: with bpf() denied the real probe would fail), and gives the kernel's values."""
    with fake.installed() as k:
        assert S.probe_bpf() is None
        got = dict(script(tmp_path))
    assert got["hash full"] == "errno E2BIG"
    assert got["array delete"] == "errno EINVAL"
    assert got["hash frozen update"] == "errno EPERM"
    assert got["hash delete batch with an absent key"] == "errno ENOENT"
    assert got["hash lookup batch"] == [(k32(1), v64(12)), (k32(2), v64(20)), (k32(3), v64(33))]
    assert BpfCmd.MAP_CREATE in k.calls and BpfCmd.PROG_LOAD in k.calls
    # outside the block the real system call is back
    assert S.set_backend(None) is None


def test_fake_serves_a_process_that_may_not_call_bpf(tmp_path: Path) -> None:
    """As user nobody, bpf() is refused (EPERM); under the fake the same script runs
    and MapView (the map API the CLI uses) reads back what it wrote."""
    setpriv = shutil.which("setpriv")
    if setpriv is None or os.geteuid() != 0:
        pytest.skip("needs root and setpriv to drop to user nobody")
    work = Path(tempfile.mkdtemp(prefix="fk_nobody_"))  # a dir user nobody can reach
    work.chmod(0o777)
    code = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from pathlib import Path
import test_fake_kernel as t
from bpfdsl.kernel import fake, syscall as S
from bpfdsl.abi.map_types import MapType
from bpfdsl.runtime.mapview import MapView
assert S.probe_bpf() is not None, "bpf() works for nobody: the test proves nothing"
print(json.dumps(t.denied_script()))
with fake.installed():
    got = dict(t.script(Path({str(work)!r})))
    assert got["hash full"] == "errno E2BIG", got
    with S.map_create(MapType.HASH, 4, 8, 16, name="nobody") as fd:
        with MapView(f"id:{{S.map_info(fd).id}}") as m:
            assert m.update_batch([(i, i * 3) for i in range(10)]) == 10
            rows = sorted(m.items())
    want = [(f"{{i:02x}} 00 00 00", f"{{i * 3:02x}}" + " 00" * 7) for i in range(10)]
    assert rows == want, rows
print("ok")
"""
    r = subprocess.run(
        [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable, "-c", code],
        capture_output=True, text=True, timeout=120, cwd=work,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )  # fmt: skip
    shutil.rmtree(work)
    assert r.returncode == 0 and r.stdout.splitlines()[-1] == "ok", r.stderr
    # the fake of a caller without CAP_BPF answers as the kernel answered user nobody
    with fake.installed(fake.FakeKernel(privileged=False)) as k:
        denied = json.loads(json.dumps(denied_script()))
    assert denied == json.loads(r.stdout.splitlines()[0])
    assert dict(denied)["map create"] == "errno EPERM" and k.calls


def test_fake_possible_cpus() -> None:
    """By default the fake has the host's possible CPUs (those the kernel sizes per-CPU
    values by, as the contract script shows); given a number, per-CPU values, the CPUs a
    cpumap entry may name and syscall.possible_cpus() follow it."""
    assert fake.FakeKernel().possible_cpus() == S.host_possible_cpus()
    with fake.installed(fake.FakeKernel(possible_cpus=3)):
        assert S.possible_cpus() == 3 and S.percpu_value_size(4) == 24
        with S.map_create(MapType.PERCPU_ARRAY, 4, 4, 1) as pa:
            assert S.map_lookup(pa, k32(0), 24) == bytes(24)
        with S.map_create(MapType.CPUMAP, 4, 4, 8) as cm:
            S.map_update(cm, k32(2), k32(16))
            with pytest.raises(S.BpfError) as ei:
                S.map_update(cm, k32(3), k32(16))
            assert ei.value.errno == E.ENODEV
    assert S.possible_cpus() == S.host_possible_cpus()


def test_test_runs_are_refused_under_the_fake() -> None:
    """The fake runs no program: BPF_PROG_TEST_RUN is EOPNOTSUPP through sys_bpf, and a
    TestRunner (whose loops call bpf(2) directly) refuses to start rather than reach the
    real kernel with the fake's descriptors."""
    with fake.installed():
        prog = S.prog_load(ProgramType.XDP, MOV_R0_2 + EXIT, license="GPL")[0]
        with pytest.raises(S.BpfError) as ei:
            S.prog_test_run(prog, bytes(64))
        assert ei.value.errno == E.EOPNOTSUPP
        with pytest.raises(S.BpfError) as ei:
            S.TestRunner(prog)
        assert ei.value.errno == E.EOPNOTSUPP and "interpreter" in str(ei.value)
        prog.close()
