"""Program size limits LLVM's BPF back end and the kernel put on one program.

Stage: back end, used by :mod:`bpfdsl.backend.target` before and after emission.

A BPF jump's offset is the instruction's 16-bit signed ``off`` field (struct bpf_insn,
include/uapi/linux/bpf.h): a jump reaches at most 32,767 instructions forward and 32,768
back.  Below ``-mcpu v4`` LLVM has no longer jump: when a branch is further its assembler
calls ``report_fatal_error("Branch target out of insn range")`` while writing the object
(BPFAsmBackend::applyFixup), which aborts the process (SIGABRT; llvmlite installs no
handler that could return).  At v4 LLVM rewrites such branches to ``gotol`` (BPF_JMP32 |
BPF_JA, 32-bit ``imm`` offset; kernel >= 6.6), so nothing is checked there.

:func:`may_exceed` bounds each function's instruction count from its optimized IR
(measured: at most ~1.2 BPF instructions per IR instruction over progs/ and the fuzz
reproducers; the bound counts 2, more for calls, phis, memcpy/memset and switch cases);
only a module with a function that may reach :data:`JMP_OFF_MAX` instructions is emitted
in a child process (bpfdsl.backend.target._emit_object_guarded), and only when LLVM
aborts there is its assembly measured exactly by :func:`far_jumps`, so programs of
ordinary size pay nothing.

The kernel's own limits (kernel/bpf/syscall.c bpf_prog_load): at most
:data:`~bpfdsl.abi.limits.BPF_MAXINSNS` (4,096) instructions without CAP_BPF/CAP_SYS_ADMIN,
and up to :data:`~bpfdsl.abi.limits.BPF_COMPLEXITY_LIMIT_INSNS` (1,000,000) with them (XDP,
sk_msg and sock_ops programs need CAP_BPF and CAP_NET_ADMIN to load, so the larger limit
applies); :func:`over_kernel_limit` checks the latter on the emitted object.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bpfdsl.abi.limits import BPF_COMPLEXITY_LIMIT_INSNS

JMP_OFF_MAX = 32767  # instructions: largest forward jump (s16 ``off``)
JMP_OFF_MIN = -32768  # instructions: largest backward jump
INSNS_PER_IR = 2  # BPF instructions per plain IR instruction: a safe bound (see the doc)
# -mcpu levels with gotol (LLVM relaxes far branches) and the other v4 instructions.  Not
# "probe": LLVM's probe (sys::detail::getHostCPUNameForBPF) loads a jmp32 and a jmp-ext
# program and answers v3, v2 or v1, never v4.
LONG_JUMP_MCPUS = ("v4",)

_DEFINE = re.compile(r'define [^@]*@("[^"]+"|[-\w.$]+)\(')
_MEM = re.compile(r"@llvm\.mem(?:cpy|move|set)\.[^(]*\(.*?, i\d+ (?:noundef )?(\d+),")
# address arithmetic and casts: folded into a memory access or a register move at most
_CHEAP = re.compile(r"= (?:getelementptr|zext|sext|trunc|inttoptr|ptrtoint|bitcast|freeze) ")
_LABEL = re.compile(r"^([.\w$]+):")
_TYPE = re.compile(r"\.type\s+([.\w$]+),\s*@function")
_JUMP = re.compile(r"\bgotol? ([.\w$]+)\s*$")


def may_exceed(text: str, limit: int = JMP_OFF_MAX) -> list[str]:
    """Functions of the optimized module ``text`` whose BPF code may reach ``limit``
    instructions, in module order.  An upper bound per IR instruction: a call 2 + 2 per
    argument (argument moves, spills), a phi 1 per incoming value (a move in each
    predecessor), a memcpy/memset 2 per byte, a switch case 2, address arithmetic and
    casts 1, anything else :data:`INSNS_PER_IR`."""
    out, name, est = [], "", 0
    for line in text.split("\n"):
        if line.startswith("define "):
            m = _DEFINE.match(line)
            name, est = (m.group(1).strip('"') if m else "?"), 0
        elif line.startswith("}") and name:
            if est >= limit:
                out.append(name)
            name = ""
        elif name and line.startswith("  ") and not line.startswith("  #dbg"):
            if line.startswith("    i"):  # a case line of a switch
                est += 2
            elif "@llvm.lifetime." in line:  # no code
                continue
            elif " call " in line or line.startswith("  call "):
                m = _MEM.search(line) if "@llvm.mem" in line else None
                args = line.split(", !dbg")[0].rsplit("(", 1)[-1]
                est += 2 * int(m.group(1)) if m else 2 + 2 * (args.count(",") + 1)
            elif " = phi " in line:
                est += line.count("[")
            elif _CHEAP.search(line):
                est += 1
            else:
                est += INSNS_PER_IR
    return out


@dataclass(frozen=True, slots=True)
class FarJump:
    """A jump of function ``func`` (``insns`` instructions long) over ``distance``
    instructions (target index - index after the jump), outside the 16-bit offset."""

    func: str
    insns: int
    distance: int


def far_jumps(asm: str) -> list[FarJump]:
    """The jumps of BPF assembly ``asm`` (as LLVM prints it) whose offset does not fit in
    16 bits, one per function (the farthest).  Instructions are counted as the ELF holds
    them: one slot each, two for a 64-bit immediate load (``rX = ... ll``); labels,
    directives (``.``) and comments (``#``) take none."""
    # per section: label -> instruction index; jumps (func, index after, label)
    labels: dict[tuple[int, str], int] = {}
    jumps: list[tuple[int, str, int, str]] = []
    sizes: dict[str, int] = {}
    functions: set[str] = set()  # names declared `.type NAME,@function`
    sec, idx, func = 0, 0, ""
    for raw in asm.split("\n"):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith((".section", ".text")):
            sec, idx, func = sec + 1, 0, ""
            continue
        if m := _LABEL.match(line):
            labels[(sec, m.group(1))] = idx
            if m.group(1) in functions:
                func = m.group(1)
                sizes[func] = 0
            continue
        if line.startswith("."):
            if m := _TYPE.match(line):
                functions.add(m.group(1))
            continue
        n = 2 if line.endswith(" ll") else 1
        idx += n
        if func:
            sizes[func] = sizes.get(func, 0) + n
        if m := _JUMP.search(line):
            jumps.append((sec, func, idx, m.group(1)))
    worst: dict[str, int] = {}
    for s, fn, after, label in jumps:
        target = labels.get((s, label))
        if target is None:
            continue
        d = target - after
        if not JMP_OFF_MIN <= d <= JMP_OFF_MAX and abs(d) > abs(worst.get(fn, 0)):
            worst[fn] = d
    return [FarJump(fn, sizes.get(fn, 0), d) for fn, d in worst.items()]


def over_kernel_limit(sizes: dict[str, int]) -> list[tuple[str, int]]:
    """(function, instructions) of those above BPF_COMPLEXITY_LIMIT_INSNS (1,000,000): the
    kernel refuses such a program with E2BIG even for a privileged loader."""
    return [(f, n) for f, n in sizes.items() if n > BPF_COMPLEXITY_LIMIT_INSNS]
