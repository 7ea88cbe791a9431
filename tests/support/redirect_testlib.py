"""Test helpers of the redirect-family tests (test_devmap, test_cpumap, test_xsk, test_skmsg,
test_sockops): build the clang-19 C programs, load an object and hand back fds, read per-CPU
counters.

Objects are loaded with ``bpftool prog loadall`` (libbpf 1.x, which also sets the expected
attach type of xdp/cpumap, xdp/devmap, sk_msg and sockops sections), pinned under a unique
bpffs directory only long enough to open every program and map, then unpinned: the test
holds the only references, so nothing stays behind even if the test process dies.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from bpfdsl.abi.commands import BpfCmd
from bpfdsl.kernel import syscall as S
from support.paths import DATA, PROGS, ROOT

WORKER = Path(__file__).resolve().parent / "tcp_stream_worker.py"
C_DIRS = (DATA / "c", DATA / "redirect_c")
CLANG = [
    "clang-19",
    "-O2",
    "-g",
    "-target",
    "bpf",
    "-Wall",
    "-Werror",
    f"-I/usr/include/{os.uname().machine}-linux-gnu",
]


def build_c(out: Path) -> dict[str, Path]:
    """Compile every .c of tests/data/c and tests/data/redirect_c into ``out``; name -> .o."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    objs = {}
    for d in C_DIRS:
        for src in sorted(d.glob("*.c")):
            obj = out / f"{src.stem}.o"
            proc = subprocess.run(
                [*CLANG, "-c", str(src), "-o", str(obj)],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert proc.returncode == 0, f"clang-19 failed on {src}:\n{proc.stderr}"
            objs[src.stem] = obj
    return objs


@dataclass
class Loaded:
    """Programs and maps of one loaded object, by name (owned fds, closed on exit)."""

    progs: dict[str, S.Fd] = field(default_factory=dict)
    maps: dict[str, S.Fd] = field(default_factory=dict)


@contextmanager
def load_object(obj: Path) -> Iterator[Loaded]:
    """Load ``obj`` with bpftool, open all programs and maps, remove the pins; yields
    :class:`Loaded`.  Everything is released when the block exits."""
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool not installed")
    base = f"/sys/fs/bpf/bpfdsl_rt_{uuid.uuid4().hex[:8]}"
    ld = Loaded()
    try:
        os.makedirs(base)
        proc = subprocess.run(
            ["bpftool", "prog", "loadall", str(obj), f"{base}/p", "pinmaps", f"{base}/m"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"bpftool loadall {obj.name} failed:\n{proc.stderr}"
        for kind, into in (("p", ld.progs), ("m", ld.maps)):
            d = f"{base}/{kind}"
            for name in os.listdir(d) if os.path.isdir(d) else ():
                into[name] = S.obj_get(f"{d}/{name}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    try:
        yield ld
    finally:
        for fd in (*ld.progs.values(), *ld.maps.values()):
            fd.close()


def percpu_values(map_fd: int, key: int) -> list[int]:
    """The u64 value of ``key`` on each possible CPU of a per-CPU array."""
    n = S.possible_cpus()
    raw = S.map_lookup(map_fd, struct.pack("<I", key), 8 * n)
    assert raw is not None
    return list(struct.unpack(f"<{n}Q", raw))


def percpu_sum(map_fd: int, key: int) -> int:
    return sum(percpu_values(map_fd, key))


def quiet_ipv6(ns: str) -> None:
    """Disable IPv6 in test namespace ``ns`` so new interfaces send no router solicitations,
    DAD or MLD frames that XDP counters would see besides the test's own traffic."""
    from bpfdsl.kernel import netlink

    with netlink.in_netns(ns):  # /proc/sys/net is the opening thread's namespace
        for conf in ("all", "default"):
            with open(f"/proc/sys/net/ipv6/conf/{conf}/disable_ipv6", "w") as f:
                f.write("1")


class _EnableStatsAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32)]  # union bpf_attr.enable_stats; 0 = BPF_STATS_RUN_TIME


@contextmanager
def bpf_run_stats() -> Iterator[None]:
    """Kernel program run counters (bpf_prog_info.run_cnt) on while the block runs.

    BPF_ENABLE_STATS returns an fd; the stats stay on only while it is open, so nothing is
    left switched on if the test dies (unlike writing kernel.bpf_stats_enabled).
    """
    fd = S.Fd(S.sys_bpf(BpfCmd.ENABLE_STATS, _EnableStatsAttr(0)))
    with fd:
        yield


def run_count(prog_fd: int) -> int:
    """How often the kernel ran the program (needs :func:`bpf_run_stats`)."""
    return int(S.prog_info(prog_fd).run_cnt)


def stream(cg, sizes: dict[int, int]) -> list[dict]:
    """Run tests/support/tcp_stream_worker.py for ``sizes`` (size -> messages), inside child cgroup
    ``cg`` (bpfdsl.runtime.cgroup.ChildCgroup) when given; its per-size JSON results."""
    pre = (lambda: cg.add(0)) if cg is not None else None  # 0 = the writing process itself
    proc = subprocess.run(
        [sys.executable, str(WORKER), *(f"{s}:{n}" for s, n in sizes.items())],
        capture_output=True,
        text=True,
        timeout=90,
        preexec_fn=pre,
    )
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in proc.stdout.splitlines()]


@contextmanager
def load_bpfdsl(path: Path, config: dict | None = None) -> Iterator[Loaded]:
    """Load ``path`` (.o, or .bpfd compiled first) with bpfdsl's own loader and ``config``
    (.rodata values by name); yields :class:`Loaded` (fds owned by the loader's Collection)."""
    from bpfdsl.cli import object_bytes
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    if not path.exists():
        pytest.skip(f"{path.relative_to(ROOT)} not written yet")
    with load_collection(read_object(object_bytes(path)), config=config or {}) as coll:
        yield Loaded(
            progs={n: p.fd for n, p in coll.programs.items()},
            maps={n: m.fd for n, m in coll.maps.items()},
        )


VARIANTS = ["clang+bpftool", "clang+bpfdsl", "bpfd"]


@contextmanager
def load_variant(
    variant: str, objs: dict[str, Path], name: str, config: dict | None = None
) -> Iterator[Loaded]:
    """Program ``name`` as one of :data:`VARIANTS`: the clang-19 reference loaded by bpftool
    (libbpf) or by bpfdsl's loader, or progs/NAME.bpfd compiled and loaded by bpfdsl
    (skips while that file is not written).  ``config``: .rodata values (bpfdsl only)."""
    if variant == "clang+bpftool":
        with load_object(objs[name]) as ld:
            yield ld
    elif variant == "clang+bpfdsl":
        with load_bpfdsl(objs[name], config) as ld:
            yield ld
    else:
        with load_bpfdsl(PROGS / f"{name}.bpfd", config) as ld:
            yield ld
