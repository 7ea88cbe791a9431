"""CLI: ``bpfdsl disasm FILE [--prog NAME]`` — instructions per program, source lines above
the instructions they produced (from .BTF.ext line info), maps named (≈ llvm-objdump -dS)."""

from __future__ import annotations

import json
import os
import sys
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import OK, command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse

    from bpfdsl.abi.btf.ext import LineInfo
    from bpfdsl.cli import Subcommands
    from bpfdsl.obj.spec import CollectionSpec, ProgramSpec


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "disasm",
        help=command_help("disasm"),
        description="Print each program's instructions in the kernel verifier's syntax, with "
        "the source line (from BTF line info) above the instructions it produced.  "
        "Subprograms appear after the program that calls them, as the kernel sees it.",
    )
    p.add_argument("file", metavar="FILE", help="FILE := OBJ.o | PROG.bpfd")
    p.add_argument(
        "--prog",
        "--program",
        metavar="NAME",
        dest="prog",
        help="only this program (PROG := NAME | SECTION)",
    )
    p.set_defaults(func=cmd_disasm)


def disasm_lines(spec: CollectionSpec, prog: ProgramSpec) -> list[str]:
    """Text lines for one ProgramSpec: headers, ``; source @ file:line``, ``slot: (op) insn``."""
    from bpfdsl.abi.insn import format_insn, slot_offsets

    names = {}
    for r in prog.relocations:
        x = prog.insns[r.insn_idx]
        names[id(x)] = f"map[{r.symbol}]" if r.kind == "map" else f"{r.symbol}+{r.offset}"
    lines_at: dict[int, LineInfo] = {}  # insn_off -> the first LineInfo there
    li: LineInfo | None
    for li in prog.line_info:
        lines_at.setdefault(li.insn_off, li)
    funcs = {f.insn_off: f.name for f in prog.func_info}
    kind = prog.kind.keyword or prog.kind.section if prog.kind else "unknown kind"
    out = [
        f"{prog.name}:  section {prog.section} ({kind}), {sum(x.width for x in prog.insns)} insns"
    ]
    last = None
    for slot, x in zip(slot_offsets(prog.insns), prog.insns, strict=True):
        if slot in funcs and slot:
            out.append(f"{funcs[slot]}:  (subprogram)")
        li = lines_at.get(slot)
        if li is not None and (li.file, li.line) != last:
            out.append(f"; {li.text.strip()}  @ {li.file.rsplit('/', 1)[-1]}:{li.line}")
            last = (li.file, li.line)
        out.append(f"{slot:5d}: {format_insn(x, symbol=lambda i: names.get(id(i)))}")
    return out


def cmd_disasm(args: argparse.Namespace) -> int:
    from bpfdsl.cli import object_bytes
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.obj import collection as objfile

    spec = objfile.read_object(object_bytes(args.file), name=args.file)
    progs = list(spec.programs.values())
    if args.prog:
        progs = [p for p in progs if args.prog in (p.name, p.section)]
        if not progs:
            raise UsageError(
                error(
                    "unknown-program",
                    f"{args.file}: no program or section {args.prog!r}",
                    hint="programs: "
                    + ", ".join(f"{p.name} ({p.section})" for p in spec.programs.values()),
                )
            )
    if args.json:
        print(json.dumps({p.name: disasm_lines(spec, p) for p in progs}, indent=1))
        return OK
    try:
        print("\n\n".join("\n".join(disasm_lines(spec, p)) for p in progs))
        sys.stdout.flush()
    except BrokenPipeError:  # `bpfdsl disasm X.o | head`: the reader left, not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return OK
