"""Command line of bpfdsl: the one COMMANDS table and the one place that renders errors.

Each command lives in a module of this package exposing ``register(sub)``, which adds its
argparse sub-parser(s) with ``set_defaults(func=cmd_x)``; ``cmd_x(args) -> int`` only
calls library functions and formats results.  Modules are imported only when their
command runs (start-up time counts: ``bpfdsl compile`` is timed against clang).

Exit codes: 0 ok, 1 failed (diagnostics, verifier rejection), 2 unusable input or usage,
3 missing privileges (EPERM/EACCES from bpf(2)).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

OK, FAILED, USAGE, NO_PERMISSION = 0, 1, 2, 3

# command -> (module under bpfdsl.cli, one-line help).  Several commands may share a module.
COMMANDS: dict[str, tuple[str, str]] = {
    "compile": ("compile_cmds", "compile a .bpfd program to an eBPF ELF object"),
    "disasm": ("disasm_cmd", "disassemble an object per section, with source lines"),
    "check": ("check_cmd", "static verifier-like check of a .bpfd or .o (no privileges)"),
    "load": ("load_cmds", "load an object into the kernel and pin it (≈ bpftool prog loadall)"),
    "unload": ("load_cmds", "remove everything pinned under a pin directory"),
    "attach": ("attach_cmds", "attach an XDP program to an interface"),
    "detach": ("attach_cmds", "detach XDP from an interface"),
    "show": ("attach_cmds", "list what bpfdsl has loaded, pinned and attached"),
    "map": ("map_cmds", "dump, lookup, update, delete map entries (BTF-typed)"),
    "run": ("run_cmds", "run a program on packets (BPF_PROG_TEST_RUN or the interpreter)"),
    "demo": ("run_cmds", "the main job end to end on a veth pair in a temporary namespace"),
    "cpumap": ("redirect_cmds", "set, delete, show cpumap entries (CPU, qsize, on-CPU program)"),
    "devmap": ("redirect_cmds", "set, delete, show devmap entries (egress interface, program)"),
    "sockmap": ("redirect_cmds", "attach/detach an sk_msg program to a sockmap/sockhash"),
    "skmsg": ("redirect_cmds", "alias of sockmap"),
    "sockops": ("redirect_cmds", "attach/detach a sock_ops program to a cgroup v2"),
    "progarray": ("progarray_cmd", "set, delete, show prog_array slots (tail call targets)"),
}


def _module(name: str):
    return importlib.import_module(f"bpfdsl.cli.{name}")


def _columns() -> int:
    """Terminal width for help text: $COLUMNS, the terminal's, else 80 (what
    shutil.get_terminal_size does, without importing shutil, bz2 and lzma on every run)."""
    try:
        return int(os.environ["COLUMNS"])
    except (KeyError, ValueError):
        pass
    try:
        return os.get_terminal_size(sys.__stdout__.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return 80


def formatter(base: type[argparse.HelpFormatter] = argparse.HelpFormatter):
    """``formatter_class`` for bpfdsl's parsers: ``base`` with the width from
    :func:`_columns` (argparse would otherwise import shutil to ask for it)."""

    def make(prog: str, **kw) -> argparse.HelpFormatter:
        kw.setdefault("width", max(_columns() - 2, 20))
        return base(prog, **kw)

    return make


def compiled(ref: str | os.PathLike) -> bytes | None:
    """ELF bytes of ``ref`` when it names a ``.bpfd`` source file, compiled here (the
    compiler is imported only then); None for anything else."""
    ref = os.fspath(ref)
    if not (ref.endswith(".bpfd") and os.path.isfile(ref)):
        return None
    from bpfdsl.compiler import compile_file  # noqa: PLC0415

    return compile_file(ref).obj


def object_bytes(ref: str | os.PathLike) -> bytes:
    """ELF bytes of the program file a command names: ``.bpfd`` source compiled
    (:func:`compiled`), an object file read as it is
    (:func:`bpfdsl.runtime.inventory.object_bytes`: UsageError when missing)."""
    data = compiled(ref)
    if data is not None:
        return data
    from bpfdsl.runtime.inventory import object_bytes as read_object_file  # noqa: PLC0415

    return read_object_file(os.fspath(ref))


class _SubParser(argparse.ArgumentParser):
    """Sub-command parser that also takes the global ``--json``/``-v`` after the command
    (``bpfdsl show --json`` as well as ``bpfdsl --json show``); nested sub-parsers inherit it."""

    def __init__(self, *a, **kw):
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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argparse parser; ``only`` limits imports to the module of one command."""
    from bpfdsl import __version__

    p = argparse.ArgumentParser(
        prog="bpfdsl",
        formatter_class=formatter(),
        description="bpfdsl: write, compile, check, load and attach eBPF networking programs",
    )
    p.add_argument("--version", action="version", version=f"bpfdsl {__version__}")
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
        if as_json:
            doc = {"error": [d.to_json() for d in err.diagnostics]}
            print(json.dumps(doc), file=sys.stderr)
        else:
            print(err.render(), file=sys.stderr)
    else:
        # Not a DiagnosticError (an OSError the library did not expect): the same shapes.
        from bpfdsl.diagnostics import Diagnostic

        d = Diagnostic("error", "os-error", str(err) or type(err).__name__)
        doc = {"error": [d.to_json()]}
        print(json.dumps(doc) if as_json else d.render(), file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; returns the exit code (see module docstring)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(first if first in COMMANDS else None)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return USAGE
    from bpfdsl.diagnostics import DiagnosticError

    try:
        return int(args.func(args) or 0)
    except DiagnosticError as e:
        _render_error(e, args.json)
        return e.exit_code
    except PermissionError as e:
        _render_error(e, args.json)
        return NO_PERMISSION
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `bpfdsl ... | head`: the reader went away; not an error of ours.
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - keeps interpreter exit quiet
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
    closed its fds, links and namespaces by the time :func:`main` returns; skipping the
    interpreter's and LLVM's teardown saves 20-30 ms per command (measured: ``bpfdsl
    compile`` of xdp_pass 186 -> 153 ms).  Code that calls :func:`main` itself (tests,
    scripts) keeps the normal interpreter exit."""
    rc = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed pipe or stream: nothing left to say
            pass
    os._exit(rc)
