"""Translate a program's basic blocks into Python functions (what the machine runs).

Takes decoded instructions plus resolved ld_imm64 values and returns one function per
basic block, ``block(R, M) -> next block index`` (-1: the program returned), over the
register list ``R`` and the machine ``M``.  Registers live in locals inside a block;
scalar operations are inlined and everything else (pointers, uninitialized registers,
helpers, atomics) goes through the semantic functions of :mod:`bpfdsl.interp.alu` and
the regions of :mod:`bpfdsl.interp.memory`, which raise :class:`Fault`.  Every
instruction sits on its own source lines, so a fault's traceback line names it
(:attr:`Jitted.line_to_insn`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from bpfdsl.abi.helpers import kernel_helper_name
from bpfdsl.abi.insn import Insn, format_insn, index_by_slot, jump_target, slot_offsets
from bpfdsl.abi.opcodes import (
    BPF_ADD,
    BPF_ALU,
    BPF_ALU64,
    BPF_AND,
    BPF_CMPXCHG,
    BPF_DIV,
    BPF_END,
    BPF_FETCH,
    BPF_JA,
    BPF_JCOND,
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
    BPF_LDX,
    BPF_LSH,
    BPF_MEM,
    BPF_MEMSX,
    BPF_MOD,
    BPF_MOV,
    BPF_MUL,
    BPF_NEG,
    BPF_OR,
    BPF_RSH,
    BPF_ST,
    BPF_STX,
    BPF_SUB,
    BPF_TO_BE,
    BPF_X,
    BPF_XCHG,
    BPF_XOR,
)
from bpfdsl.interp import alu
from bpfdsl.interp.maps import UnsupportedMap
from bpfdsl.interp.memory import M32, M64, Fault, NotModelled, Ptr, s32, s64
from bpfdsl.interp.state import FuncRef

FILENAME = "<bpf-jit>"
_JCMP = {
    BPF_JEQ: "==",
    BPF_JNE: "!=",
    BPF_JGT: ">",
    BPF_JGE: ">=",
    BPF_JLT: "<",
    BPF_JLE: "<=",
    BPF_JSGT: ">",
    BPF_JSGE: ">=",
    BPF_JSLT: "<",
    BPF_JSLE: "<=",
}
_SIGNED_J = {BPF_JSGT, BPF_JSGE, BPF_JSLT, BPF_JSLE}
# scalar ALU ops inlined as Python expressions over ints a (dst) and b (src/imm)
_INLINE64 = {
    BPF_ADD: "({a} + {b}) & 0xFFFFFFFFFFFFFFFF",
    BPF_SUB: "({a} - {b}) & 0xFFFFFFFFFFFFFFFF",
    BPF_MUL: "({a} * {b}) & 0xFFFFFFFFFFFFFFFF",
    BPF_OR: "{a} | {b}",
    BPF_AND: "{a} & {b}",
    BPF_XOR: "{a} ^ {b}",
    BPF_LSH: "({a} << ({b} & 63)) & 0xFFFFFFFFFFFFFFFF",
    BPF_RSH: "{a} >> ({b} & 63)",
}
_INLINE32 = {
    BPF_ADD: "({a} + {b}) & 0xFFFFFFFF",
    BPF_SUB: "({a} - {b}) & 0xFFFFFFFF",
    BPF_MUL: "({a} * {b}) & 0xFFFFFFFF",
    BPF_OR: "({a} | {b}) & 0xFFFFFFFF",
    BPF_AND: "{a} & {b} & 0xFFFFFFFF",
    BPF_XOR: "({a} ^ {b}) & 0xFFFFFFFF",
    BPF_LSH: "({a} << ({b} & 31)) & 0xFFFFFFFF",
    BPF_RSH: "({a} & 0xFFFFFFFF) >> ({b} & 31)",
}


@dataclass
class Jitted:
    """``blocks[i]``: the function of the block starting at instruction ``i`` (one that
    raises where no block starts; index ``len(insns)`` is the fall-off-the-end sentinel); ``sizes[i]``:
    instructions in it; ``line_to_insn``: generated source line -> instruction index."""

    blocks: list[Callable]
    sizes: list[int]
    line_to_insn: dict[int, int]
    source: str


def _leaders(insns: Sequence[Insn], targets: dict[int, int]) -> list[int]:
    lead = {0}
    for i, x in enumerate(insns):
        if x.is_jmp_class and not (x.is_call and not x.is_pseudo_call):
            lead.add(i + 1)
            if i in targets:
                lead.add(targets[i])
    return sorted(s for s in lead if s <= len(insns))


class _Gen:
    def __init__(self, insns: Sequence[Insn], resolved: dict[int, object], impls: dict):
        self.insns = list(insns)
        self.resolved = resolved
        self.impls = impls
        self.ns: dict[str, Any] = {
            "Ptr": Ptr,
            "Fault": Fault,
            "NotModelled": NotModelled,
            "s64": s64,
            "s32": s32,
            "_nonint": alu.nonint,
            "_int": alu.as_int,
            "_badptr": alu.badptr,
            "_stx": alu.stx,
            "_atomic": alu.atomic,
            "_parith": alu.ptr_arith,
            "_pcmp": alu.ptr_cmp,
            "_sext": alu.sext,
            "_bswap": alu.bswap,
        }
        self.lines: list[str] = []
        self.line_to_insn: dict[int, int] = {}
        slots, by_slot = slot_offsets(self.insns), index_by_slot(self.insns)
        self.targets: dict[int, int] = {}
        for i, x in enumerate(self.insns):
            if x.is_jmp_class and not x.is_exit and not (x.is_call and not x.is_pseudo_call):
                t = jump_target(self.insns, i, slots, by_slot)
                self.targets[i] = -2 if t is None else t

    def emit(self, i: int, line: str) -> None:
        self.lines.append(line)
        self.line_to_insn[len(self.lines)] = i

    def const(self, value: object) -> str:
        name = f"_c{len(self.ns)}"
        self.ns[name] = value
        return name

    def build(self) -> Jitted:
        n = len(self.insns)
        leaders = _leaders(self.insns, {i: t for i, t in self.targets.items() if t >= 0})
        funcs = {v.target for v in self.resolved.values() if isinstance(v, FuncRef)}
        leaders = sorted(set(leaders) | {t for t in funcs if 0 <= t < n})  # callbacks
        sizes = [0] * (n + 1)
        names: dict[int, str] = {}
        for k, start in enumerate(leaders):
            if start >= n:
                continue
            end = next((s for s in leaders[k + 1 :] if s > start), n)
            names[start] = f"b{start}"
            sizes[start] = end - start
            self.block(start, end)
        src = "\n".join(self.lines) + "\n"
        exec(compile(src, FILENAME, "exec"), self.ns)  # our own generated code
        blocks: list[Callable] = [_no_block] * (n + 1)
        for start, name in names.items():
            blocks[start] = self.ns[name]
        blocks[n] = _fell_off
        sizes[n] = 0
        return Jitted(blocks, sizes, self.line_to_insn, src)

    # ---- one block ----
    def block(self, start: int, end: int) -> None:
        body: list[tuple[int, str]] = []
        used: set[int] = set()
        written: set[int] = set()
        terminated = False
        for i in range(start, end):
            code, rd, wr, term = self.insn(i)
            body += [(i, c) for c in code]
            used |= rd
            written |= wr
            if term:
                terminated = True
                break
        regs = sorted(used | written)
        self.emit(start, f"def b{start}(R, M):")
        if regs:
            self.emit(start, f"    {', '.join(f'r{r}' for r in regs)}, = {self._get(regs)}")
        wb = self._put(sorted(written))
        for i, c in body:
            self.emit(i, "    " + c.replace("@WB", wb))
        if not terminated:
            if wb:
                self.emit(end - 1, "    " + wb)
            self.emit(end - 1, f"    return {end}")

    @staticmethod
    def _get(regs: list[int]) -> str:
        return "(" + ", ".join(f"R[{r}]" for r in regs) + ",)"

    @staticmethod
    def _put(regs: list[int]) -> str:
        return "; ".join(f"R[{r}] = r{r}" for r in regs)

    def insn(self, i: int) -> tuple[list[str], set[int], set[int], bool]:
        """(lines, registers read, registers written, ends the block)."""
        x = self.insns[i]
        c = x.cls
        if c in (BPF_ALU, BPF_ALU64):
            return self.alu(x)
        if x.is_exit:
            return ["@WB", "return M._leave()"], set(), set(), True
        if x.is_call:
            return self.call(i, x)
        if c in (BPF_JMP, BPF_JMP32):
            return self.jump(i, x)
        if x.is_ld_imm64:
            v = self.resolved.get(i, x.imm & M64)
            if i not in self.resolved and x.src != 0:
                return (
                    [self._fault(f"ld_imm64 with pseudo source {x.src} names no map")],
                    set(),
                    set(),
                    False,
                )
            return [f"r{x.dst} = {self.const(v)}"], set(), {x.dst}, False
        d, s, off = x.dst, x.src, x.off
        if c == BPF_LDX and x.mode in (BPF_MEM, BPF_MEMSX):
            sx = x.mode == BPF_MEMSX
            line = f"r{d} = r{s}.region.load(r{s}, {off}, {x.size}, {sx}) if type(r{s}) is Ptr else _badptr(r{s}, 'load')"
            return [line], {s}, {d}, False
        if c == BPF_ST and x.mode == BPF_MEM:
            return (
                [
                    f"if type(r{d}) is not Ptr: _badptr(r{d}, 'store')",
                    f"r{d}.region.store(r{d}, {off}, {x.size}, {x.imm & M64})",
                ],
                {d},
                set(),
                False,
            )
        if c == BPF_STX and x.mode == BPF_MEM:
            return [f"_stx(r{d}, {off}, {x.size}, r{s}, {s})"], {d, s}, set(), False
        if x.is_atomic:
            ok = x.size in (4, 8) and (
                x.imm in (BPF_XCHG, BPF_CMPXCHG) or (x.imm & ~BPF_FETCH) in alu.OPS64
            )
            if not ok:
                return [self._fault(f"unsupported atomic {format_insn(x)}")], set(), set(), False
            call = f"_atomic({x.imm}, {x.size}, {off}, r{d}, r{s}, r0)"
            if x.imm == BPF_CMPXCHG:  # r0 = old value (also when the source is r0)
                return [f"r0 = {call}[1]"], {d, s, 0}, {0}, False
            return [f"r{s} = {call}[0]"], {d, s, 0}, {s}, False
        return [self._fault(f"unsupported instruction {format_insn(x)}")], set(), set(), False

    def _fault(self, msg: str) -> str:
        return f"raise Fault({msg!r})"

    # ---- ALU ----
    def alu(self, x: Insn) -> tuple[list[str], set[int], set[int], bool]:
        d, s, op, wide = x.dst, x.src, x.op, x.is_alu64
        mask = M64 if wide else M32
        reg = x.source == BPF_X
        k = x.imm & mask
        rd = f"r{d}"
        if op == BPF_END:
            if x.imm not in (16, 32, 64):
                return [self._fault(f"byte swap of {x.imm} bits")], set(), set(), False
            if wide or x.source == BPF_TO_BE:
                return [f"{rd} = _bswap(_int({rd}), {x.imm})"], {d}, {d}, False
            return [f"{rd} = _int({rd}) & {(1 << x.imm) - 1}"], {d}, {d}, False
        if op == BPF_NEG:
            return [f"{rd} = -_int({rd}) & {mask}"], {d}, {d}, False
        if op == BPF_MOV:
            if not reg:
                return [f"{rd} = {k}"], set(), {d}, False
            if x.off:
                return [f"{rd} = _sext(_int(r{s}), {x.off}) & {mask}"], {s}, {d}, False
            if wide:
                return (
                    [
                        f"if r{s} is None: _nonint(None)",
                        f"{rd} = r{s}",
                    ],
                    {s},
                    {d},
                    False,
                )
            return (
                [
                    f"{rd} = r{s} & {M32} if type(r{s}) is int else _nonint(r{s}, '32-bit move of a pointer')"
                ],
                {s},
                {d},
                False,
            )
        signed = x.off == 1 and op in (BPF_DIV, BPF_MOD)
        table = (
            (alu.SIGNED64 if wide else alu.SIGNED32)
            if signed
            else (alu.OPS64 if wide else alu.OPS32)
        )
        f = table.get(op)
        if f is None:
            return [self._fault(f"unknown ALU operation {x.opcode:#04x}")], set(), set(), False
        inline = (_INLINE64 if wide else _INLINE32).get(op) if not signed else None
        b = f"r{s}" if reg else str(k)
        reads = {d, s} if reg else {d}
        expr = inline.format(a=rd, b=b) if inline else f"{self.const(f)}({rd}, {b})"
        guard = f"type({rd}) is int and type(r{s}) is int" if reg else f"type({rd}) is int"
        if wide and op in (BPF_ADD, BPF_SUB) and not reg:
            delta = s64(k) if op == BPF_ADD else -s64(k)
            slow = (
                f"Ptr({rd}.region, {rd}.off + {delta}, {rd}.gen) if type({rd}) is Ptr "
                f"else _parith({op}, {rd}, {b})"
            )
        elif wide and op in (BPF_ADD, BPF_SUB):
            slow = f"_parith({op}, {rd}, {b})"
        elif wide:
            slow = f"_nonint({rd} if type({rd}) is not int else r{s})" if reg else f"_nonint({rd})"
        else:
            slow = f"_nonint(None if ({rd} is None{f' or r{s} is None' if reg else ''}) else 1, '32-bit arithmetic on a pointer')"
        return [f"{rd} = ({expr}) if {guard} else {slow}"], reads, {d}, False

    # ---- jumps and calls ----
    def jump(self, i: int, x: Insn) -> tuple[list[str], set[int], set[int], bool]:
        t = self.targets.get(i, -2)
        if t < 0:
            return (
                [self._fault(f"jump out of the program or into an ld_imm64 at {i}")],
                set(),
                set(),
                True,
            )
        if x.op == BPF_JA:
            return ["@WB", f"return {t}"], set(), set(), True
        if x.op == BPF_JCOND:  # may_goto: a kernel-side loop budget the machine lacks
            msg = "may_goto is not modelled by the interpreter"
            return [f"raise NotModelled({msg!r})"], set(), set(), True
        if x.op not in _JCMP and x.op != BPF_JSET:
            return [self._fault(f"unknown jump operation {x.opcode:#04x}")], set(), set(), True
        d, s, wide = x.dst, x.src, x.cls == BPF_JMP
        reg = x.source == BPF_X
        mask = M64 if wide else M32
        signed = x.op in _SIGNED_J
        conv = ("s64" if wide else "s32") if signed else None
        a = f"r{d}" if wide else f"(r{d} & {M32})"
        if conv:
            a = f"{conv}(r{d})"
        if reg:
            b = f"r{s}" if wide else f"(r{s} & {M32})"
            if conv:
                b = f"{conv}(r{s})"
            guard = f"type(r{d}) is int and type(r{s}) is int"
            slow = f"_pcmp({x.op}, r{d}, r{s}, {wide})"
            if wide and x.op in _JCMP:  # packet bounds checks: two pointers into one region
                slow = (
                    f"(r{d}.off {_JCMP[x.op]} r{s}.off) if type(r{d}) is Ptr and "
                    f"type(r{s}) is Ptr and r{d}.region is r{s}.region else {slow}"
                )
        else:
            kv = x.imm & mask
            b = str((s64(kv) if wide else s32(kv)) if signed else kv)
            guard = f"type(r{d}) is int"
            slow = f"_pcmp({x.op}, r{d}, {b}, {wide})"
        cond = f"({a} & {b}) != 0" if x.op == BPF_JSET else f"{a} {_JCMP[x.op]} {b}"
        reads = {d, s} if reg else {d}
        return (
            [
                f"if ({cond}) if {guard} else {slow}:",
                "    @WB",
                f"    return {t}",
                "@WB",
                f"return {i + 1}",
            ],
            reads,
            set(),
            True,
        )

    def call(self, i: int, x: Insn) -> tuple[list[str], set[int], set[int], bool]:
        if x.is_pseudo_call:
            t = self.targets.get(i, -2)
            if t < 0:
                return [self._fault(f"call to a bad target from {i}")], set(), set(), True
            return ["@WB", f"return M._enter({i + 1}, {t})"], set(), set(), True
        if not x.is_helper_call:
            # a kfunc call: the program resolved its implementation (interp.kfuncs)
            impl = self.resolved.get(i)
            if not callable(impl):
                return (
                    [self._fault("call of a kernel function the interpreter does not model")],
                    set(),
                    set(),
                    False,
                )
        else:
            impl = self.impls.get(x.imm)
        if impl is None:
            impl = _unimplemented(x.imm)
        fn = self.const(impl)
        return (
            [
                f"r0 = {fn}(M, {', '.join(f'0 if r{a} is None else r{a}' for a in range(1, 6))})",
                "r0 = r0 if type(r0) is Ptr else int(r0) & 0xFFFFFFFFFFFFFFFF",
                "r1 = r2 = r3 = r4 = r5 = None",
            ],
            {1, 2, 3, 4, 5},
            {0, 1, 2, 3, 4, 5},
            False,
        )


def _unimplemented(helper_id: int) -> Callable[..., int]:
    """A stand-in for a helper the interpreter lacks: raises a Fault naming the helper
    (kernel enum bpf_func_id name) and any unmodelled map among its arguments."""

    name = kernel_helper_name(helper_id) or "unknown helper"
    if kernel_helper_name(helper_id) is None:  # kernel check_helper_call, on the path only
        refused = (
            "program of this type cannot use helper bpf_unspec#0"
            if helper_id == 0
            else f"invalid func unknown#{helper_id}"
        )

        def bad(M: Any, *args: object) -> int:
            raise Fault(refused)

        return bad

    def call(M: Any, *args: object) -> int:
        msg = f"helper {name} (#{helper_id}) is not implemented by the interpreter"
        for a in args:
            if isinstance(a, UnsupportedMap):
                msg += f", nor is its map '{a.name}' ({a.map_type.name})"
                break
        raise NotModelled(msg)

    return call


def _fell_off(R: list, M: Any) -> int:
    raise Fault("fell off the end of the program")


def _no_block(R: list, M: Any) -> int:
    raise AssertionError("jit: a jump to an instruction that starts no block")


def jit(insns: Sequence[Insn], resolved: dict[int, object], impls: dict) -> Jitted:
    """Compile ``insns`` into block functions (see :class:`Jitted`)."""
    return _Gen(insns, resolved, impls).build()
