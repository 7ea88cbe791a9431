#!/usr/bin/env python3
"""Differential test of the bpfdsl checker against this machine's kernel verifier.

Corpus (deterministic for a seed): progs/*.bpfd compiled; libbpf-style C from
tests/data/c and tests/data/checker_c built with clang-19; instruction-level mutants of
both (bounds check removed / off by one, NULL check removed, bad return value,
uninitialized stack read, write to a read-only ctx field, out-of-range or misaligned
stack access, unbounded loop, wrong helper argument); random instruction sequences.
Each program is checked by bpfdsl.checker and loaded with BPF_PROG_LOAD (maps created
for its relocations).  Prints total, agree, false accepts (we OK, kernel rejects) and
false rejects, per category, plus timing figures.

    python3 scripts/difftest_checker.py [--seed N] [--random N] [--limit N] [-v]
Needs root (bpf()).  Exit 1 if a mutant is falsely accepted.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpfdsl import insn as I  # noqa: E402
from bpfdsl import syscall as S  # noqa: E402
from bpfdsl import uapi as U  # noqa: E402
from bpfdsl.checker import DataMap, check_insns, map_refs_for  # noqa: E402
from bpfdsl.checker.env import MapRef  # noqa: E402
from bpfdsl.helpers import HELPERS_BY_ID  # noqa: E402
from bpfdsl.objfile import read_object  # noqa: E402

PT, AT = U.ProgramType, U.AttachType


@dataclass
class Item:
    """One corpus program.  ``refs``: insn index -> MapRef; ``line``: for mutants, the
    source line of the mutated instruction in the base program (None when unknown)."""

    category: str
    name: str
    insns: list
    prog_type: PT
    attach_type: AT | None
    prog_flags: int = 0
    refs: dict = field(default_factory=dict)
    line_at: object = None
    mut_idx: int | None = None
    ours: str = ""
    kernel: str = ""
    our_msg: str = ""
    kernel_msg: str = ""
    our_err_idx: int | None = None


# ---- building the bases ----


def build_c(out_dir: str) -> list[str]:
    """Compile tests/data/c/*.c and tests/data/checker_c/*.c with clang-19 -O2 -g."""
    arch = "/usr/include/x86_64-linux-gnu"
    objs = []
    for src in sorted(glob.glob(str(ROOT / "tests/data/c/*.c"))) + sorted(
        glob.glob(str(ROOT / "tests/data/checker_c/*.c"))
    ):
        obj = os.path.join(out_dir, Path(src).stem + ".o")
        r = subprocess.run(
            ["clang-19", "-O2", "-g", "-target", "bpf", f"-I{arch}", "-c", src, "-o", obj],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            objs.append(obj)
        else:
            print(f"warning: {src} does not compile: {r.stderr.strip()[:200]}", file=sys.stderr)
    return objs


def build_progs(out_dir: str, mcpus: tuple[str, ...] = ("v3", "v1", "v4")) -> list[str]:
    """Compile progs/*.bpfd (default ISA v3, plus v1 and v4 code shapes)."""
    from bpfdsl.compiler import compile_file

    objs = []
    for mcpu in mcpus:
        for src in sorted(glob.glob(str(ROOT / "progs/*.bpfd"))):
            try:
                r = compile_file(src, mcpu=mcpu)
            except Exception as e:  # a compile failure is the compiler's business
                print(f"warning: {src} ({mcpu}): {e}"[:200], file=sys.stderr)
                continue
            tag = "" if mcpu == "v3" else f".{mcpu}"
            obj = os.path.join(out_dir, Path(src).stem + tag + ".bpfd.o")
            Path(obj).write_bytes(r.obj)
            objs.append(obj)
    return objs


class Maps:
    """Kernel maps for the corpus: one per map object (keyed by id()), created lazily."""

    def __init__(self) -> None:
        self.fds: dict[int, S.Fd] = {}
        self.keep: list = []

    def fd(self, m) -> int:
        k = id(m)
        if k not in self.fds:
            self.keep.append(m)
            self.fds[k] = self._create(m)
        return int(self.fds[k])

    def _create(self, m) -> S.Fd:
        if isinstance(m, DataMap):
            fd = S.map_create(U.MapType.ARRAY, 4, max(1, len(m.data)), 1, map_flags=m.map_flags)
            S.map_update(fd, bytes(4), m.data or b"\0")
            if m.readonly:
                S.map_freeze(fd)
            return fd
        mt = int(m.map_type)
        n = m.max_entries
        if mt == U.MapType.CPUMAP:
            n = min(n, S.possible_cpus())
        return S.map_create(mt, m.key_size, m.value_size, n, map_flags=m.map_flags)

    def close(self) -> None:
        for fd in self.fds.values():
            fd.close()


def base_items(objs: list[str], category_of) -> list[Item]:
    items = []
    for o in objs:
        spec = read_object(o)
        for p in spec.programs.values():
            if p.kind is None:
                continue
            refs = map_refs_for(p, spec.maps, spec.data_sections)
            items.append(
                Item(
                    category_of(o),
                    f"{Path(o).name}:{p.name}",
                    list(p.insns),
                    p.kind.program_type,
                    p.kind.attach_type,
                    p.kind.prog_flags,
                    refs,
                    p.line_at,
                )
            )
    return items


# ---- mutations (instruction level) ----

NOP = I.ja(0)


def _mut(base: Item, kind: str, insns, idx: int, refs=None, tag: str = "") -> Item:
    return dataclasses.replace(
        base,
        category=f"mutant:{kind}",
        name=f"{base.name}#{kind}@{idx}{tag}",
        insns=insns,
        refs=dict(base.refs if refs is None else refs),
        mut_idx=idx,
    )


def _prepend(base: Item, kind: str, pre: list, tag: str) -> Item:
    refs = {k + len(pre): v for k, v in base.refs.items()}
    it = _mut(base, kind, pre + list(base.insns), 0, refs, tag)
    it.line_at = None
    return it


def _is_reg_jump(x) -> bool:
    return x.is_cond_jump and x.source == U.BPF_X and x.cls == U.BPF_JMP


def mutate(base: Item, rng: random.Random, per_kind: int) -> list[Item]:
    out: list[Item] = []
    ins = base.insns
    n = len(ins)

    def pick(idxs):
        idxs = list(idxs)
        rng.shuffle(idxs)
        return idxs[:per_kind]

    # bounds check removed: a pointer comparison becomes "never" or "always" taken
    for i in pick(i for i, x in enumerate(ins) if _is_reg_jump(x)):
        for variant, new in (("nop", NOP), ("always", I.ja(ins[i].off))):
            m = list(ins)
            m[i] = new
            out.append(_mut(base, "bounds_removed", m, i, tag=variant))
    # off by one: the constant added before a bounds check, or an access offset
    for i in pick(
        i
        for i, x in enumerate(ins)
        if x.cls == U.BPF_ALU64 and x.op == U.BPF_ADD and x.source == U.BPF_K and 0 < x.imm < 256
    ):
        m = list(ins)
        m[i] = dataclasses.replace(ins[i], imm=ins[i].imm - 1)
        out.append(_mut(base, "off_by_one", m, i, tag="add"))
    for i in pick(i for i, x in enumerate(ins) if x.is_load and x.src != 10):
        m = list(ins)
        m[i] = dataclasses.replace(ins[i], off=ins[i].off + 1)
        out.append(_mut(base, "off_by_one", m, i, tag="ldx"))
    # NULL check removed
    for i in pick(
        i
        for i, x in enumerate(ins)
        if x.is_cond_jump and x.source == U.BPF_K and x.imm == 0 and x.op in (U.BPF_JEQ, U.BPF_JNE)
    ):
        for variant, new in (("nop", NOP), ("always", I.ja(ins[i].off))):
            m = list(ins)
            m[i] = new
            out.append(_mut(base, "null_check_removed", m, i, tag=variant))
    # bad return value
    for i in pick(
        i
        for i, x in enumerate(ins)
        if i + 1 < n and ins[i + 1].is_exit and x.opcode == 0xB7 and x.dst == 0
    ):
        for v in (7, -1):
            m = list(ins)
            m[i] = I.mov64_imm(0, v)
            out.append(_mut(base, "bad_return", m, i, tag=str(v)))
    # uninitialized stack read: drop a stack store
    for i in pick(i for i, x in enumerate(ins) if x.cls in (U.BPF_ST, U.BPF_STX) and x.dst == 10):
        m = list(ins)
        m[i] = NOP
        out.append(_mut(base, "uninit_stack", m, i))
    # out-of-range / misaligned stack access
    for i in pick(
        i for i, x in enumerate(ins) if (x.is_store or x.is_load) and (x.dst == 10 or x.src == 10)
    ):
        for delta, tag in ((-512, "below"), (512, "above"), (1, "misaligned")):
            m = list(ins)
            m[i] = dataclasses.replace(ins[i], off=ins[i].off + delta)
            out.append(_mut(base, "stack_oob", m, i, tag=tag))
    # write to a read-only ctx field (prepended store through the ctx pointer r1)
    ctx_offs = {
        "xdp_md": range(0, 24, 4),
        "sk_msg_md": range(0, 72, 4),
        "bpf_sock_ops": range(0, 224, 4),
    }
    kind = next((k for k in U.PROGRAM_KINDS if k.program_type == base.prog_type), None)
    if kind is not None and kind.ctx in ctx_offs:
        for off in pick(ctx_offs[kind.ctx]):
            out.append(_prepend(base, "ctx_write", [I.st_mem(4, 1, off, 0)], f"st{off}"))
            out.append(
                _prepend(
                    base, "ctx_write", [I.mov64_imm(0, 1), I.stx_mem(4, 1, 0, off)], f"stx{off}"
                )
            )
    # unbounded loops: a backward jump made unconditional / never-ending prologue loops
    for i in pick(i for i, x in enumerate(ins) if x.is_cond_jump and x.off < 0):
        m = list(ins)
        m[i] = I.ja(ins[i].off)
        out.append(_mut(base, "unbounded_loop", m, i, tag="back"))
    if rng.random() < 0.5:
        out.append(_prepend(base, "unbounded_loop", [I.ja(-1)], "self"))
        out.append(
            _prepend(
                base,
                "unbounded_loop",
                [I.mov64_imm(0, 0), I.jmp_imm(U.BPF_JEQ, 0, 0, -2)],
                "reset",
            )
        )
        out.append(
            _prepend(
                base,
                "unbounded_loop",
                [I.mov64_imm(6, 0), I.alu64_imm(U.BPF_ADD, 6, 1), I.jmp_imm(U.BPF_JLT, 6, 16, -2)],
                "bounded16",
            )
        )
    # wrong helper argument: the register set up for an argument becomes a scalar, or the
    # helper id changes to another of the table
    for i in pick(i for i, x in enumerate(ins) if x.is_helper_call):
        h = HELPERS_BY_ID.get(ins[i].imm)
        if h is None:
            continue
        for a in range(1, len(h.args) + 1):
            for j in range(i - 1, max(-1, i - 8), -1):
                x = ins[j]
                if x.dst == a and (x.is_alu or x.is_ld_imm64 or x.is_load):
                    m = list(ins)
                    m[j] = I.mov64_imm(a, 0) if not x.is_ld_imm64 else I.ld_imm64(a, 0)
                    refs = {k: v for k, v in base.refs.items() if k != j}
                    out.append(_mut(base, "helper_arg", m, j, refs, tag=f"r{a}"))
                    break
        other = rng.choice(sorted(HELPERS_BY_ID))
        m = list(ins)
        m[i] = I.call(other)
        out.append(_mut(base, "helper_arg", m, i, tag=f"id{other}"))
    return out


# ---- random programs ----


def random_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """A random, mostly well-formed XDP program: scalar ALU on r0/r7-r9, ctx loads through
    r6 (= r1), aligned stack traffic, packet reads behind a (sometimes wrong) bounds
    check, map lookups (sometimes without NULL check), forward branches, helper calls.
    Each rule is broken now and then, so both verdicts occur."""
    code: list = [I.mov64_reg(6, 1), I.mov64_imm(0, 2), I.mov64_imm(7, 0)]
    refs: dict = {}
    scal = {0, 7}
    n = rng.randint(3, 25)
    err = rng.choice([0.0, 0.02, 0.05, 0.1])  # how often a rule is broken

    def bad() -> bool:
        return rng.random() < err

    def sreg() -> int:
        if bad() or not scal:
            return rng.choice(range(10))
        return rng.choice(sorted(scal))

    def dreg() -> int:
        return rng.choice(range(10)) if bad() else rng.choice([0, 7, 8, 9])

    for _ in range(n):
        c = rng.random()
        if c < 0.30:
            op = rng.choice(
                [
                    U.BPF_ADD,
                    U.BPF_SUB,
                    U.BPF_MUL,
                    U.BPF_DIV,
                    U.BPF_OR,
                    U.BPF_AND,
                    U.BPF_LSH,
                    U.BPF_RSH,
                    U.BPF_MOD,
                    U.BPF_XOR,
                    U.BPF_MOV,
                    U.BPF_ARSH,
                ]
            )
            d = dreg() if op == U.BPF_MOV else (sreg() if scal else dreg())
            wide = rng.random() < 0.7
            if rng.random() < 0.4:
                f = I.alu64_reg if wide else I.alu32_reg
                code.append(f(op, d, sreg()))
            else:
                imm = rng.choice([0, 1, 2, 4, 7, 8, 14, 31, 63, 255, -1, rng.randint(-1000, 1000)])
                if op in (U.BPF_LSH, U.BPF_RSH, U.BPF_ARSH) and not bad():
                    imm = rng.randint(0, 31)
                if op in (U.BPF_DIV, U.BPF_MOD) and imm == 0 and not bad():
                    imm = 3
                f = I.alu64_imm if wide else I.alu32_imm
                code.append(f(op, d, imm))
            if d != 6:
                scal.add(d)
        elif c < 0.42:
            d = dreg()
            off = rng.choice([0, 4, 8, 12, 16]) if not bad() else rng.choice([2, 20, 24, 13])
            code.append(I.ldx_mem(8 if bad() else 4, d, 6, off))
            if off in (0, 4, 8):
                scal.discard(d)
            else:
                scal.add(d)
        elif c < 0.52:
            off = -8 * rng.randint(1, 8) + (rng.choice([4, 2, -512, 1]) if bad() else 0)
            if rng.random() < 0.5 and scal:
                code.append(I.stx_mem(rng.choice([8, 4]), 10, sreg(), off))
            else:
                code.append(I.st_mem(rng.choice([8, 4, 2, 1]), 10, off, rng.randint(-5, 5)))
        elif c < 0.60:
            d = dreg()
            code.append(I.ldx_mem(rng.choice([8, 4, 8]), d, 10, -8 * rng.randint(1, 8)))
            scal.add(d)
        elif c < 0.72:
            n_chk = rng.choice([1, 2, 4, 8, 14, 20])
            n_acc = n_chk + (rng.choice([-1, 1]) if bad() else 0)
            sz = rng.choice([s for s in (1, 2, 4) if s <= n_chk])
            n_acc = max(n_acc, sz)
            code += [
                I.ldx_mem(4, 2, 6, 0),
                I.ldx_mem(4, 3, 6, 4),
                I.mov64_reg(4, 2),
                I.alu64_imm(U.BPF_ADD, 4, n_chk),
                I.jmp_reg(rng.choice([U.BPF_JGT, U.BPF_JGE]), 4, 3, 2),
                I.ldx_mem(sz, 5, 2, n_acc - sz),
                I.mov64_reg(7, 5) if rng.random() < 0.5 else I.mov64_imm(7, 1),
                I.mov64_imm(0, 1),
            ]
            scal |= {0, 7}
            scal -= {2, 3, 4, 5}
        elif c < 0.80 and maps:
            name = rng.choice(sorted(maps))
            m = maps[name]
            code.append(I.st_mem(4, 10, -4, rng.randint(0, 5)) if not bad() else NOP)
            refs[len(code)] = MapRef(m)
            code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(U.BPF_ADD, 2, -4), I.call(1)]
            if not bad():
                code.append(I.jmp_imm(U.BPF_JEQ, 0, 0, 2))
            sz = rng.choice([8, 4])
            off = rng.randrange(0, m.value_size - sz + 1, sz) if not bad() else m.value_size - 2
            code.append(I.ldx_mem(sz, 7, 0, off))
            code.append(I.alu64_imm(U.BPF_ADD, 7, 1))
            scal -= {1, 2, 3, 4, 5, 0}
            scal.add(7)
        elif c < 0.92:
            skip = rng.randint(1, 3)
            if scal:
                if rng.random() < 0.6:
                    code.append(
                        I.jmp_imm(
                            rng.choice([U.BPF_JEQ, U.BPF_JNE, U.BPF_JGT, U.BPF_JSLT, U.BPF_JSET]),
                            sreg(),
                            rng.randint(-3, 20),
                            skip,
                        )
                    )
                else:
                    code.append(
                        I.jmp_reg(
                            rng.choice([U.BPF_JEQ, U.BPF_JGT, U.BPF_JSGE]), sreg(), sreg(), skip
                        )
                    )
                for _ in range(skip):
                    d = dreg()
                    code.append(I.mov64_imm(d, rng.randint(0, 9)))
        else:
            code.append(I.call(rng.choice([5, 7, 8])))
            scal -= {1, 2, 3, 4, 5}
            scal.add(0)
    if 0 not in scal or rng.random() < 0.5:
        code.append(I.mov64_imm(0, rng.choice([0, 1, 2, 3, 4])))
    code.append(I.exit_())
    return Item("random", f"random#{k}", code, PT.XDP, AT.XDP, 0, refs)


def _scalar_expr(rng: random.Random, d: int, code: list) -> None:
    """Put a bounded-or-not scalar in r``d`` (ctx field, packet-free) and shape it."""
    code.append(I.ldx_mem(4, d, 6, rng.choice([12, 16])))
    for _ in range(rng.randint(0, 3)):
        op = rng.choice(
            [
                "and",
                "and",
                "lsh",
                "rsh",
                "add",
                "sub",
                "neg",
                "mod",
                "alu32",
                "jmp",
                "jmp32",
                "sjmp",
                "movsx",
                "bswap",
                "or",
                "mul",
            ]
        )
        if op == "and":
            code.append(
                I.alu64_imm(U.BPF_AND, d, rng.choice([0xF, 0x1F, 0x3F, 0x7, 0xFF, -8, 0x7FFFFFFF]))
            )
        elif op == "or":
            code.append(I.alu64_imm(U.BPF_OR, d, rng.choice([1, 8, 0x100])))
        elif op == "mul":
            code.append(I.alu64_imm(U.BPF_MUL, d, rng.choice([2, 3, 8])))
        elif op == "lsh":
            code.append(I.alu64_imm(U.BPF_LSH, d, rng.choice([1, 2, 3, 32])))
        elif op == "rsh":
            code.append(I.alu64_imm(U.BPF_RSH, d, rng.choice([1, 4, 28, 32])))
        elif op == "add":
            code.append(I.alu64_imm(U.BPF_ADD, d, rng.choice([1, 4, -4, 100, -1])))
        elif op == "sub":
            code.append(I.alu64_imm(U.BPF_SUB, d, rng.choice([1, 8, -3])))
        elif op == "neg":
            code.append(I.alu64_imm(U.BPF_NEG, d, 0))
        elif op == "mod":
            code += [I.mov64_imm(9, rng.choice([0, 3, 16])), I.alu64_reg(U.BPF_MOD, d, 9)]
        elif op == "alu32":
            code.append(
                I.alu32_imm(
                    rng.choice([U.BPF_ADD, U.BPF_AND, U.BPF_SUB]), d, rng.choice([15, -1, 7, 0x10])
                )
            )
        elif op == "movsx":
            code.append(I.Insn(U.BPF_ALU64 | U.BPF_MOV | U.BPF_X, d, d, rng.choice([8, 16]), 0))
        elif op == "bswap":
            code.append(I.endian(d, rng.choice([16, 32]), True))
        else:
            jop = {
                "jmp": rng.choice(
                    [U.BPF_JGT, U.BPF_JGE, U.BPF_JLT, U.BPF_JLE, U.BPF_JNE, U.BPF_JEQ]
                ),
                "jmp32": rng.choice([U.BPF_JGT, U.BPF_JLE, U.BPF_JSGT, U.BPF_JSLT]),
                "sjmp": rng.choice([U.BPF_JSGT, U.BPF_JSGE, U.BPF_JSLT, U.BPF_JSLE]),
            }[op]
            f = I.jmp32_imm if op == "jmp32" else I.jmp_imm
            # jump to the common "return" at the end: patched later (off placeholder)
            code.append(("J", f(jop, d, rng.choice([0, 7, 15, 16, 63, -1, 255]), 0)))


def idiom_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """Random programs built from idioms whose verdict hinges on exact range reasoning:
    variable map-value / stack / packet offsets behind masks, shifts and (32-bit, signed)
    compares, plus atomics, pointer compares and sign-extending moves."""
    code: list = [I.mov64_reg(6, 1)]
    refs: dict = {}
    kind = rng.choice(
        [
            "map",
            "stack",
            "pkt",
            "pkt2",
            "atomic",
            "ptrcmp",
            "diamond",
            "diamond",
            "loopacc",
            "ptrbranch",
            "ptrbranch",
        ]
    )
    if kind == "map":
        m = maps["a"]
        code += [I.st_mem(4, 10, -8, rng.choice([0, 1, 5]))]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(U.BPF_ADD, 2, -8), I.call(1)]
        if rng.random() < 0.7:
            code.append(("J", I.jmp_imm(U.BPF_JEQ, 0, 0, 0)))
        code.append(I.mov64_reg(8, 0))
        _scalar_expr(rng, 7, code)
        code += [
            I.alu64_reg(U.BPF_ADD, 8, 7),
            I.ldx_mem(rng.choice([1, 2, 4, 8]), 0, 8, rng.choice([0, 0, 1, 4, 8])),
        ]
    elif kind == "stack":
        for off in range(-64, 0, 8):
            if rng.random() < 0.9:
                code.append(I.st_mem(8, 10, off, off))
        _scalar_expr(rng, 7, code)
        code += [I.mov64_reg(8, 10), I.alu64_imm(U.BPF_ADD, 8, -64), I.alu64_reg(U.BPF_ADD, 8, 7)]
        sz = rng.choice([1, 4, 8])
        code.append(I.ldx_mem(sz, 0, 8, 0) if rng.random() < 0.7 else I.st_mem(sz, 8, 0, 1))
    elif kind in ("pkt", "pkt2"):
        n = rng.choice([14, 20, 34])
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_reg(4, 2),
            I.alu64_imm(U.BPF_ADD, 4, n),
        ]
        code.append(("J", I.jmp_reg(U.BPF_JGT, 4, 3, 0)))
        code.append(I.ldx_mem(1, 7, 2, rng.choice([0, 13, n - 1])))
        code.append(I.alu64_imm(U.BPF_AND, 7, rng.choice([0xF, 0x3F, 0xFF])))
        code.append(I.alu64_imm(U.BPF_LSH, 7, rng.choice([0, 2])))
        if kind == "pkt2":
            code.append(
                ("J", I.jmp_imm(rng.choice([U.BPF_JGT, U.BPF_JLT]), 7, rng.choice([20, 60]), 0))
            )
        code += [
            I.mov64_reg(5, 2),
            I.alu64_reg(U.BPF_ADD, 5, 7),
            I.mov64_reg(4, 5),
            I.alu64_imm(U.BPF_ADD, 4, rng.choice([1, 2, 4, 8])),
        ]
        code.append(("J", I.jmp_reg(rng.choice([U.BPF_JGT, U.BPF_JGE]), 4, 3, 0)))
        code.append(I.ldx_mem(rng.choice([1, 2, 4, 8]), 0, 5, rng.choice([0, 1, 3])))
    elif kind == "atomic":
        m = maps["h"]
        code += [I.st_mem(4, 10, -8, 1)]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(U.BPF_ADD, 2, -8), I.call(1)]
        code.append(("J", I.jmp_imm(U.BPF_JEQ, 0, 0, 0)))
        code.append(I.mov64_imm(1, 1))
        op = rng.choice(
            [
                U.BPF_ADD,
                U.BPF_ADD | U.BPF_FETCH,
                U.BPF_XCHG,
                U.BPF_CMPXCHG,
                U.BPF_OR,
                U.BPF_AND | U.BPF_FETCH,
            ]
        )
        tgt = rng.choice([0, 0, 10, 6])
        off = rng.choice([0, 0, 4, -8]) if tgt != 10 else -16
        if tgt == 10:
            code.append(I.st_mem(8, 10, -16, 0))
        code.append(I.atomic(rng.choice([8, 8, 4]), op, tgt, 1, off))
    elif kind == "diamond":
        # two paths meet; one may leave an unsafe offset in a register or a stack slot
        m = maps["a"]
        code += [I.st_mem(4, 10, -8, 0)]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(U.BPF_ADD, 2, -8), I.call(1)]
        code.append(("J", I.jmp_imm(U.BPF_JEQ, 0, 0, 0)))
        code.append(I.ldx_mem(4, 7, 6, rng.choice([12, 16])))
        via_stack = rng.random() < 0.5
        vals = [rng.choice([0, 4, 8, 12, 15, 16, 17, -1]) for _ in range(2)]
        store = rng.choice([8, 4])
        for n_d in range(rng.randint(1, 3)):
            thr = rng.choice([0, 1, 5, 100])
            a_val, b_val = vals if n_d == 0 else (rng.choice([0, 4, 8]), rng.choice([0, 4, 8, 16]))
            seg_a = [I.mov64_imm(8, a_val)]
            seg_b = (
                [I.alu64_imm(U.BPF_AND, 7, rng.choice([3, 7, 15, 31])), I.mov64_reg(8, 7)]
                if rng.random() < 0.4
                else [I.mov64_imm(8, b_val)]
            )
            if via_stack:
                seg_a.append(I.stx_mem(store, 10, 8, -16))
                seg_b.append(I.stx_mem(store, 10, 8, -16))
            code.append(
                I.jmp_imm(rng.choice([U.BPF_JGT, U.BPF_JEQ, U.BPF_JSLT]), 7, thr, len(seg_a) + 1)
            )
            code += seg_a + [I.ja(len(seg_b))] + seg_b
        if via_stack:
            code.append(I.ldx_mem(rng.choice([store, 8, 4]), 8, 10, -16))
        code += [I.alu64_reg(U.BPF_ADD, 0, 8), I.ldx_mem(1, 0, 0, 0)]
    elif kind == "ptrbranch":
        # compare a pointer of some type with 0 / a register / another pointer, 32- or 64-bit,
        # then use an uninitialized register or dereference the pointer on one side only
        m = maps[rng.choice(["a", "h"])]
        code += [I.st_mem(4, 10, -8, rng.choice([0, 1, 9]))]
        refs[len(code)] = MapRef(m)
        code += [I.ld_imm64(1, 0), I.mov64_reg(2, 10), I.alu64_imm(U.BPF_ADD, 2, -8), I.call(1)]
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_imm(4, 0),
            I.mov64_reg(7, 10),
        ]
        a = rng.choice([0, 0, 2, 3, 6, 7, 4])
        op = rng.choice(
            [U.BPF_JEQ, U.BPF_JNE, U.BPF_JEQ, U.BPF_JNE, U.BPF_JGT, U.BPF_JSET, U.BPF_JLE]
        )
        form = rng.choice(["k0", "k0", "k1", "x0", "xrev", "xptr"])
        j32 = rng.random() < 0.2
        if form.startswith("k"):
            f = I.jmp32_imm if j32 else I.jmp_imm
            jmp = f(op, a, 0 if form == "k0" else 1, 0)
        else:
            f = I.jmp32_reg if j32 else I.jmp_reg
            b = 4 if form in ("x0", "xrev") else rng.choice([2, 7, 0])
            jmp = f(op, b, a, 0) if form == "xrev" else f(op, a, b, 0)
        body = [I.mov64_reg(0, 5)] if rng.random() < 0.5 else [I.ldx_mem(4, 8, a, 0)]
        if rng.random() < 0.5:  # the body on the taken side
            code.append(dataclasses.replace(jmp, off=1))
            code.append(("J", I.ja(0)))
        else:
            code.append(("J", jmp))
        code += body
    elif kind == "loopacc":
        # a bounded loop whose accumulator becomes an offset
        n = rng.choice([2, 4, 8, 20])
        step = rng.choice([1, 2, 4])
        code += [I.mov64_imm(7, 0), I.mov64_imm(8, 0)]
        code += [
            I.alu64_imm(U.BPF_ADD, 8, step),
            I.alu64_imm(U.BPF_ADD, 7, 1),
            I.jmp_imm(U.BPF_JLT, 7, n, -3),
        ]
        for off in range(-64, 0, 8):
            code.append(I.st_mem(8, 10, off, 0))
        code += [
            I.mov64_reg(9, 10),
            I.alu64_imm(U.BPF_ADD, 9, -64),
            I.alu64_reg(U.BPF_ADD, 9, 8),
            I.ldx_mem(1, 0, 9, 0),
        ]
    else:  # pointer comparisons
        code += [I.ldx_mem(4, 2, 6, 0), I.ldx_mem(4, 3, 6, 4), I.ldx_mem(4, 4, 6, 8)]
        a, b = rng.sample([2, 3, 4, 10, 6], 2)
        code.append(
            ("J", I.jmp_reg(rng.choice([U.BPF_JGT, U.BPF_JLE, U.BPF_JEQ, U.BPF_JSGT]), a, b, 0))
        )
        code.append(I.ldx_mem(1, 0, rng.choice([2, 4]), 0))
    code.append(I.mov64_imm(0, 2))
    out = []
    for x in code:
        out.append(x)
    end = len(out)
    final = []
    slots = 0
    pos = []
    for x in out:
        pos.append(slots)
        slots += 2 if (not isinstance(x, tuple) and x.is_ld_imm64) else 1
    for n_i, x in enumerate(out):
        if isinstance(x, tuple):
            x = dataclasses.replace(x[1], off=slots - pos[n_i] - 1)
        final.append(x)
    del end
    final.append(I.exit_())
    return Item("random_idioms", f"idiom#{k}:{kind}", final, PT.XDP, AT.XDP, 0, refs)


CTX_KINDS = [
    (PT.XDP, AT.XDP, 24, "xdp"),
    (PT.XDP, AT.XDP_DEVMAP, 24, "xdp_devmap"),
    (PT.SK_MSG, AT.SK_MSG_VERDICT, 80, "sk_msg"),
    (PT.SOCK_OPS, AT.CGROUP_SOCK_OPS, 224, "sock_ops"),
]


def ctx_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """Random context accesses (offset, width, load/store/atomic) for each program kind,
    then a helper call with packet/stack/map memory arguments of random sizes."""
    pt, at, size, name = rng.choice(CTX_KINDS)
    code: list = [I.mov64_reg(6, 1)]
    refs: dict = {}
    from bpfdsl.checker.ctx import CTX_TABLES

    table = CTX_TABLES[{"sk_msg": "sk_msg_md", "sock_ops": "bpf_sock_ops"}.get(name, "xdp_md")]
    for _ in range(rng.randint(1, 2)):
        if rng.random() < 0.7:  # a real field, with its width or a narrower one
            f = rng.choice(list(table.values()))
            off, sz = f.off, rng.choice([f.size, f.size, 1, 2, 4])
        else:
            off = rng.randrange(0, size + 8) & (~3 if rng.random() < 0.7 else ~0)
            sz = rng.choice([1, 2, 4, 4, 8])
        how = rng.random()
        if how < 0.7:
            code.append(I.ldx_mem(sz, 7, 6, off))
        elif how < 0.85:
            code.append(I.st_mem(sz, 6, off, 1))
        else:
            code += [I.mov64_imm(7, 1), I.stx_mem(sz, 6, 7, off)]
    ret = {"sock_ops": 1, "sk_msg": 1}.get(name, 2)
    if pt == PT.XDP and rng.random() < 0.6:
        # csum_diff / xdp_load_bytes with memory of random size
        n = rng.choice([4, 8, 16])
        code += [
            I.ldx_mem(4, 2, 6, 0),
            I.ldx_mem(4, 3, 6, 4),
            I.mov64_reg(4, 2),
            I.alu64_imm(U.BPF_ADD, 4, n),
        ]
        code.append(("J", I.jmp_reg(U.BPF_JGT, 4, 3, 0)))
        for off in range(-32, 0, 8):
            if rng.random() < 0.9:
                code.append(I.st_mem(8, 10, off, 0))
        sz = rng.choice([0, 4, 8, 12, 16, 20, 33])
        if rng.random() < 0.5:
            src = rng.choice(["pkt", "stack"])
            code.append(I.mov64_reg(1, 2) if src == "pkt" else I.mov64_reg(1, 10))
            if src == "stack":
                code.append(I.alu64_imm(U.BPF_ADD, 1, -32))
            code += [
                I.mov64_imm(2, sz),
                I.mov64_imm(3, 0),
                I.mov64_imm(4, 0),
                I.mov64_imm(5, 0),
                I.call(28),
            ]
        else:
            code += [
                I.mov64_reg(1, 6),
                I.mov64_imm(2, 0),
                I.mov64_reg(3, 10),
                I.alu64_imm(U.BPF_ADD, 3, rng.choice([-32, -8, -16])),
                I.mov64_imm(4, sz),
                I.call(189),
            ]
    code.append(I.mov64_imm(0, ret))
    slots, pos = 0, []
    for x in code:
        pos.append(slots)
        slots += 2 if (not isinstance(x, tuple) and x.is_ld_imm64) else 1
    final = [
        dataclasses.replace(x[1], off=slots - pos[n] - 1) if isinstance(x, tuple) else x
        for n, x in enumerate(code)
    ]
    final.append(I.exit_())
    return Item("random_ctx", f"ctx#{k}:{name}", final, pt, at, 0, refs)


def calls_prog(rng: random.Random, k: int, maps: dict) -> Item:
    """BPF-to-BPF calls passing stack pointers, scalars and returning values that are used
    as offsets by the caller."""
    body_callee = []
    a_off = rng.choice([0, -8, 8, 4])
    if rng.random() < 0.5:
        body_callee += [I.ldx_mem(8, 0, 1, a_off)]
    else:
        body_callee += [I.st_mem(8, 1, a_off, 3), I.mov64_reg(0, 2)]
    if rng.random() < 0.3:
        body_callee.append(I.alu64_imm(U.BPF_AND, 0, 7))
    body_callee.append(I.exit_())
    caller = [I.mov64_reg(6, 1)]
    if rng.random() < 0.8:
        caller.append(I.st_mem(8, 10, -16, 5))
    caller += [
        I.mov64_reg(1, 10),
        I.alu64_imm(U.BPF_ADD, 1, -16),
        I.mov64_imm(2, rng.choice([1, 5, 100])),
    ]
    use = rng.random() < 0.5
    after = []
    if use:
        for off in range(-64, -16, 8):
            after.append(I.st_mem(8, 10, off, 0))
        after += [
            I.alu64_imm(U.BPF_AND, 0, rng.choice([7, 15, 63])),
            I.mov64_reg(7, 10),
            I.alu64_imm(U.BPF_ADD, 7, -64),
            I.alu64_reg(U.BPF_ADD, 7, 0),
            I.ldx_mem(1, 0, 7, 0),
        ]
    after += [I.mov64_imm(0, 2), I.exit_()]
    call = I.call_pc(len(after))
    code = caller + [call] + after + body_callee
    if rng.random() < 0.2:  # r6..r9 are not passed to the callee
        code[-2 - (len(body_callee) - 2)] = I.mov64_reg(0, 6)
    return Item("random_calls", f"calls#{k}", code, PT.XDP, AT.XDP, 0, {})


# ---- running ----


def patch(item: Item, maps: Maps) -> bytes:
    ins = list(item.insns)
    for idx, ref in item.refs.items():
        x = ins[idx]
        if not x.is_ld_imm64:
            continue
        fd = maps.fd(ref.map)
        if ref.value_off is None:
            ins[idx] = dataclasses.replace(x, src=U.BPF_PSEUDO_MAP_FD, imm=fd)
        else:
            v = (fd & 0xFFFFFFFF) | ((ref.value_off & 0xFFFFFFFF) << 32)
            ins[idx] = dataclasses.replace(
                x, src=U.BPF_PSEUDO_MAP_VALUE, imm=v - (1 << 64) if v >> 63 else v
            )
    return I.encode(ins)


def kernel_verdict(item: Item, maps: Maps, log_level: int = 1) -> tuple[str, str, str]:
    try:
        code = patch(item, maps)
    except S.BpfError as e:
        return "skip", f"map create failed: {e}", ""
    try:
        fd, log = S.prog_load(
            item.prog_type,
            code,
            "GPL",
            expected_attach_type=item.attach_type or 0,
            prog_flags=item.prog_flags,
            log_level=log_level,
            log_size=1 << 22,
        )
        fd.close()
        return "ok", "", log
    except S.BpfError as e:
        lines = [ln for ln in (e.log or "").splitlines() if ln.strip()]
        msg = next(
            (
                ln
                for ln in reversed(lines)
                if not ln.startswith(("processed ", "verification time"))
            ),
            f"errno {e.errno}",
        )
        return "rej", msg, e.log or ""


def our_verdict(item: Item) -> None:
    r = check_insns(
        item.insns, item.prog_type, item.attach_type, map_refs=item.refs, name=item.name
    )
    item.ours = "ok" if r.ok else "rej"
    if r.errors:
        item.our_msg = r.errors[0].message
        item.our_err_idx = r.errors[0].idx
    return r


def build_corpus(seed: int, n_random: int, tmp: str, per_kind: int = 3) -> list[Item]:
    rng = random.Random(seed)
    c_objs = build_c(tmp)
    p_objs = build_progs(tmp)
    bases = base_items(
        p_objs, lambda o: "progs" if o.count(".") == 2 else "progs_" + o.split(".")[-3]
    )
    bases += base_items(c_objs, lambda o: "c")
    corpus = list(bases)
    for b in bases:
        corpus += mutate(b, rng, per_kind)
    # random programs share a small set of maps
    from bpfdsl.objfile_maps import MapSpec

    rmaps = {
        "h": MapSpec("h", U.MapType.HASH, 4, 8, 16),
        "a": MapSpec("a", U.MapType.ARRAY, 4, 16, 4),
        "pa": MapSpec("pa", U.MapType.PERCPU_ARRAY, 4, 8, 1),
    }
    corpus += [random_prog(rng, k, rmaps) for k in range(n_random)]
    corpus += [idiom_prog(rng, k, rmaps) for k in range(n_random // 2)]
    corpus += [ctx_prog(rng, k, rmaps) for k in range(n_random // 4)]
    corpus += [calls_prog(rng, k, rmaps) for k in range(n_random // 10)]
    return corpus


def run(corpus: list[Item], verbose: bool = False) -> dict:
    maps = Maps()
    stats: dict[str, Counter] = defaultdict(Counter)
    t_ours = 0.0
    slow: list = []
    done = 0
    try:
        for it in corpus:
            t0 = time.perf_counter()
            our_verdict(it)
            dt = time.perf_counter() - t0
            t_ours += dt
            slow.append((dt, it.name))
            done += 1
            if verbose and done % 250 == 0:
                print(f"  ... {done}/{len(corpus)}", file=sys.stderr, flush=True)
            it.kernel, it.kernel_msg, _ = kernel_verdict(it, maps)
            cat = it.category
            st = stats[cat]
            if it.kernel == "skip":
                st["skipped"] += 1
                continue
            st["total"] += 1
            if it.ours == it.kernel:
                st["agree"] += 1
            elif it.ours == "ok":
                st["false_accept"] += 1
            else:
                st["false_reject"] += 1
            if verbose and it.ours != it.kernel:
                print(
                    f"  DISAGREE {it.name}: ours={it.ours} ({it.our_msg}) kernel={it.kernel} ({it.kernel_msg})"
                )
    finally:
        maps.close()
    slow.sort(reverse=True)
    return {"stats": stats, "t_ours": t_ours, "slowest": slow[:5]}


def timing(tmp: str) -> None:
    """Time to check all progs/, and insns/s on the largest program vs the kernel."""
    from bpfdsl.checker import check_object

    objs = [o for o in glob.glob(os.path.join(tmp, "*.bpfd.o"))] + glob.glob(
        os.path.join(tmp, "*.o")
    )
    t0 = time.perf_counter()
    n = 0
    for o in sorted({o for o in objs if o.endswith(".bpfd.o") and Path(o).name.count(".") == 2}):
        n += len(check_object(read_object(o)).programs)
    t_progs = time.perf_counter() - t0
    print(f"time to check all progs/ ({n} programs): {t_progs:.3f} s")
    # largest program by processed insns among all bases
    best = None
    for o in sorted(set(objs)):
        spec = read_object(o)
        for p in spec.programs.values():
            if p.kind is None:
                continue
            refs = map_refs_for(p, spec.maps, spec.data_sections)
            it = Item(
                "t",
                f"{Path(o).name}:{p.name}",
                list(p.insns),
                p.kind.program_type,
                p.kind.attach_type,
                p.kind.prog_flags,
                refs,
            )
            r = check_insns(it.insns, it.prog_type, it.attach_type, map_refs=refs)
            if best is None or len(it.insns) > len(best[0].insns):
                best = (it, r)
    if best is None:
        return
    it, r = best
    reps = max(1, int(0.5 / max(r.seconds, 1e-6)))
    t0 = time.perf_counter()
    for _ in range(reps):
        r = check_insns(it.insns, it.prog_type, it.attach_type, map_refs=it.refs)
    per = (time.perf_counter() - t0) / reps
    maps = Maps()
    try:
        verdict, _, log = kernel_verdict(it, maps, log_level=4)
    finally:
        maps.close()
    m = re.search(r"verification time (\d+) usec", log)
    kp = re.search(r"processed (\d+) insns", log)
    k_us = int(m.group(1)) if m else None
    print(
        f"largest program {it.name}: {len(it.insns)} insns, we processed {r.insns_processed} "
        f"in {per * 1e3:.2f} ms = {r.insns_processed / per:,.0f} insns/s"
    )
    if k_us is not None:
        kproc = int(kp.group(1)) if kp else 0
        print(
            f"  kernel: verification time {k_us} us, processed {kproc} insns "
            f"= {kproc / max(k_us, 1) * 1e6:,.0f} insns/s; ours/kernel time ratio {per * 1e6 / max(k_us, 1):.1f}x"
        )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--random", type=int, default=900, help="random programs (default 900)")
    ap.add_argument("--per-kind", type=int, default=3, help="mutation sites per kind per base")
    ap.add_argument("--limit", type=int, default=0, help="only the first N corpus entries")
    ap.add_argument("-v", "--verbose", action="store_true", help="list disagreements")
    a = ap.parse_args(argv)
    if S.probe_bpf() is not None:
        print(f"bpf() unusable: {S.probe_bpf()}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        corpus = build_corpus(a.seed, a.random, tmp, a.per_kind)
        if a.limit:
            corpus = corpus[: a.limit]
        t0 = time.perf_counter()
        res = run(corpus, a.verbose)
        wall = time.perf_counter() - t0
        stats = res["stats"]
        tot = Counter()
        print(f"{'category':28} {'total':>6} {'agree':>6} {'f.acc':>6} {'f.rej':>6}")
        for cat in sorted(stats):
            s = stats[cat]
            tot.update(s)
            print(
                f"{cat:28} {s['total']:6} {s['agree']:6} {s['false_accept']:6} {s['false_reject']:6}"
            )
        pct = 100.0 * tot["agree"] / max(1, tot["total"])
        print(
            f"{'TOTAL':28} {tot['total']:6} {tot['agree']:6} {tot['false_accept']:6} "
            f"{tot['false_reject']:6}   agreement {pct:.1f}%  (skipped {tot['skipped']})"
        )
        fa_mut = sum(s["false_accept"] for c, s in stats.items() if c.startswith("mutant:"))
        print(f"false accepts on the mutated corpus: {fa_mut}")
        print(f"checker time {res['t_ours']:.2f} s for {tot['total']} programs; wall {wall:.1f} s")
        print("slowest checks: " + ", ".join(f"{n} {t:.2f}s" for t, n in res["slowest"]))
        timing(tmp)
    return 1 if fa_mut else 0


if __name__ == "__main__":
    sys.exit(main())
