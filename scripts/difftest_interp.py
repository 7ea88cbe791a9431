#!/usr/bin/env python3
"""Differential test: the userspace interpreter against the kernel's BPF_PROG_TEST_RUN.

For every program of progs/*.bpfd (and, with --with-c, the clang-built C references in
tests/data/c) that BPF_PROG_TEST_RUN accepts, over the frames of ../shared/pcaps plus
truncated copies and random frames, both engines run the same packet on the same map
contents; retval, data_out and (every --maps-every runs and at the end) the contents of
every data map must be equal.  Prints "runs N, mismatches M" and, with --perf, the
interpreter's packets/s on xdp_udp_filter and its ratio to the kernel's test run.
Needs root.  Usage: scripts/difftest_interp.py [--quick] [--with-c] [--perf] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpfdsl.abi.limits import XDP_MAX_LINEAR  # noqa: E402
from bpfdsl.abi.map_types import MapType  # noqa: E402
from bpfdsl.interp import InterpCollection, InterpError  # noqa: E402
from bpfdsl.kernel import syscall  # noqa: E402
from bpfdsl.obj.collection import read_object  # noqa: E402
from bpfdsl.testing.pytest_plugin import _InterpMap, _KernelMap  # noqa: E402

PCAPS = ROOT / "tests" / "data" / "pcaps"  # copy of the tcpdump test corpus (BSD)
DATA_MAPS = {
    MapType.ARRAY,
    MapType.PERCPU_ARRAY,
    MapType.HASH,
    MapType.PERCPU_HASH,
    MapType.LRU_HASH,
    MapType.LRU_PERCPU_HASH,
    MapType.LPM_TRIE,
}
PORTS = (9999, 53, 80, 443, 4789, 0, 65535)


@dataclass
class Report:
    """Counts of one differential run; ``mismatches`` holds one line per difference."""

    runs: int = 0
    skipped: int = 0
    map_checks: int = 0
    programs: list[str] = field(default_factory=list)
    mismatches: list[str] = field(default_factory=list)


# ---- inputs ----


def objects(with_c: bool, only: list[str] | None) -> list[tuple[str, bytes]]:
    """(label, ELF bytes) of progs/*.bpfd (compiled) and optionally the C references."""
    out: list[tuple[str, bytes]] = []
    try:
        from bpfdsl.compiler import compile_file
    except ImportError:
        compile_file = None
    if compile_file is not None:
        for src in sorted((ROOT / "progs").glob("*.bpfd")):
            try:
                out.append((f"progs/{src.name}", compile_file(str(src)).obj))
            except Exception as e:  # a broken example is reported, not fatal here
                print(f"skip progs/{src.name}: does not compile: {e}", file=sys.stderr)
    if with_c and shutil.which("clang-19"):
        tmp = Path(tempfile.mkdtemp(prefix="difftest-c-"))
        try:
            subprocess.run(
                [str(ROOT / "tests/data/c/build.sh"), str(tmp)],
                check=True,
                capture_output=True,
                timeout=300,
            )
            for o in sorted(tmp.glob("*.o")):
                out.append((f"c/{o.stem}.c", o.read_bytes()))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if only:
        out = [(lab, b) for lab, b in out if any(s in lab for s in only)]
    return out


def pcap_frames(limit: int | None) -> list[bytes]:
    from bpfdsl.runtime.packets import read_pcap

    frames: list[bytes] = []
    for f in sorted(PCAPS.glob("*")):
        try:
            frames += [fr.data for fr in read_pcap(f)]
        except Exception:
            continue  # not an Ethernet capture
        if limit and len(frames) >= limit:
            return frames[:limit]
    return frames


def _ipv4(rng: random.Random, proto: int, payload: bytes) -> bytes:
    ihl = rng.choice((5, 5, 5, 6, 8, 15, 4))
    opts = bytes(rng.getrandbits(8) for _ in range(max(0, ihl - 5) * 4))
    tot = 20 + len(opts) + len(payload)
    src = rng.choice((b"\x0a\x00\x00\x01", b"\xc0\xa8\x01\x02", rng.randbytes(4)))
    dst = rng.choice((b"\x0a\x00\x00\x02", b"\x7f\x00\x00\x01", rng.randbytes(4)))
    frag = rng.choice((0, 0, 0x2000, 0x4000, 0x0001))
    hdr = struct.pack(
        "!BBHHHBBH4s4s", 0x40 | ihl, 0, tot, rng.getrandbits(16), frag, 64, proto, 0, src, dst
    )
    return hdr + opts + payload


def _l4(rng: random.Random) -> tuple[int, bytes]:
    proto = rng.choice((17, 17, 6, 1, 58, rng.getrandbits(8)))
    body = rng.randbytes(rng.choice((0, 4, 12, 40, 300)))
    if proto == 17:
        return proto, struct.pack(
            "!HHHH",
            rng.choice(PORTS + (rng.getrandbits(16),)),
            rng.choice(PORTS + (rng.getrandbits(16),)),
            8 + len(body),
            0,
        ) + body
    if proto == 6:
        return proto, struct.pack(
            "!HHIIBBHHH",
            rng.choice(PORTS),
            rng.choice(PORTS),
            1,
            0,
            0x50,
            rng.getrandbits(8),
            512,
            0,
            0,
        ) + body
    return proto, rng.randbytes(8) + body


def random_frames(n: int, seed: int) -> list[bytes]:
    """Structured random Ethernet frames (IPv4/IPv6/VLAN/QinQ/ARP/junk), some with
    UDP port 9999 or 53 so filters hit."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        eth = rng.choice((b"\xff" * 6, rng.randbytes(6))) + rng.randbytes(6)
        kind = rng.choice(("v4", "v4", "v4", "v6", "vlan", "qinq", "arp", "junk"))
        proto, l4 = _l4(rng)
        if kind == "v4":
            f = eth + b"\x08\x00" + _ipv4(rng, proto, l4)
        elif kind == "v6":
            nh = rng.choice((proto, 0, 43, 44, 60))
            v6 = struct.pack("!IHBB", 0x60000000, len(l4), nh, 64) + rng.randbytes(32)
            f = eth + b"\x86\xdd" + v6 + l4
        elif kind == "vlan":
            f = eth + b"\x81\x00" + rng.randbytes(2) + b"\x08\x00" + _ipv4(rng, proto, l4)
        elif kind == "qinq":
            f = (
                eth
                + b"\x88\xa8"
                + rng.randbytes(2)
                + b"\x81\x00"
                + rng.randbytes(2)
                + b"\x08\x00"
                + _ipv4(rng, proto, l4)
            )
        elif kind == "arp":
            f = eth + b"\x08\x06" + rng.randbytes(28)
        else:
            f = eth + rng.randbytes(2) + rng.randbytes(rng.randrange(0, 200))
        if rng.random() < 0.15:
            f = f[: rng.randrange(14, len(f) + 1)]
        out.append(f)
    return out


def truncated(frames: list[bytes], n: int, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    pool = [f for f in frames if len(f) > 15]
    return [f[: rng.randrange(14, len(f))] for f in (rng.choice(pool) for _ in range(n))]


# ---- map contents (the same in both engines) ----


def fill_ops(spec, frames: list[bytes], ncpus: int) -> list[tuple[str, bytes, bytes]]:
    """(map, key, value) updates applied to both engines before the first packet."""
    v4 = sorted({f[26:30] for f in frames if len(f) >= 34 and f[12:14] == b"\x08\x00"})[:24]
    v6 = sorted({f[22:38] for f in frames if len(f) >= 54 and f[12:14] == b"\x86\xdd"})[:12]
    ops = []
    for name, m in spec.maps.items():
        t, ks, vs = m.map_type, m.key_size, m.value_size
        one = (1).to_bytes(vs, "little") if vs <= 8 else b"\x01" + bytes(vs - 1)
        if t == MapType.LPM_TRIE and ks in (8, 20):
            addrs, bits = (v4, (32, 24, 16)) if ks == 8 else (v6, (128, 64, 48))
            for i, a in enumerate(addrs):
                ops.append((name, bits[i % 3].to_bytes(4, "little") + a, one))
        elif t in (MapType.DEVMAP, MapType.DEVMAP_HASH):
            for k in range(min(2, m.max_entries)):
                val = (1).to_bytes(4, "little") + (b"\xff\xff\xff\xff" if vs == 8 else b"")
                ops.append((name, k.to_bytes(4, "little"), val))
        elif t == MapType.CPUMAP:
            val = (192).to_bytes(4, "little") + (b"\xff\xff\xff\xff" if vs == 8 else b"")
            ops.append((name, bytes(4), val))
        elif t == MapType.ARRAY and vs == 4 and "cpu" in name:
            for k in range(min(m.max_entries, 8)):
                ops.append((name, k.to_bytes(4, "little"), (k % ncpus).to_bytes(4, "little")))
    return ops


def _dump(maps: dict) -> dict[str, dict]:
    return {n: m.items() for n, m in maps.items() if MapType(m.map_type) in DATA_MAPS}


# ---- the comparison ----


def pinned_cpu() -> int:
    """The CPU this process runs on after pinning (per-CPU map slots must agree)."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) != 1:
        raise RuntimeError("pin the process to one CPU first (os.sched_setaffinity)")
    return next(iter(cpus))


def as_plain_xdp(spec):
    """``spec`` with xdp(cpumap)/xdp(devmap) programs turned into plain XDP programs: the
    same instructions, which BPF_PROG_TEST_RUN then accepts.  Returns (spec, converted
    program names)."""
    import dataclasses

    from bpfdsl.abi.prog_types import kind_for_keyword

    plain, progs, conv = kind_for_keyword("xdp"), {}, []
    for name, p in spec.programs.items():
        if p.kind is not None and p.kind.ctx == "xdp_md" and not p.kind.test_run:
            p = dataclasses.replace(p, kind=plain)
            conv.append(name)
        progs[name] = p
    return dataclasses.replace(spec, programs=progs), conv


def _load_both(spec, conv: list[str]):
    """Load ``spec``; a converted program the kernel refuses as plain XDP (one reading
    egress_ifindex) is dropped.  Returns (spec, kernel collection)."""
    import dataclasses

    from bpfdsl.runtime import loader

    try:
        return spec, loader.load_collection(spec)
    except loader.LoadError:
        if not conv:
            raise
        keep = {n: p for n, p in spec.programs.items() if n not in conv}
        spec = dataclasses.replace(spec, programs=keep)
        return spec, loader.load_collection(spec)


def difftest(label: str, obj: bytes, packets: list[bytes], report: Report, maps_every: int) -> None:
    spec, conv = as_plain_xdp(read_object(obj))
    spec, probe = _load_both(spec, conv)
    probe.close()
    runnable = [p for p in spec.programs.values() if p.kind is not None and p.kind.test_run]
    clocked = [p for p in runnable if _reads_clock(p)]
    for p in clocked:  # its maps hold clock readings the engines cannot share
        report.programs.append(f"{label}:{p.name} (skipped: reads the clock)")
    runnable = [p for p in runnable if p not in clocked]
    if not runnable:
        return
    ncpus = syscall.possible_cpus()
    for prog in runnable:
        tag = " (cpumap/devmap program run as xdp)" if prog.name in conv else ""
        report.programs.append(f"{label}:{prog.name}{tag}")
        _, kcoll = _load_both(spec, [])
        with kcoll:
            icoll = InterpCollection(spec, ncpus=ncpus)
            icoll.env.cpu = pinned_cpu()  # the kernel runs the program on this CPU
            kmaps = {n: _KernelMap(lm, ncpus) for n, lm in kcoll.maps.items() if lm.spec}
            imaps = {n: _InterpMap(m) for n, m in icoll.maps.items()}
            for name, key, value in fill_ops(spec, packets, ncpus):
                kmaps[name].set(key, value)
                imaps[name].set(key, value)
            fd = kcoll.programs[prog.name].fd
            iprog = icoll.programs[prog.name]
            where = f"{label}:{prog.name}"
            for n, pkt in enumerate(packets):
                if len(pkt) < 14:  # BPF_PROG_TEST_RUN refuses (EINVAL)
                    report.skipped += 1
                    continue
                k = syscall.prog_test_run(fd, pkt)
                try:
                    i = iprog.run_xdp(pkt)
                    got = (i.retval, i.data_out)
                except InterpError as e:
                    got = (None, str(e).encode())
                report.runs += 1
                if got != (k.retval, k.data_out):
                    report.mismatches.append(
                        f"{where} packet #{n} ({len(pkt)} B {pkt[:40].hex()}): kernel "
                        f"retval {k.retval} out {k.data_out[:48].hex()} | interp retval "
                        f"{got[0]} out {got[1][:48].hex() if got[0] is not None else got[1].decode()}"
                    )
                if (n + 1) % maps_every == 0 or n == len(packets) - 1:
                    report.map_checks += 1
                    kd, idump = _dump(kmaps), _dump(imaps)
                    for mname in kd:
                        if kd[mname] != idump.get(mname):
                            report.mismatches.append(
                                f"{where} map '{mname}' differs after packet #{n}: kernel "
                                f"{_short(kd[mname])} | interp {_short(idump.get(mname))}"
                            )
                            imaps[mname].m.__init__(*_ctor(imaps[mname].m))  # resync: reset both
                            for key in list(kd[mname]):
                                if MapType(kmaps[mname].map_type) not in (
                                    MapType.ARRAY,
                                    MapType.PERCPU_ARRAY,
                                ):
                                    syscall.map_delete(kmaps[mname].fd, key)


# helpers that read a clock (enum bpf_func_id): the kernel's is CLOCK_MONOTONIC, the
# interpreter's a settable Env.clock_ns; programs calling them are compared elsewhere
# (tests/test_ratelimit.py runs progs/xdp_ratelimit.bpfd on both with a clock-free config)
_CLOCK_HELPERS = {
    5,
    118,
    125,
    160,
    208,
}  # ktime_get_ns, jiffies64, *_boot_ns, *_coarse_ns, *_tai_ns


def _reads_clock(prog) -> bool:
    return any(x.opcode == 0x85 and x.src == 0 and x.imm in _CLOCK_HELPERS for x in prog.insns)


def _ctor(m) -> tuple:
    return (m.name, m.map_type, m.key_size, m.value_size, m.max_entries, m.map_flags, m.ncpus)


def _short(d) -> str:
    if d is None:
        return "None"
    items = sorted(d.items())[:4]
    return (
        "{"
        + ", ".join(f"{k.hex()}: {v if isinstance(v, list) else v.hex()}" for k, v in items)
        + (", ..." if len(d) > 4 else "")
        + "}"
    )


# ---- random ALU/JMP programs ----


def _mem_insn(rng: random.Random, d: int, s: int, imm32):
    """A random aligned stack access in r10-64..r10: store, (sign-extending) load, atomic."""
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.opcodes import (
        BPF_ADD,
        BPF_AND,
        BPF_B,
        BPF_CMPXCHG,
        BPF_FETCH,
        BPF_H,
        BPF_LDX,
        BPF_MEMSX,
        BPF_OR,
        BPF_W,
        BPF_XCHG,
        BPF_XOR,
    )

    size = rng.choice((1, 2, 4, 8))
    off = -size * rng.randrange(1, 64 // size + 1)
    kind = rng.choice(("st", "stx", "ldx", "ldsx", "atomic"))
    if kind == "st":
        return I.st_mem(size, 10, off, imm32())
    if kind == "stx":
        return I.stx_mem(size, 10, s, off)
    if kind == "ldx" or (kind == "ldsx" and size == 8):
        return I.ldx_mem(size, d, 10, off)
    if kind == "ldsx":
        sz = {1: BPF_B, 2: BPF_H, 4: BPF_W}[size]
        return I.Insn(BPF_LDX | BPF_MEMSX | sz, d, 10, off)
    size = rng.choice((4, 8))
    off = -size * rng.randrange(1, 64 // size + 1)
    code = rng.choice((BPF_ADD, BPF_AND, BPF_OR, BPF_XOR))
    code = rng.choice((code, code | BPF_FETCH, BPF_XCHG, BPF_CMPXCHG))
    return I.atomic(size, code, 10, s, off)


def random_alu_program(rng: random.Random, length: int = 24, mem: bool = False) -> list:
    """A scalar-only program the verifier accepts: r0-r5 set to random 64-bit constants,
    then random ALU/ALU64 (every op incl. signed div/mod, movsx, bswap, le/be) and forward
    JMP/JMP32 instructions (with ``mem``: also stack stores, loads, sign-extending loads
    and atomics on an initialized 64-byte stack area), then r0 ^= r1..r5."""
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.opcodes import (
        BPF_ADD,
        BPF_ALU,
        BPF_ALU64,
        BPF_AND,
        BPF_ARSH,
        BPF_DIV,
        BPF_END,
        BPF_JEQ,
        BPF_JGE,
        BPF_JGT,
        BPF_JLE,
        BPF_JLT,
        BPF_JMP,
        BPF_JMP32,
        BPF_JNE,
        BPF_JSET,
        BPF_JSGE,
        BPF_JSGT,
        BPF_JSLE,
        BPF_JSLT,
        BPF_K,
        BPF_LSH,
        BPF_MOD,
        BPF_MOV,
        BPF_MUL,
        BPF_NEG,
        BPF_OR,
        BPF_RSH,
        BPF_SUB,
        BPF_TO_BE,
        BPF_TO_LE,
        BPF_X,
        BPF_XOR,
    )

    ops = [
        BPF_ADD,
        BPF_SUB,
        BPF_MUL,
        BPF_DIV,
        BPF_OR,
        BPF_AND,
        BPF_LSH,
        BPF_RSH,
        BPF_NEG,
        BPF_MOD,
        BPF_XOR,
        BPF_MOV,
        BPF_ARSH,
        BPF_END,
    ]
    jops = [
        BPF_JEQ,
        BPF_JGT,
        BPF_JGE,
        BPF_JSET,
        BPF_JNE,
        BPF_JSGT,
        BPF_JSGE,
        BPF_JLT,
        BPF_JLE,
        BPF_JSLT,
        BPF_JSLE,
    ]
    vals = [0, 1, 2, 7, 31, 32, 63, 64, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1 << 63, (1 << 64) - 1]

    def imm32() -> int:
        v = rng.choice(vals + [rng.getrandbits(32)]) & 0xFFFFFFFF
        return v - (1 << 32) if v >> 31 else v

    out = [I.ld_imm64(r, rng.choice(vals + [rng.getrandbits(64)] * 3)) for r in range(6)]
    out += [I.st_mem(8, 10, off, 0) for off in range(-64, 0, 8)] if mem else []
    body: list = []
    while len(body) < length:
        d, s = rng.randrange(6), rng.randrange(6)
        if mem and rng.random() < 0.35:
            body.append(_mem_insn(rng, d, s, imm32))
            continue
        if rng.random() < 0.15:
            skip = rng.randrange(0, 3)
            cls = rng.choice((BPF_JMP, BPF_JMP32))
            if rng.random() < 0.5:
                body.append(I.Insn(cls | rng.choice(jops) | BPF_X, d, s, skip))
            else:
                body.append(I.Insn(cls | rng.choice(jops) | BPF_K, d, 0, skip, imm32()))
            continue
        op = rng.choice(ops)
        wide = rng.random() < 0.5
        cls = BPF_ALU64 if wide else BPF_ALU
        bits = 63 if wide else 31
        if op == BPF_END:
            width = rng.choice((16, 32, 64))
            if wide:
                body.append(I.Insn(BPF_ALU64 | BPF_END, d, 0, 0, width))
            else:
                src = rng.choice((BPF_TO_LE, BPF_TO_BE))
                body.append(I.Insn(BPF_ALU | BPF_END | src, d, 0, 0, width))
        elif op == BPF_NEG:
            body.append(I.Insn(cls | BPF_NEG, d))
        elif op in (BPF_LSH, BPF_RSH, BPF_ARSH):  # immediate shifts must be < width
            if rng.random() < 0.5:
                body.append(I.Insn(cls | op | BPF_K, d, 0, 0, rng.randrange(bits + 1)))
            else:
                body.append(I.Insn(cls | op | BPF_X, d, s))
        elif op == BPF_MOV and rng.random() < 0.3:
            off = rng.choice((8, 16, 32) if wide else (8, 16))
            body.append(I.Insn(cls | BPF_MOV | BPF_X, d, s, off))
        elif op in (BPF_DIV, BPF_MOD):
            off = rng.choice((0, 1))
            if rng.random() < 0.5:
                body.append(I.Insn(cls | op | BPF_X, d, s, off))
            else:
                k = imm32() or 3
                body.append(I.Insn(cls | op | BPF_K, d, 0, off, k))
        elif rng.random() < 0.5:
            body.append(I.Insn(cls | op | BPF_X, d, s))
        else:
            body.append(I.Insn(cls | op | BPF_K, d, 0, 0, imm32()))
    # a jump may not skip past the epilogue's start: clamp offsets to the body
    fixed = []
    for i, x in enumerate(body):
        if x.is_jmp_class:
            x = I.Insn(x.opcode, x.dst, x.src, min(x.off, len(body) - i - 1), x.imm)
        fixed.append(x)
    tail = [I.alu64_reg(BPF_XOR, 0, r) for r in range(1, 6)]
    return out + fixed + tail


def alu_fuzz(n: int, seed: int, report: Report) -> None:
    """``n`` random scalar programs: the kernel's r0 (both halves) == the interpreter's."""
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.opcodes import (
        BPF_RSH,
    )
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.interp import Machine, XdpContext

    rng = random.Random(seed)
    for k in range(n):
        prog = random_alu_program(rng, mem=k % 2 == 1)
        got = Machine(prog + [I.exit_()]).run(XdpContext(bytes(64)))
        want = 0
        for high in (False, True):
            tail = [I.alu64_imm(BPF_RSH, 0, 32)] if high else []
            try:
                fd, _ = syscall.prog_load(
                    ProgramType.XDP, I.encode(prog + tail + [I.exit_()]), "GPL"
                )
            except syscall.BpfError as e:
                report.mismatches.append(f"alu program {k}: kernel refused it: {e}")
                break
            with fd:
                want |= syscall.prog_test_run(fd, bytes(64)).retval << (32 if high else 0)
        else:
            report.runs += 1
            if got != want:
                text = "; ".join(I.format_insn(x, with_code=False) for x in prog)
                report.mismatches.append(
                    f"alu program {k}: kernel r0 {want:#x} interp {got:#x}: {text}"
                )


# ---- performance ----


def perf(obj: bytes, packets: list[bytes], n: int = 3000) -> dict[str, float]:
    """Interpreter packets/s on the program of ``obj`` and the ratio to the kernel's
    per-packet test-run time (kernel-measured, repeat=1000, same packets)."""
    from bpfdsl.runtime import loader

    spec = read_object(obj)
    name = next(iter(spec.programs))
    pkts = [p for p in packets if 14 <= len(p) <= XDP_MAX_LINEAR][:200] or [bytes(64)]
    icoll = InterpCollection(spec, ncpus=syscall.possible_cpus())
    prog = icoll.programs[name]
    t0 = time.perf_counter()
    for k in range(n):
        prog.run_xdp(pkts[k % len(pkts)])
    interp_s = (time.perf_counter() - t0) / n
    with loader.load_collection(spec) as kcoll:
        fd = kcoll.programs[name].fd
        ks = [syscall.prog_test_run(fd, p, repeat=1000).duration_ns for p in pkts[:50]]
        t0 = time.perf_counter()
        for k in range(n):
            syscall.prog_test_run(fd, pkts[k % len(pkts)])
        call_s = (time.perf_counter() - t0) / n
    kernel_ns = sum(ks) / len(ks)
    return {
        "interp_pps": round(1 / interp_s),
        "interp_ns_per_packet": round(interp_s * 1e9),
        "kernel_ns_per_packet": round(kernel_ns, 1),
        "ratio_vs_kernel_run": round(interp_s * 1e9 / max(kernel_ns, 1)),
        "kernel_syscall_ns_per_packet": round(call_s * 1e9),
        "ratio_vs_kernel_syscall": round(interp_s / call_s, 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small fixed slice (CI)")
    ap.add_argument("--with-c", action="store_true", help="also the C reference objects")
    ap.add_argument("--only", nargs="*", help="objects whose label contains one of these")
    ap.add_argument("--random", type=int, default=4000, help="random frames (default 4000)")
    ap.add_argument("--truncated", type=int, default=3000, help="truncated pcap frames")
    ap.add_argument("--maps-every", type=int, default=50, help="compare maps every N runs")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--alu", type=int, default=500, help="random ALU/JMP programs (default 500)")
    ap.add_argument("--perf", action="store_true", help="measure interp vs kernel speed")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    if os.geteuid() != 0 or syscall.probe_bpf() is not None:
        print("difftest_interp: needs root and a usable bpf() syscall", file=sys.stderr)
        return 2
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # per-CPU maps: one CPU
    frames = pcap_frames(300 if a.quick else None)
    nrand, ntrunc = (200, 100) if a.quick else (a.random, a.truncated)
    packets = frames + truncated(frames, ntrunc, a.seed) + random_frames(nrand, a.seed)
    report = Report()
    objs = objects(a.with_c, a.only)
    for label, obj in objs:
        difftest(label, obj, packets, report, a.maps_every)
    alu = Report()
    alu_fuzz(40 if a.quick else a.alu, a.seed, alu)
    report.runs += alu.runs
    report.mismatches += alu.mismatches
    out = {
        "programs": len(report.programs),
        "packets": len(packets),
        "runs": report.runs,
        "skipped": report.skipped,
        "map_checks": report.map_checks,
        "alu_programs": alu.runs,
        "mismatches": len(report.mismatches),
    }
    if a.perf:
        udp = [o for lab, o in objs if "xdp_udp_filter" in lab]
        if udp:
            out["perf_xdp_udp_filter"] = perf(udp[0], packets)
    if a.json:
        out["mismatch_lines"] = report.mismatches[:50]
        print(json.dumps(out, indent=2))
    else:
        for line in report.mismatches[:30]:
            print("MISMATCH", line)
        print("programs:", ", ".join(report.programs))
        for k, v in out.items():
            print(f"{k}: {v}")
    return 1 if report.mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
