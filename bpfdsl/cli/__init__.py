"""Command line of bpfdsl: the parser built from the one COMMANDS table (cli.commands) and
the one place that renders errors.

Each command lives in a module of this package exposing ``register(sub)``, which adds its
argparse sub-parser(s) with ``set_defaults(func=cmd_x)``; ``cmd_x(args) -> int`` only
calls library functions and formats results.  Modules are imported only when their
command runs (start-up time counts: ``bpfdsl compile`` is timed against clang).

Exit codes (:data:`EXIT_CODES`, the same for every command; the README lists them): 0 ok,
1 refused (compile errors, a checker or kernel verifier rejection, an operation the system
state refuses), 2 unusable input or usage (bad arguments, missing or corrupt files), 3 the
host (missing privileges, no such interface, no bpffs).  With ``--json`` every error is one
JSON object on stdout (``{"error": [diagnostic, ...]}``), usage errors included, as
``bpftool --json`` prints its errors.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from types import ModuleType
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # pragma: no cover
    from collections.abc import Callable, Sequence

from bpfdsl.cli.commands import (  # noqa: F401  (re-exported: the CLI's public names)
    COMMANDS,
    EXIT_CODES,
    FAILED,
    HOST,
    NO_PERMISSION,
    OK,
    USAGE,
)


def _module(name: str) -> ModuleType:
    return importlib.import_module(f"bpfdsl.cli.{name}")


def _columns() -> int:
    """Terminal width for help text: $COLUMNS, the terminal's, else 80 (what
    shutil.get_terminal_size does, without importing shutil, bz2 and lzma on every run)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    out = sys.__stdout__  # None when Python runs without a standard output
    if out is None:
        return 80
    try:
        return os.get_terminal_size(out.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


def formatter(
    base: type[argparse.HelpFormatter] = argparse.HelpFormatter,
) -> Callable[..., argparse.HelpFormatter]:
    """``formatter_class`` for bpfdsl's parsers: ``base`` with the width from
    :func:`_columns` (argparse would otherwise import shutil to ask for it)."""

    def make(prog: str, **kw: Any) -> argparse.HelpFormatter:
        kw.setdefault("width", max(_columns() - 2, 20))
        return base(prog, **kw)

    return make


def compiled(ref: str | os.PathLike) -> bytes | None:
    """ELF bytes of ``ref`` when it names a ``.bpfd`` source file, compiled here (the
    compiler is imported only then); None for anything else."""
    ref = os.fspath(ref)
    if not (ref.endswith(".bpfd") and os.path.isfile(ref)):
        return None
    from bpfdsl.compiler import compile_file

    return compile_file(ref).obj


def object_bytes(ref: str | os.PathLike) -> bytes:
    """ELF bytes of the program file a command names: ``.bpfd`` source compiled
    (:func:`compiled`), an object file read as it is
    (:func:`bpfdsl.runtime.objfiles.object_bytes`: UsageError when missing)."""
    data = compiled(ref)
    if data is not None:
        return data
    from bpfdsl.runtime.objfiles import object_bytes as read_object_file

    return read_object_file(os.fspath(ref))


# Ranges of the C integer types of kernel ABI fields (include/uapi/linux/types.h widths).
C_INT_RANGES: dict[str, tuple[int, int]] = {
    "u8": (0, (1 << 8) - 1),
    "u16": (0, (1 << 16) - 1),
    "u32": (0, (1 << 32) - 1),
    "u64": (0, (1 << 64) - 1),
    "int": (-(1 << 31), (1 << 31) - 1),
}


def kernel_int(
    name: str,
    ctype: str = "u32",
    *,
    lo: int | None = None,
    hi: int | None = None,
    field: str = "",
    names: bool = False,
) -> Callable[[str], int | str]:
    """argparse ``type=`` for a CLI number the kernel takes as the C type ``ctype``
    (:data:`C_INT_RANGES`), optionally narrowed to ``lo..hi``: decimal or ``0x`` hex.

    Anything else, or a number outside the range, raises UsageError (``bad-args``, exit 2)
    saying the range, ``name`` (``KEY``, ``--qsize``) and ``field`` (the kernel field the
    number goes to, e.g. ``the cpumap key``).  With ``names`` a text that is not a number is returned as is (an interface
    name where an ifindex is also accepted).
    """
    tlo, thi = C_INT_RANGES[ctype]
    lo, hi = tlo if lo is None else max(lo, tlo), thi if hi is None else min(hi, thi)

    def parse(text: str) -> int | str:
        t = text.strip()
        body = t[1:] if t[:1] in "+-" else t
        if names and not body[:1].isdigit():
            return text
        try:
            v = int(t, 16) if body[:2].lower() == "0x" else int(t, 10)
        except ValueError:
            v = None
        if v is None or not lo <= v <= hi:
            from bpfdsl.diagnostics import UsageError, error

            got = f"{text!r} is not a number" if v is None else f"{v} is outside {lo}..{hi}"
            article = "an" if ctype == "int" else "a"
            of = f"{field} is {article} {ctype}: " if field else ""
            also = ", or an interface name" if names else ""
            raise UsageError(error("bad-args", f"{name} {got}", hint=f"{of}give {lo}..{hi}{also}"))
        return v

    parse.__name__ = ctype  # argparse names the type in its own messages
    return parse


_JSON_ERRORS = False  # set by main() when the command line asks for --json


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error under ``--json`` is a JSON error document like any other
    (a UsageError that main() renders) instead of argparse's text."""

    def error(self, message: str) -> NoReturn:
        if not _JSON_ERRORS:
            super().error(message)
        from bpfdsl.diagnostics import UsageError, error

        raise UsageError(error("usage", message, hint=f"see `{self.prog} --help`"))


class _SubParser(_Parser):
    """Sub-command parser that also takes the global ``--json``/``-v`` after the command
    (``bpfdsl show --json`` as well as ``bpfdsl --json show``); nested sub-parsers inherit it."""

    def __init__(self, *a: Any, **kw: Any) -> None:
        kw.setdefault("conflict_handler", "resolve")
        kw.setdefault("formatter_class", formatter())
        super().__init__(*a, **kw)
        self.add_argument(
            "-j",
            "--json",
            action="store_true",
            default=argparse.SUPPRESS,
            help="machine-readable output",
        )
        self.add_argument(
            "-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help="more detail"
        )


if TYPE_CHECKING:  # pragma: no cover
    # what a command module's ``register(sub)`` is given: build_parser's sub-command action
    Subcommands = argparse._SubParsersAction[_SubParser]


class _Version(argparse.Action):
    """``--version``: bpfdsl's version and which checker runs, and why (a stale compiled
    build falls back to Python, about 2x slower: bpfdsl.checker.native).  Decided only when
    asked: the checker is not imported for every command line."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        from importlib.util import find_spec

        from bpfdsl import __version__
        from bpfdsl.checker import native
        from bpfdsl.kernel import syscall
        from bpfdsl.runtime import pcapfile, xsk

        mode = "compiled by mypyc" if native.NATIVE else f"Python ({native.REASON})"
        # RecordBatch.array() needs numpy (optional); rows, JSON lines and Event objects not
        arrays = "numpy arrays" if find_spec("numpy") else "no numpy arrays (pip install numpy)"
        # run --pcap: the batch test-run loop and the capture walk, in C when built
        walk = "C" if pcapfile.PCAP_WALK_C else "Python"
        print(
            f"bpfdsl {__version__}\nchecker: {mode}\nevent batches: Python, {arrays}\n"
            f"test runs: {syscall.TESTRUN_LOOP}, capture walk: {walk}\n"
            f"AF_XDP l2fwd step: {'C' if xsk.L2FWD_C else 'Python'}"
        )
        parser.exit()


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser; ``only`` limits imports to the module of one command."""
    p = _Parser(
        prog="bpfdsl",
        formatter_class=formatter(),
        description="bpfdsl: write, compile, check, load and attach eBPF networking programs",
    )
    p.add_argument(
        "--version",
        action=_Version,
        nargs=0,
        help="show the version and which checker runs (compiled by mypyc or Python), exit",
    )
    p.add_argument("-j", "--json", action="store_true", help="machine-readable output")
    p.add_argument("-v", "--verbose", action="store_true", help="more detail")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", parser_class=_SubParser)
    done: set[str] = set()
    for cmd, (modname, _help) in COMMANDS.items():
        if only is not None and cmd != only:
            continue
        if modname in done:
            continue
        done.add(modname)
        _module(modname).register(sub)
    return p


def _render_error(err: BaseException, as_json: bool) -> None:
    import json

    from bpfdsl.diagnostics import DiagnosticError

    if isinstance(err, DiagnosticError):
        if as_json:  # on stdout, where a --json reader looks (bpftool's habit too)
            doc = {"error": [d.to_json() for d in err.diagnostics]}
            print(json.dumps(doc))
        else:
            print(err.render(), file=sys.stderr)
    else:
        # Not a DiagnosticError (an OSError the library did not expect): the same shapes.
        from bpfdsl.diagnostics import Diagnostic

        msg = str(err) or type(err).__name__
        if isinstance(err, OSError) and err.strerror and msg.startswith("[Errno"):
            # the OS's own error (mkdir on bpffs, open of a path): in words, not Python's
            # "[Errno 13] Permission denied: '/sys/fs/bpf/x'"
            where = f"{err.filename}: " if err.filename is not None else ""
            msg = f"{where}{err.strerror[:1].lower()}{err.strerror[1:]}"
        d = Diagnostic("error", "os-error", msg)
        if as_json:
            print(json.dumps({"error": [d.to_json()]}))
        else:
            print(d.render(), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see module docstring)."""
    global _JSON_ERRORS
    argv = list(sys.argv[1:] if argv is None else argv)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # a shell starts background jobs (`cmd &`) with SIGINT ignored, and Python then
        # installs no KeyboardInterrupt handler: `bpfdsl events ... &` would never stop
        # on SIGINT.  Every command stops on it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    _JSON_ERRORS = "--json" in argv or "-j" in argv
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    from bpfdsl.diagnostics import DiagnosticError

    try:
        args = parser.parse_args(argv)
    except DiagnosticError as e:  # a value refused by an argument type (kernel_int), usage
        _render_error(e, _JSON_ERRORS)
        return e.exit_code
    if not getattr(args, "func", None):
        parser.print_help()
        return USAGE

    try:
        return int(args.func(args) or 0)
    except DiagnosticError as e:
        _render_error(e, args.json)
        return e.exit_code
    except PermissionError as e:
        _render_error(e, args.json)
        return HOST
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bpfdsl ... | head`: the reader went away; not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # keeps interpreter exit quiet
        except OSError:
            pass
        return OK
    except (OSError, ValueError) as e:
        # Library code raises DiagnosticError for what it knows; this is the safety net
        # that keeps a traceback from a user.
        _render_error(e, args.json)
        return FAILED


def run() -> None:
    """Entry point of the ``bpfdsl`` command and ``python -m bpfdsl``: :func:`main`, then
    flush the standard streams and end the process with ``os._exit``.  Every command has
    closed its fds, links and namespaces by the time :func:`main` returns, so the
    interpreter's and LLVM's teardown is skipped.  Code that calls :func:`main` itself
    (tests, scripts) keeps the normal interpreter exit."""
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed pipe or stream: nothing left to say
            pass
    os._exit(rc)
