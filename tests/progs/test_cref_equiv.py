"""The C references behave like the .bpfd programs they stand for (differential test).

For every progs/NAME.bpfd with a tests/data/c/NAME.c twin whose program kind can be
test-run, both objects are loaded by bpfdsl's loader and run with BPF_PROG_TEST_RUN on the
same packets: well-formed frames of every protocol the programs look at (VLAN/QinQ, IPv4
with options, IPv6 with extension headers, UDP, TCP, ICMP echo) and every truncation of
them.  Verdict and output bytes must be equal packet by packet, and maps of the same name
must hold the same values afterwards.  This is what makes the benchmarks compare like with
like; a new .bpfd program is covered as soon as its C twin exists.
"""

from __future__ import annotations

import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from support.frames import corpus
from support.paths import ROOT

C_DIR = ROOT / "tests" / "data" / "c"
PROGS = ROOT / "progs"
# sk_msg/sock_ops twins cannot be test-run; tests/progs/test_cref_bench.py compares them on traffic.
TWINS = sorted(
    p.stem
    for p in PROGS.glob("*.bpfd")
    if (C_DIR / f"{p.stem}.c").exists() and not p.stem.startswith("sk_msg_")
)
COUNTING = {"xdp_udp_filter", "xdp_acl", "xdp_pong", "xdp_vlan_strip"}
BLOCK_V4 = [("192.0.2.0", 24), ("198.51.100.7", 32)]
BLOCK_V6 = [("2001:db8:bad::", 48)]


def _build(name: str, tmp: Path) -> tuple[bytes, bytes]:
    from bpfdsl.compiler import compile_source
    from bpfdsl.diagnostics import DiagnosticError

    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    try:
        ours = compile_source((PROGS / f"{name}.bpfd").read_text(), f"progs/{name}.bpfd").obj
    except DiagnosticError as e:
        pytest.skip(f"progs/{name}.bpfd does not compile yet: {e}")
    obj = tmp / f"{name}.o"
    machine = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout
    inc = f"-I/usr/include/{machine.strip() or 'x86_64-linux-gnu'}"
    subprocess.run(
        [
            "clang-19",
            "-O2",
            "-g",
            "-target",
            "bpf",
            inc,
            "-c",
            str(C_DIR / f"{name}.c"),
            "-o",
            str(obj),
        ],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return ours, obj.read_bytes()


def _prefix_key(addr: str, plen: int) -> bytes:
    import ipaddress

    return struct.pack("<I", plen) + ipaddress.ip_address(addr).packed


def _fill(coll) -> None:
    """Same entries in both objects: block lists (v4_block / v6_block) and the CPU table of
    the steering program (cpus: slot i -> CPU i % possible CPUs)."""
    from bpfdsl.kernel import syscall

    m = coll.maps.get("cpus")
    if m is not None:
        n = syscall.possible_cpus()
        for i in range(4):
            syscall.map_update(m.fd, struct.pack("<I", i), struct.pack("<I", i % n))

    for name, entries in (("v4_block", BLOCK_V4), ("v6_block", BLOCK_V6)):
        m = coll.maps.get(name)
        if m is not None:
            for addr, plen in entries:
                syscall.map_update(m.fd, _prefix_key(addr, plen), b"\x01")


def _dump(coll) -> dict[str, dict[bytes, bytes]]:
    """All user maps (not .rodata/.bss/...) as key -> value, per-CPU values summed per CPU."""
    from bpfdsl.abi.map_types import MapType, is_percpu
    from bpfdsl.kernel import syscall

    readable = {
        MapType.ARRAY,
        MapType.HASH,
        MapType.PERCPU_ARRAY,
        MapType.PERCPU_HASH,
        MapType.LRU_HASH,
        MapType.LPM_TRIE,
    }
    out = {}
    for name, m in coll.maps.items():
        if name.startswith(".") or "." in name:
            continue
        info = syscall.map_info(m.fd)
        if info.type not in readable:  # devmap, cpumap, xskmap, sockhash: fds, not data
            continue
        vsize = info.value_size
        if is_percpu(info.type):
            vsize = syscall.percpu_value_size(info.value_size)
        entries, key = {}, None
        for _ in range(100_000):
            key = syscall.map_get_next_key(m.fd, key, info.key_size)
            if key is None:
                break
            val = syscall.map_lookup(m.fd, key, vsize)
            if is_percpu(info.type) and val is not None:
                step = (info.value_size + 7) // 8 * 8
                total = sum(
                    int.from_bytes(val[i : i + min(8, info.value_size)], "little")
                    for i in range(0, len(val), step)
                )
                val = total.to_bytes(8, "little")
            entries[key] = val
        out[name] = entries
    return out


@pytest.mark.kernel
@pytest.mark.parametrize("name", TWINS)
def test_same_behaviour(name: str, tmp_path: Path) -> None:
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    ours_obj, clang_obj = _build(name, tmp_path)
    ours_spec, clang_spec = read_object(ours_obj), read_object(clang_obj)
    runnable = {p.section for p in ours_spec.programs.values() if p.kind and p.kind.test_run}
    if not runnable:
        pytest.skip(
            f"{name}: program kinds cannot be test-run (sk_msg/sock_ops: compared on real traffic by test_cref_bench)"
        )
    frames = corpus()
    with load_collection(ours_spec) as ours, load_collection(clang_spec) as clang:
        _fill(ours)
        _fill(clang)
        sections = {}
        for coll in (ours, clang):
            for p in coll.programs.values():
                if p.spec.section in runnable:  # paired by section and name (several `xdp`)
                    sections.setdefault((p.spec.section, p.name), []).append(p)
        assert all(len(v) == 2 for v in sections.values()), sections.keys()
        mismatches = []
        for sec, (po, pc) in sections.items():
            for f in frames:
                ro = syscall.prog_test_run(int(po.fd), f)
                rc = syscall.prog_test_run(int(pc.fd), f)
                if (ro.retval, ro.data_out) != (rc.retval, rc.data_out):
                    mismatches.append(
                        (sec, f.hex(), ro.retval, rc.retval, ro.data_out.hex(), rc.data_out.hex())
                    )
        assert not mismatches, f"{len(mismatches)} of {len(frames)} differ; first: {mismatches[0]}"
        mo, mc = _dump(ours), _dump(clang)
        for mname in set(mo) & set(mc):
            assert mo[mname] == mc[mname], f"map {mname} differs"
        if name in COUNTING:  # the corpus exercises the programs: their counters moved
            counters = [v for m in mc.values() for v in m.values() if len(v) == 8]
            assert any(int.from_bytes(v, "little") for v in counters)
