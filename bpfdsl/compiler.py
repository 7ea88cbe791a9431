"""Compiler facade (back end): .bpfd source text -> eBPF ELF object.

The pipeline is a visible list of calls: parse (parser) -> build AST (build) -> check
(sema) -> LLVM IR (codegen, with debug info for BTF) -> optimize + emit (target).
``compile_source`` raises DiagnosticError for anything wrong with the program.
"""

from __future__ import annotations

import os

from .diagnostics import Diagnostic, DiagnosticError, UsageError, error
from .record import Record

EMIT_KINDS = ("obj", "llvm-ir", "asm")


class ProgramStats(Record):
    """Per program: ``insns`` (8-byte slots in its section) and ``stack`` bytes."""

    __slots__ = ("name", "section", "insns", "stack")

    def __init__(self, name: str, section: str, insns: int, stack: int) -> None:
        self.name, self.section, self.insns, self.stack = name, section, insns, stack


class CompileResult(Record):
    """``obj``: ELF bytes (EM_BPF, little-endian); ``llvm_ir``: the IR codegen produced
    (optimized IR when ``emit="llvm-ir"``); ``asm``: assembly text when ``emit="asm"``;
    ``programs``: program names in source order; ``stats``: filled on request;
    ``warnings``: checker findings the kernel accepts but bpfdsl considers bugs;
    ``timings``: wall-clock milliseconds per stage, in pipeline order: ``front`` (parse and
    sema), ``codegen`` (LLVM IR and its text), ``llvm`` (parse, O2, BPF code generation),
    ``check`` (the checker on the object; absent with ``check=False``), ``total``."""

    __slots__ = ("obj", "llvm_ir", "asm", "programs", "stats", "warnings", "timings")

    def __init__(
        self,
        obj: bytes,
        llvm_ir: str,
        asm: str | None,
        programs: list[str],
        stats: list[ProgramStats] | None = None,
        warnings: list[Diagnostic] | None = None,
    ) -> None:
        self.obj, self.llvm_ir, self.asm, self.programs = obj, llvm_ir, asm, programs
        self.stats = [] if stats is None else stats
        self.warnings = [] if warnings is None else warnings
        self.timings: dict[str, float] = {}


def front_end(text: str, filename: str = "<input>"):
    """Parse and check ``text``; returns sema.Checked.  Raises DiagnosticError."""
    from .build import parse_program
    from .sema import check

    return check(parse_program(text, filename), filename)


def compile_source(
    text: str,
    filename: str = "<input>",
    *,
    mcpu: str = "v3",
    emit: str = "obj",
    debug: bool = True,
    stats: bool = False,
    check: bool = True,
) -> CompileResult:
    """Compile bpfdsl ``text`` (named ``filename`` in diagnostics and line info).

    ``mcpu``: BPF ISA level v1..v4 (default v3: jmp32 + alu32, kernel >= 5.1).  ``emit``:
    ``obj`` | ``llvm-ir`` | ``asm`` (the object is always produced).  ``debug``: emit BTF
    and line info (needed by libbpf for ``.maps``).  ``check``: run bpfdsl.checker on the
    object (errors raise DiagnosticError at the .bpfd line from line info, so users see
    them before the kernel's; warnings land in ``CompileResult.warnings``).  Raises
    DiagnosticError (exit 1) for program errors, UsageError for bad arguments.
    """
    if text.startswith("\ufeff"):  # a UTF-8 byte-order mark some editors write
        text = text[1:]
    if emit not in EMIT_KINDS:
        raise UsageError(
            error("bad-emit", f"unknown --emit kind {emit!r}", hint="use obj, llvm-ir or asm")
        )
    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, DEPTH_LIMIT))
    try:
        return _compile(text, filename, mcpu, emit, debug, stats, check)
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


def _deepest(text: str, filename: str):
    """(span, depth) of where the AST of ``text`` first gets :data:`TOO_DEEP` levels deep on
    its deepest path (None, 0 if it cannot be told): the position for the ``too-deep``
    error.  Walks the tree with an explicit stack (the parser builds it without recursion)."""
    from . import ast
    from .build import parse_program

    try:
        prog = parse_program(text, filename)
    except (DiagnosticError, RecursionError):
        return None, 0
    best, stack = (0, None), [(prog, 0, None)]
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
    node = best[1]
    return (node.span if node is not None else None), best[0]


TOO_DEEP = 500  # nesting levels where the too-deep error points (the limit is higher)

# Python frames the front end and IR builder may use (each nesting level of an expression
# or block costs a few); Python 3.11 runs pure-Python calls without C stack, so this is safe.
DEPTH_LIMIT = 8000


def _compile(text, filename, mcpu, emit, debug, stats, check) -> CompileResult:
    from time import perf_counter

    from . import target
    from .codegen import generate

    t = [perf_counter()]
    checked = front_end(text, filename)
    t.append(perf_counter())
    dbg = None
    if debug:
        from .codegen_debug import DebugAdapter
        from .codegen_text import Module

        lines = {n: d.span.line for n, d in checked.map_decls.items()}
        module = Module(name=filename)
        dbg = DebugAdapter(module, filename, text, lines)
        module = generate(checked, dbg, module)
    else:
        module = generate(checked)
    name = filename.replace("\\", "\\5C").replace('"', "\\22")
    ir_text = f'source_filename = "{name}"\n' + str(module)  # ELF STT_FILE, like clang
    t.append(perf_counter())
    out = target.emit(ir_text, mcpu=mcpu, asm=emit == "asm", ir=emit == "llvm-ir")
    t.append(perf_counter())
    res = CompileResult(
        out.obj,
        out.ir if emit == "llvm-ir" else ir_text,
        out.asm,
        [d.name for d, _k in checked.progs],
    )
    res.warnings = list(checked.warnings)
    if check:
        res.warnings += check_compiled(out.obj, text)
        t.append(perf_counter())
    stages = ("front", "codegen", "llvm", "check")
    res.timings = {k: (b - a) * 1000 for k, a, b in zip(stages, t, t[1:], strict=False)}
    res.timings["total"] = (t[-1] - t[0]) * 1000
    if stats:
        res.stats = object_stats(out.obj, res.programs)
    return res


def check_compiled(obj: bytes, text: str) -> list[Diagnostic]:
    """Run the checker over a compiled object; raise DiagnosticError (source ``text``) for
    its errors, return its warnings as Diagnostics."""
    from .checker import check_object
    from .objfile import read_object

    res = check_object(read_object(obj))
    errs = [e.diagnostic(p.name) for p in res.programs for e in p.errors]
    if errs:
        raise DiagnosticError(errs, source=text)
    # sema warns about a redirect_map fallback of 0 where the source spells it as a number
    # (not where it says XDP_ABORTED): the checker sees only the value, so its copy goes
    return [
        w.diagnostic(p.name)
        for p in res.programs
        for w in p.warnings
        if w.code != "redirect-fallback-aborted"
    ]


def object_stats(obj: bytes, programs: list[str]) -> list[ProgramStats]:
    """Instruction count (decoded with bpfdsl.insn) and stack bytes per program function."""
    import io

    from elftools.elf.elffile import ELFFile

    from . import insn, target

    depths = target.stack_depths(obj)
    elf = ELFFile(io.BytesIO(obj))
    symtab = elf.get_section_by_name(".symtab")
    out = []
    for sym in symtab.iter_symbols():
        if sym["st_info"]["type"] != "STT_FUNC" or sym.name not in programs:
            continue
        sec = elf.get_section(sym["st_shndx"])
        data = sec.data()[sym["st_value"] : sym["st_value"] + (sym["st_size"] or sec["sh_size"])]
        n = sum(i.width for i in insn.decode(data))
        out.append(ProgramStats(sym.name, sec.name, n, depths.get(sym.name, 0)))
    out.sort(key=lambda s: programs.index(s.name))
    return out


def compile_file(path: str | os.PathLike, **kw) -> CompileResult:
    """Read ``path`` (UTF-8) and :func:`compile_source` it.  Raises UsageError if unreadable."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(error("unreadable-input", f"cannot read {path}: {e}")) from None
    return compile_source(text, str(path), **kw)
