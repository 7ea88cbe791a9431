"""Compiler facade (back end): .bpfd source text -> eBPF ELF object.

The pipeline is a visible list of calls: parse (parser) -> build AST (build) -> check
(sema) -> LLVM IR (codegen, with debug info for BTF) -> optimize + emit (target).
``compile_source`` raises DiagnosticError for anything wrong with the program.
"""

from __future__ import annotations

import gc
import os
import re
import stat
import sys
from dataclasses import dataclass, field
from time import perf_counter
from typing import TYPE_CHECKING, TypedDict

from llvmlite.ir import Module

from bpfdsl.abi import insn
from bpfdsl.backend import target
from bpfdsl.backend.codegen.debug import DebugAdapter
from bpfdsl.backend.codegen.generator import generate
from bpfdsl.backend.stackchain import check_call_chains
from bpfdsl.checker import CheckOptions, check_object
from bpfdsl.checker.report import TIMEOUT
from bpfdsl.diagnostics import (
    Diagnostic,
    DiagnosticError,
    Span,
    UsageError,
    error,
    universal_newlines,
)
from bpfdsl.lang import ast
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.sema import analyzer
from bpfdsl.obj.collection import read_elf
from bpfdsl.obj.elf import ElfFile
from bpfdsl.obj.spec import CollectionSpec

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing's from Python 3.11 (mypy: 3.10)

EMIT_KINDS = ("obj", "llvm-ir", "asm")
CHECK_TIMEOUT = 10.0  # seconds the checker may take inside compile (--check-timeout)


@dataclass(slots=True)
class ProgramStats:
    """Per program: ``insns`` (8-byte slots in its section) and ``stack`` bytes."""

    name: str
    section: str
    insns: int
    stack: int


@dataclass(slots=True)
class CompileResult:
    """``obj``: ELF bytes (EM_BPF, little-endian); ``llvm_ir``: the IR codegen produced
    (optimized IR when ``emit="llvm-ir"``); ``asm``: assembly text when ``emit="asm"``;
    ``programs``: program names in source order; ``stats``: filled on request;
    ``warnings``: checker findings the kernel accepts but bpfdsl considers bugs;
    ``timings``: wall-clock milliseconds per stage, in pipeline order: ``front`` (parse and
    sema), ``codegen`` (LLVM IR and its text), ``llvm`` (parse, O2, BPF code generation),
    ``check`` (the checker on the object; absent with ``check=False``), ``total``;
    ``llvm_binding``: which LLVM binding made the object (:func:`bpfdsl.backend.target.binding`:
    the lean ctypes one, or the llvmlite.binding fallback and why); ``spec``: the object as
    read for the checker (``bpfdsl.obj.collection.read_elf``; None with ``check=False``)."""

    obj: bytes
    llvm_ir: str
    asm: str | None
    programs: list[str]
    stats: list[ProgramStats] = field(default_factory=list)
    warnings: list[Diagnostic] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    llvm_binding: str = ""
    spec: CollectionSpec | None = None


def front_end(text: str, filename: str = "<input>") -> analyzer.Checked:
    """Parse and check ``text``; returns sema.Checked.  Raises DiagnosticError."""
    return analyzer.check(parse_program(text, filename), filename)


class CompileOptions(TypedDict, total=False):
    """The keyword arguments of :func:`compile_source` (``compile_file`` passes them on)."""

    mcpu: str
    emit: str
    debug: bool
    stats: bool
    check: bool
    check_timeout: float | None
    margin: float


def compile_source(
    text: str,
    filename: str = "<input>",
    *,
    mcpu: str = "v3",
    emit: str = "obj",
    debug: bool = True,
    stats: bool = False,
    check: bool = True,
    check_timeout: float | None = CHECK_TIMEOUT,
    margin: float = 0.0,
) -> CompileResult:
    """Compile bpfdsl ``text`` (named ``filename`` in diagnostics and line info).

    ``mcpu``: BPF ISA level v1..v4 (default v3: jmp32 + alu32, kernel >= 5.1).  ``emit``:
    ``obj`` | ``llvm-ir`` | ``asm`` (the object is always produced).  ``debug``: emit BTF
    and line info (needed by libbpf for ``.maps``).  ``check``: run bpfdsl.checker on the
    object (errors raise DiagnosticError at the .bpfd line from line info, so users see
    them before the kernel's; warnings land in ``CompileResult.warnings``).
    ``check_timeout``: seconds the checker may take (None: no limit); when it stops there
    the object is still produced, with a ``checker-check-timeout`` warning saying how far
    it got (the program was not fully checked).  ``margin``: percent of the kernel's
    1,000,000-insn complexity budget the checker keeps free (default 0: accept what the
    kernel accepts; ``bpfdsl check --margin``).  Raises DiagnosticError (exit 1) for
    program errors, UsageError for bad arguments.
    """
    if text.startswith("\ufeff"):  # a UTF-8 byte-order mark some editors write
        text = text[1:]
    text = universal_newlines(text)
    if bad := _SURROGATE.search(text):  # str from bytes decoded with surrogateescape
        raise _lone_surrogate(text, filename, bad.start())
    if emit not in EMIT_KINDS:
        raise UsageError(
            error("bad-emit", f"unknown --emit kind {emit!r}", hint="use obj, llvm-ir or asm")
        )
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEPTH_LIMIT))
    # no cyclic GC while compiling: the AST and llvmlite's IR objects are all alive until the
    # end, and each collection walks them all (quadratic in the program's size overall)
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _compile(text, filename, mcpu, emit, debug, stats, check, check_timeout, margin)
    except RecursionError:
        sys.setrecursionlimit(limit)
        span, depth = _deepest(text, filename)
        where = f" (its syntax tree is {depth} levels deep)" if depth else ""
        raise DiagnosticError(
            error(
                "too-deep",
                f"expressions or blocks are nested too deeply to compile{where}",
                span,
                hint="split long expressions into `let` steps and flatten nested `if`s "
                "(e.g. with `match` or early `return`)",
            ),
            source=text,
        ) from None
    finally:
        sys.setrecursionlimit(limit)
        if collecting:
            gc.enable()


def _deepest(text: str, filename: str) -> tuple[Span | None, int]:
    """(span, depth) of where the AST of ``text`` first gets :data:`TOO_DEEP` levels deep on
    its deepest path (None, 0 if it cannot be told): the position for the ``too-deep``
    error.  Walks the tree with an explicit stack (the parser builds it without recursion)."""
    try:
        prog = parse_program(text, filename)
    except (DiagnosticError, RecursionError):
        return None, 0
    best: tuple[int, ast.Node | None] = (0, None)
    stack: list[tuple[ast.Node, int, ast.Node | None]] = [(prog, 0, None)]
    while stack:
        node, depth, first_deep = stack.pop()
        if depth == TOO_DEEP:
            first_deep = node
        if depth > best[0]:
            best = (depth, first_deep)
        for v in vars(node).values():
            for c in v if isinstance(v, list) else (v,):
                if isinstance(c, ast.Node):
                    stack.append((c, depth + 1, first_deep))
    deep = best[1]
    return (deep.span if deep is not None else None), best[0]


TOO_DEEP = 500  # nesting levels where the too-deep error points (the limit is higher)

# Python frames the front end and IR builder may use (each nesting level of an expression
# or block costs a few); Python 3.11 runs pure-Python calls without C stack, so this is safe.
DEPTH_LIMIT = 8000


def _no_btf_run_config(checked: analyzer.Checked) -> None:
    """A run config lives in BTF (libxdp reads it there): without debug info it would be
    dropped, so it is an error at its first option."""
    decl = next(d for d, _k in checked.progs if d.name in checked.run_configs)
    name, span = next(iter(decl.run_config_spans.items()))
    raise DiagnosticError(
        error(
            "run-config",
            f"`{name}` of `{decl.name}` is written in BTF, and this compile makes none",
            span,
            hint="compile with debug info (the default: drop debug=False)",
        ),
        checked.program.source,
    )


def _compile(
    text: str,
    filename: str,
    mcpu: str,
    emit: str,
    debug: bool,
    stats: bool,
    check: bool,
    check_timeout: float | None,
    margin: float = 0.0,
) -> CompileResult:
    t = [perf_counter()]
    checked = front_end(text, filename)
    t.append(perf_counter())
    dbg = None
    if debug:
        lines = {n: d.span.line for n, d in checked.map_decls.items()}
        module = Module(name=filename)
        dbg = DebugAdapter(module, filename, text, lines)
        module = generate(checked, dbg, module, mcpu)
    else:
        if checked.run_configs:
            _no_btf_run_config(checked)
        module = generate(checked, mcpu=mcpu)
    name = filename.replace("\\", "\\5C").replace('"', "\\22")
    ir_text = f'source_filename = "{name}"\n' + str(module)  # ELF STT_FILE, like clang
    t.append(perf_counter())
    out = target.emit(ir_text, mcpu=mcpu, asm=emit == "asm", ir=emit == "llvm-ir")
    t.append(perf_counter())
    res = CompileResult(
        out.obj,
        out.ir if emit == "llvm-ir" and out.ir is not None else ir_text,
        out.asm,
        [d.name for d, _k in checked.progs],
    )
    res.llvm_binding = out.binding
    res.warnings = list(checked.warnings)
    check_call_chains(checked, out.depths)
    if check:
        assert out.elf is not None  # emit reads every object it writes
        res.spec = read_elf(out.elf, name=filename)
        res.warnings += check_compiled(res.spec, text, check_timeout, margin=margin)
        t.append(perf_counter())
    stages = ("front", "codegen", "llvm", "check")
    res.timings = {k: (b - a) * 1000 for k, a, b in zip(stages, t, t[1:], strict=False)}
    res.timings["total"] = (t[-1] - t[0]) * 1000
    if stats:
        assert out.elf is not None
        res.stats = object_stats(out.elf, out.depths, res.programs)
    return res


def check_compiled(
    spec: CollectionSpec, text: str, timeout: float | None = None, *, margin: float = 0.0
) -> list[Diagnostic]:
    """Run the checker over a compiled object read (at most ``timeout`` seconds, ``margin``
    percent of the complexity budget kept free: :class:`bpfdsl.checker.CheckOptions`); raise
    DiagnosticError (source ``text``) for its errors, return its warnings as Diagnostics
    (a program it did not finish in time is a warning: not checked, not accepted)."""
    res = check_object(spec, options=CheckOptions(timeout=timeout, margin=margin))
    errs, warns = [], []
    for p in res.programs:
        for e in p.errors:
            d = e.diagnostic(p.name)
            if e.code == TIMEOUT:
                d.severity = "warning"
                warns.append(d)
            else:
                errs.append(d)
    if errs:
        raise DiagnosticError(errs, source=text)
    # sema warns about a redirect_map fallback of 0 where the source spells it as a number
    # (not where it says XDP_ABORTED): the checker sees only the value, so its copy goes
    return warns + [
        w.diagnostic(p.name)
        for p in res.programs
        for w in p.warnings
        if w.code != "redirect-fallback-aborted"
    ]


def object_stats(elf: ElfFile, depths: dict[str, int], programs: list[str]) -> list[ProgramStats]:
    """Instruction count (8-byte slots: ld_imm64 counts 2, as the kernel's insn_cnt) and
    stack bytes (``depths``: target.stack_depths) per program function of the object
    ``elf``."""
    out = []
    for name, sec, _start, size in elf.functions():
        if name not in programs:
            continue
        out.append(ProgramStats(name, sec.name, size // insn.INSN_SIZE, depths.get(name, 0)))
    out.sort(key=lambda s: programs.index(s.name))
    return out


# The largest source file read (bytes): 2000 times the largest program in progs/ (2 KB); it
# bounds the memory and time a mistaken path (a log, an image) takes.
MAX_SOURCE_BYTES = 4 << 20


def read_source(path: str | os.PathLike) -> str:
    """The text of the source file ``path``: a regular file of at most MAX_SOURCE_BYTES
    bytes, UTF-8, with universal newlines.  Raises UsageError (exit 2) when it cannot be read, is not a regular file
    (a directory, device or pipe) or is larger; DiagnosticError (code ``bad-encoding``) at
    the line:col of the first byte that is not UTF-8."""

    name = str(path)
    try:  # O_NONBLOCK: opening a FIFO must not wait for a writer
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise UsageError(error("unreadable-input", f"cannot read {name}: {e.strerror}")) from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "not a regular file"
        raise UsageError(
            error("unreadable-input", f"cannot read {name}: {what}", hint="pass a .bpfd file")
        )
    with open(fd, "rb") as f:
        try:
            data = b"" if st.st_size > MAX_SOURCE_BYTES else f.read(MAX_SOURCE_BYTES + 1)
        except OSError as e:
            raise UsageError(
                error("unreadable-input", f"cannot read {name}: {e.strerror}")
            ) from None
    if len(data) > MAX_SOURCE_BYTES or st.st_size > MAX_SOURCE_BYTES:
        size = max(len(data), st.st_size)
        raise UsageError(
            error(
                "source-too-large",
                f"{name} has {size} bytes; a source file has at most {MAX_SOURCE_BYTES} "
                f"({MAX_SOURCE_BYTES >> 20} MiB)",
                hint="is this the right file? split a generated program into smaller parts",
            )
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad_encoding(data, name, e.start) from None
    return universal_newlines(text)


def _bad_encoding(data: bytes, name: str, pos: int) -> DiagnosticError:
    """The bad-encoding error at byte ``pos`` of ``data``: line and column (characters, as
    every other span) of that byte; the source shown with U+FFFD for undecodable bytes."""

    start = data.rfind(b"\n", 0, pos) + 1
    line = data.count(b"\n", 0, pos) + 1
    col = len(data[start:pos].decode("utf-8", "replace")) + 1
    d = error(
        "bad-encoding",
        f"byte 0x{data[pos]:02x} is not UTF-8 (source files are UTF-8 text)",
        Span(name, line, col),
        hint="save the file as UTF-8, or remove the byte",
    )
    return DiagnosticError(d, data.decode("utf-8", "replace"))


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(text: str, name: str, pos: int) -> DiagnosticError:
    """The bad-encoding error for a lone surrogate at ``pos`` of ``text`` (a ``str`` made
    from bytes that are not UTF-8 with ``errors="surrogateescape"``: U+DC80..U+DCFF stand
    for the bytes 0x80..0xff), at its line and column (characters)."""
    ch = ord(text[pos])
    what = f"byte 0x{ch - 0xDC00:02x}" if 0xDC80 <= ch <= 0xDCFF else f"U+{ch:04X}"
    d = error(
        "bad-encoding",
        f"{what} is not UTF-8 (source files are UTF-8 text)",
        Span(name, text.count("\n", 0, pos) + 1, pos - (text.rfind("\n", 0, pos) + 1) + 1),
        hint="save the file as UTF-8, or remove the byte",
    )
    return DiagnosticError(d, _SURROGATE.sub("\ufffd", text))


def compile_file(path: str | os.PathLike, **kw: Unpack[CompileOptions]) -> CompileResult:
    """Read ``path`` (:func:`read_source`) and :func:`compile_source` it.  Raises UsageError
    if it cannot be read, DiagnosticError for errors in it."""
    return compile_source(read_source(path), str(path), **kw)
