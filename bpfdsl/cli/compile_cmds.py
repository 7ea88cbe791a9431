"""CLI: ``bpfdsl compile FILE.bpfd -o FILE.o`` (front end + back end through bpfdsl.compiler).

Only calls :func:`bpfdsl.compiler.compile_file` and writes / prints what it returns.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import command_help

if TYPE_CHECKING:  # pragma: no cover
    import argparse
    from collections.abc import Callable

    from bpfdsl.cli import Subcommands

HELP = """\
Compile a .bpfd program to an eBPF ELF object (libbpf conventions: sections xdp,
xdp/cpumap, ...; BTF-defined maps in .maps; license; .rodata configs; .BTF/.BTF.ext
with line info naming the .bpfd source).

EMIT := obj | llvm-ir | asm
MCPU := v1 | v2 | v3 | v4   BPF ISA level.  Default v3 (adds jmp32 and 32-bit ALU
        subregisters; kernel >= 5.1, i.e. every kernel users run today).  v4 (sign
        extension, bswap, sdiv; kernel >= 6.6), v2 (kernel >= 4.14), v1 (oldest).
"""


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "compile",
        help=command_help("compile"),
        description=HELP,
        formatter_class=_raw(),
    )
    p.add_argument("file", metavar="FILE.bpfd", help="source file")
    p.add_argument(
        "-o",
        "--output",
        metavar="OUT",
        help="output path (default: FILE.o, FILE.ll or FILE.s by --emit; '-' = stdout for text)",
    )
    p.add_argument(
        "--emit",
        choices=("obj", "llvm-ir", "asm"),
        default="obj",
        help="what to write (default obj)",
    )
    p.add_argument(
        "--mcpu",
        choices=("v1", "v2", "v3", "v4"),
        default="v3",
        help="BPF ISA level (default v3: jmp32 + alu32, kernel >= 5.1)",
    )
    p.add_argument(
        "--stats",
        action="store_true",
        help="print per program its instruction count and stack bytes",
    )
    p.add_argument(
        "--no-check",
        action="store_true",
        help="skip the checker (bpfdsl check) that runs on the object by default",
    )
    p.add_argument(
        "--check-timeout",
        metavar="SECONDS",
        type=_seconds,
        default=_DEFAULT_TIMEOUT,
        help="time the checker may take (default %(default)g; 0 = no limit); a program it "
        "does not finish in time is compiled with a warning saying how far it got",
    )
    p.add_argument(
        "--margin",
        metavar="PCT",
        type=_margin,
        default=0.0,
        help="the checker keeps PCT %% of the kernel's complexity budget free (as "
        "`bpfdsl check --margin`; default 0)",
    )
    p.add_argument(
        "--time-report",
        action="store_true",
        help="print to stderr the wall-clock ms of each stage (front end, IR, LLVM, checker) "
        "and which LLVM binding ran; in a fresh process each stage's time includes importing "
        "its modules",
    )
    p.set_defaults(func=cmd_compile)


_DEFAULT_TIMEOUT = 10.0  # bpfdsl.compiler.CHECK_TIMEOUT (not imported: --help stays fast)


def _margin(text: str) -> float:
    """``--margin PCT`` (argparse type): as ``bpfdsl check --margin``."""
    from bpfdsl.cli.check_cmd import margin_pct

    return margin_pct(text)


def _seconds(text: str) -> float:
    """``--check-timeout SECONDS`` (argparse type): as ``bpfdsl check --timeout``."""
    from bpfdsl.cli.check_cmd import seconds

    return seconds(text)


def _raw() -> Callable[..., argparse.HelpFormatter]:
    import argparse

    from bpfdsl.cli import formatter

    return formatter(argparse.RawDescriptionHelpFormatter)


def cmd_compile(args: argparse.Namespace) -> int:
    from bpfdsl.compiler import compile_file, read_source

    stats = args.stats or getattr(args, "json", False)
    res = compile_file(
        args.file,
        mcpu=args.mcpu,
        emit=args.emit,
        stats=stats,
        check=not args.no_check,
        check_timeout=args.check_timeout or None,
        margin=args.margin,
    )
    as_json = getattr(args, "json", False)
    verbose = getattr(args, "verbose", False)
    if args.time_report and not as_json:
        report = "  ".join(f"{k} {v:.1f}" for k, v in res.timings.items())
        print(f"time (ms): {report}", file=sys.stderr)
    if (args.time_report or verbose) and not as_json:
        print(f"llvm binding: {res.llvm_binding}", file=sys.stderr)
    if res.warnings:
        src = read_source(args.file)
        for w in res.warnings:
            print(w.render(src), file=sys.stderr)
    ext = {"obj": ".o", "llvm-ir": ".ll", "asm": ".s"}[args.emit]
    out = args.output or os.path.splitext(args.file)[0] + ext
    if args.emit == "obj":
        data = res.obj
    else:
        data = (res.llvm_ir if args.emit == "llvm-ir" else res.asm or "").encode()
    if out == "-":
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    else:
        try:
            with open(out, "wb") as f:
                f.write(data)
        except OSError as e:
            from bpfdsl.diagnostics import UsageError, error

            raise UsageError(
                error(
                    "unwritable-output",
                    f"cannot write {out}: {e.strerror}",
                    hint="check the directory exists and is writable",
                )
            ) from None
    if getattr(args, "json", False):
        import json

        print(
            json.dumps(
                {
                    "output": out,
                    "programs": [
                        {"name": s.name, "section": s.section, "insns": s.insns, "stack": s.stack}
                        for s in res.stats
                    ],
                    **({"timings_ms": res.timings} if args.time_report else {}),
                    **({"llvm_binding": res.llvm_binding} if args.time_report or verbose else {}),
                }
            )
        )
    elif args.stats:
        print(f"{'program':<24} {'section':<14} {'insns':>6} {'stack':>6}")
        for s in res.stats:
            print(f"{s.name:<24} {s.section:<14} {s.insns:>6} {s.stack:>6}")
    return 0
