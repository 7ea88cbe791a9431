"""CLI: ``bpfdsl check FILE(.bpfd|.o) [--prog NAME] [--json] [-v] [--strict]``.

Static, verifier-like check of every program in an object (no privileges needed).
Exit 0: every program accepted; 1: a program is rejected (or, with --strict, has a
warning); 2: unusable input (missing file, corrupt ELF) or a program calls a kernel helper
the checker does not model ("CANNOT CHECK": no verdict, neither accepted nor rejected).  A ``.bpfd`` file is compiled
first (the compiler is imported here only; the checker never imports it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING

from bpfdsl.cli.commands import FAILED, OK, USAGE, command_help

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.cli import Subcommands
    from bpfdsl.obj.spec import CollectionSpec


def register(sub: Subcommands) -> None:
    p = sub.add_parser(
        "check",
        help=command_help("check"),
        description="Check each program as the kernel verifier would (types, packet bounds, "
        "NULL checks, stack, helper arguments, loops) and explain rejections with the source "
        "line.  Exit 0 accepted, 1 rejected, 2 unusable input.",
    )
    p.add_argument("file", metavar="FILE", help="FILE := OBJ.o | PROG.bpfd")
    p.add_argument(
        "--prog", "--program", dest="prog", metavar="NAME", help="PROG := NAME | SECTION"
    )
    p.add_argument("-j", "--json", action="store_true", default=argparse.SUPPRESS)
    p.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS)
    p.add_argument(
        "--strict",
        action="store_true",
        help="treat warnings (bad verdict values, pointer ALU32, uninitialized stack reads "
        "the kernel tolerates for root) as errors",
    )
    p.add_argument(
        "--unprivileged",
        action="store_true",
        help="apply the rules for a loader without CAP_PERFMON (no pointer leaks, no "
        "uninitialized stack reads)",
    )
    p.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=seconds,
        help="stop checking after this long: the program is then CANNOT CHECK (exit 2), "
        "never OK (default: no limit)",
    )
    p.add_argument(
        "--margin",
        metavar="PCT",
        type=margin_pct,
        default=0.0,
        help="keep PCT %% of the kernel's 1,000,000-insn complexity budget free: a program "
        "whose walk goes over 100 - PCT %% is refused (complexity-limit), for head-room on "
        "other kernels (default 0: accept what this kernel accepts)",
    )
    p.add_argument(
        "--kernel",
        metavar="X.Y",
        help="target an older kernel: features it lacks (jmp32, loops, xskmap lookups, "
        "atomics, cpu v4 instructions, newer helpers) become errors",
    )
    p.set_defaults(func=cmd_check)


def seconds(text: str) -> float:
    """``--timeout SECONDS`` (argparse type): a number 0 or more (0 for a compile: no
    limit); a negative number or nan is refused."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not v >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more seconds: {text!r}")
    return v


def margin_pct(text: str) -> float:
    """``--margin PCT``: a number 0 <= PCT < 100 (argparse type)."""
    import argparse

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= v < 100.0:
        raise argparse.ArgumentTypeError(f"{text} is not a percentage in 0..100")
    return v


def read_input(path: str) -> CollectionSpec:
    """``path`` -> objfile CollectionSpec; .bpfd files are compiled first.

    Raises UsageError for unreadable/corrupt input, DiagnosticError for compile errors.
    """
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.obj import collection as objfile

    p = Path(path)
    if not p.exists():
        raise UsageError(error("no-such-file", f"{path}: no such file"))
    if not p.is_file():
        raise UsageError(error("unreadable-input", f"cannot read {path}: not a regular file"))
    if p.suffix == ".bpfd":
        from bpfdsl.compiler import compile_file

        # the checker runs below, with this command's options (not inside compile too)
        return objfile.read_object(compile_file(p, debug=True, check=False).obj)
    try:
        return objfile.read_object(p)
    except UsageError:
        raise
    except Exception as e:  # objfile raises UsageError; anything else is still bad input
        raise UsageError(
            error("bad-object", f"{path}: not a usable eBPF object ({type(e).__name__}: {e})")
        ) from None


def cmd_check(args: argparse.Namespace) -> int:
    from bpfdsl.checker import CheckOptions, check_object
    from bpfdsl.checker.features import parse_version
    from bpfdsl.diagnostics import UsageError, error
    from bpfdsl.runtime.kfuncs import needs_dev_bound

    kernel = None
    if args.kernel:
        try:
            kernel = parse_version(args.kernel)
        except ValueError as e:
            raise UsageError(error("bad-kernel-version", str(e))) from None
    spec = read_input(args.file)
    options = CheckOptions(
        privileged=not args.unprivileged,
        strict=args.strict,
        kernel=kernel,
        timeout=args.timeout if args.timeout and args.timeout > 0 else None,
        margin=args.margin,
    )
    res = check_object(spec, only=args.prog, options=options)
    if args.prog and not res.programs:
        names = ", ".join(spec.programs) or "none"
        raise UsageError(
            error("no-such-program", f"{args.file}: no program '{args.prog}' (programs: {names})")
        )
    code = OK if res.ok else (FAILED if res.rejected else USAGE)
    if getattr(args, "json", False):
        print(json.dumps(res.to_json(), indent=2))
        return code
    verbose = getattr(args, "verbose", False)
    for p in res.programs:
        status = {"ok": "OK", "rejected": "REJECTED", "unchecked": "CANNOT CHECK"}[p.status]
        print(
            f"{args.file}: prog '{p.name}' ({p.section}): {status} "
            f"({p.insn_count} insns, {p.limit_text()}, {p.seconds * 1000:.1f} ms)"
        )
        for d in p.errors + p.warnings:
            print(d.render(p.name, verbose))
        bound = needs_dev_bound(spec.programs[p.name]) if p.name in spec.programs else []
        if bound:
            print(
                f"  note: '{p.name}' calls {', '.join(bound)}: it is loaded device-bound, "
                f"for one interface: `bpfdsl attach {args.file} --dev IFACE` or "
                f"`bpfdsl load {args.file} --dev IFACE`"
            )
    return code
