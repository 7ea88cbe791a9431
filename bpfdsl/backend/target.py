"""Target: LLVM IR -> eBPF ELF object bytes through llvmlite's ``bpfel`` backend.

Stage: back end.  Takes an ``llvmlite.ir.Module`` (or its IR text), verifies it,
runs LLVM's O2 pipeline with a PassBuilder bound to the ``bpfel`` TargetMachine (so the BPF
IR passes BPFCheckAndAdjustIR / BPFAdjustOpt / BPFIRPeephole run, as under clang), and
emits an ELF relocatable object (EM_BPF, little-endian) or assembly text.

After emission the object's ``.BTF`` DATASEC records are fixed up the way libbpf does
before loading (``btf_fixup_datasec``): LLVM writes size 0 and offset 0; the object level's
:func:`bpfdsl.obj.elf.fixup_btf_datasecs` writes each DATASEC's size = its ELF section size
and each VAR's offset = its symbol value, sorted by offset (FIELD-BUGS B13), so loaders
that upload ``.BTF`` as-is (iproute2) accept it.

LLVM failures (invalid IR, verifier errors, codegen errors) raise
:class:`InternalCompilerError`: they are bugs of bpfdsl, not of the user's program.

LLVM's BPF backend reports some errors ("unsupported signed division", "too many
arguments", "A call to built-in function 'memcpy' is not supported", the 512-byte stack
limit) through LLVMContext's default diagnostic handler, which prints and calls exit(1):
the Python process would die.  llvmlite exposes no diagnostic handler, so :func:`check_ir`
finds those shapes in the optimized IR first and raises a :class:`DiagnosticError` naming
the source line; the stack limit is lifted in LLVM (``-bpf-stack-size``) and checked on
the emitted instructions instead (:func:`stack_depths`).  Operations LLVM would lower to
a library call (``__multi3``) are rewritten or refused by :mod:`bpfdsl.backend.libcalls`;
a jump past the 16-bit offset, which makes LLVM's assembler abort the process below
``-mcpu v4``, can only happen in a program that may be that long
(:func:`bpfdsl.backend.jumps.may_exceed`): its object is emitted in a forked child
(:func:`_emit_object_guarded`), and when the child dies its assembly is measured
(:func:`check_jumps`).  Every such path is a located DiagnosticError, never an exit.
"""

from __future__ import annotations

import os
import re
import resource
import selectors
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, TypeAlias

import llvmlite

from bpfdsl.abi.btf.core import BtfFormatError
from bpfdsl.abi.insn import InsnError, decode
from bpfdsl.abi.limits import BPF_COMPLEXITY_LIMIT_INSNS, MAX_BPF_STACK
from bpfdsl.abi.stack import frame_depth
from bpfdsl.backend import jumps, libcalls, llvm_c
from bpfdsl.diagnostics import DiagnosticError, Span, UsageError, error
from bpfdsl.obj.elf import ElfError, ElfFile, fixup_btf_datasecs

if TYPE_CHECKING:
    from llvmlite import binding as llvm
    from llvmlite import ir

    Module: TypeAlias = llvm.ModuleRef | llvm_c.Module
    TargetMachine: TypeAlias = llvm.TargetMachine | llvm_c.TargetMachine

TRIPLE = "bpfel"
DATA_LAYOUT = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"  # clang-19 -target bpf (LE)
MCPUS = ("v1", "v2", "v3", "v4", "generic", "probe")  # llc -march=bpf -mcpu=help
# the levels with ALU32 (LLVM's alu32 feature: v3 and v4); not "probe", whose level LLVM
# finds on the host at emission, after codegen chose widths (64 bits are right at any level)
ALU32_MCPUS = ("v3", "v4")
CGP_ADDRESS_USERS = 1 << 20  # users of one address CodeGenPrepare looks at (LLVM: 100)
MAX_INLINE_MEM = 1024  # bytes: largest constant memcpy/memset the BPF backend expands inline


@dataclass(frozen=True, slots=True)
class IsaExtension:
    """One instruction kind LLVM's BPF back end emits at ``-mcpu v4`` (BPFSubtarget.cpp
    ``initSubtargetFeatures``: each is on at v4 unless its ``cl::opt`` turns it off).

    ``option``: that cl::opt (``-disable-...``); ``desc``: its description as LLVM prints it
    (``llc -march=bpf --help-hidden``); ``llvm``: the first LLVM major that has it;
    ``kernel``: the first kernel whose verifier accepts it; ``emit``: whether bpfdsl lets LLVM
    emit it (the object reader, :func:`bpfdsl.abi.insn.decode`, and the checker handle it,
    and the kernels that ``-mcpu v4`` is documented for, >= 6.6, verify it)."""

    option: str
    desc: str
    llvm: int
    kernel: str
    emit: bool


# Every v4 extension of LLVM's BPF back end, from BPFSubtarget.cpp (LLVM 22).  One that bpfdsl
# does not emit is turned off for the whole process (:func:`_init`), so LLVM never writes it:
# ``gotox`` (BPF_JMP | BPF_JA | BPF_X, opcode 0x0d: an indirect jump through a jump table
# that LLVM makes of a ``switch`` with >= 13 cases, -bpf-min-jump-table-entries) needs an
# insn_array map (BPF_MAP_TYPE_INSN_ARRAY, kernel 6.19; 6.18's verifier refuses opcode 0x0d
# "unknown opcode 0d").  tests/backend/test_isa_extensions.py fails on a "Disable ... insn"
# option of the LLVM in use that is not in this table, so a new LLVM extension is decided here
# before bpfdsl compiles with it.
ISA_EXTENSIONS: tuple[IsaExtension, ...] = (
    IsaExtension("disable-ldsx", "Disable ldsx insns", 18, "6.6", True),
    IsaExtension("disable-movsx", "Disable movsx insns", 18, "6.6", True),
    IsaExtension("disable-bswap", "Disable bswap insns", 18, "6.6", True),
    IsaExtension("disable-sdiv-smod", "Disable sdiv/smod insns", 18, "6.6", True),
    IsaExtension("disable-gotol", "Disable gotol insn", 18, "6.6", True),
    IsaExtension("disable-storeimm", "Disable BPF_ST (immediate store) insn", 20, "3.18", True),
    IsaExtension(
        "disable-load-acq-store-rel",
        "Disable load-acquire and store-release insns",
        21,
        "6.15",
        True,
    ),  # fmt: skip
    IsaExtension("disable-gotox", "Disable gotox insn", 22, "6.19", False),
)

_machines: dict[tuple[bool, str], TargetMachine] = {}  # (lean binding?, mcpu) -> machine
_initialized = False  # targets initialised and cl::opt set in this process (one shared .so)


class InternalCompilerError(DiagnosticError):
    """LLVM refused IR that bpfdsl generated: a bpfdsl bug (exit code 1, with the LLVM text)."""

    def __init__(self, what: str, detail: str):
        super().__init__(
            error(
                "internal-compiler-error",
                f"internal compiler error: {what}",
                note=detail.strip()[:4000] or None,
                hint="this is a bug in bpfdsl, not in your program; please report it with the "
                "source file (`--emit llvm-ir` shows the generated IR)",
            )
        )


def _init(
    initialize: Callable[[], None], set_option: Callable[[str, str], None], llvm_major: int
) -> None:
    """Initialise all targets and asm printers, lift the BPF stack limit and turn off the v4
    extensions bpfdsl does not emit (:data:`ISA_EXTENSIONS`), once per process whichever
    binding does it: both open the same libllvmlite.so (one dlopen handle, one LLVM global
    state), and LLVM exits on a repeated ParseCommandLineOptions of an option, or on one it
    does not know (hence ``llvm_major``: an option is set only where LLVM has it)."""
    global _initialized
    if not _initialized:
        initialize()
        for ext in ISA_EXTENSIONS:
            if not ext.emit and llvm_major >= ext.llvm:
                set_option("bpfdsl", f"-{ext.option}")
        # A frame above 512 bytes would make LLVM exit(1); emit() reports it instead.
        set_option("bpfdsl", "-bpf-stack-size=1048576")
        # CodeGenPrepare sinks a ctx field's address (ctx + off) next to each load so that
        # it becomes the load's offset, but gives up on an address with more than 100 users
        # (CodeGenPrepare.cpp MaxAddressUsersToScan): then one register holds ctx + off and
        # the kernel refuses its loads ("dereference of modified ctx ptr"; found by fuzzing:
        # ~100 `parse` in a loop body, each reloading data_end).
        set_option("bpfdsl", f"-cgp-max-address-users-to-scan={CGP_ADDRESS_USERS}")
        _initialized = True


def _lean() -> llvm_c.Lib | None:
    """The lean binding (:mod:`bpfdsl.backend.llvm_c`), initialised; None means use :func:`_llvm`
    (other llvmlite version, or ``BPFDSL_LLVM=llvmlite``)."""
    lib = llvm_c.load()
    if lib is not None:
        _init(lib.initialize, lib.set_option, lib.llvm_version()[0])
    return lib


def _llvm() -> ModuleType:
    """The llvmlite binding (the module ``llvmlite.binding``) with the BPF target and asm
    printer initialised (once); imported here, when the lean binding is not used (the
    fallback), not at import of this module."""
    from llvmlite import binding as llvm

    def initialize() -> None:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()

    _init(initialize, llvm.set_option, llvm.llvm_version_info[0])
    return llvm


LEAN_BINDING = "lean ctypes (bpfdsl.backend.llvm_c)"
LLVMLITE_BINDING = "llvmlite.binding"


def binding() -> str:
    """The LLVM binding this process compiles with, as ``compile --time-report`` and ``-v``
    name it: :data:`LEAN_BINDING` or :data:`LLVMLITE_BINDING`, then the llvmlite version and,
    for the fallback, why the lean binding is not used (:func:`llvm_c.fallback_reason`)."""
    if _lean() is not None:
        return f"{LEAN_BINDING}, llvmlite {llvmlite.__version__}"
    why = llvm_c.fallback_reason()
    return f"{LLVMLITE_BINDING}, llvmlite {llvmlite.__version__}" + (f" ({why})" if why else "")


def target_machine(mcpu: str = "v3") -> TargetMachine:
    """The cached ``bpfel`` TargetMachine for ``mcpu`` (BPF ISA level v1..v4; v3 = jmp32 +
    alu32, kernel >= 5.1).  Raises :class:`UsageError` for an unknown level."""
    lib = _lean()
    tm = _machines.get((lib is not None, mcpu))
    if tm is None:
        if mcpu not in MCPUS:
            raise UsageError(
                error(
                    "bad-mcpu",
                    f"unknown BPF CPU level {mcpu!r}",
                    hint="use one of v1, v2, v3 (default), v4",
                )
            )
        if lib is not None:
            tm = lib.target_machine(TRIPLE, mcpu, 2)
        else:
            tm = _llvm().Target.from_triple(TRIPLE).create_target_machine(cpu=mcpu, opt=2)
        _machines[(lib is not None, mcpu)] = tm
    return tm


def parse(module_or_ir_text: ir.Module | str) -> Module:
    """Parse and verify IR into an LLVM module for ``bpfel`` (triple and layout forced)."""
    lib = _lean()
    text = module_or_ir_text if isinstance(module_or_ir_text, str) else str(module_or_ir_text)
    try:
        mod = lib.parse_assembly(text) if lib is not None else _llvm().parse_assembly(text)
    except RuntimeError as e:
        raise InternalCompilerError("LLVM could not parse the generated IR", str(e)) from None
    mod.triple = TRIPLE
    mod.data_layout = DATA_LAYOUT
    try:
        mod.verify()
    except RuntimeError as e:
        raise InternalCompilerError("generated IR is invalid", str(e)) from None
    return mod


def optimize(mod: Module, *, mcpu: str = "v3", opt: int = 2) -> Module:
    """Run LLVM's default per-module pipeline at ``-O{opt}`` in place (0 <= opt <= 3), with the
    BPF TargetMachine's IR passes registered; returns ``mod``."""
    if opt <= 0:
        return mod
    tm = target_machine(mcpu)
    lib = _lean()
    if lib is not None:
        lib.run_default_pipeline(mod, tm, min(opt, 3))
        return mod
    llvm = _llvm()
    pto = llvm.PipelineTuningOptions(speed_level=min(opt, 3))
    pb = llvm.PassBuilder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


@dataclass(frozen=True, slots=True)
class Emitted:
    """Result of :func:`emit`: ``obj`` ELF bytes, optional ``asm`` text and optimized ``ir``;
    ``binding``: the LLVM binding that made them (:func:`binding`); ``elf``: ``obj`` read
    (its one read: what the compiler's later steps take, ``obj.collection.read_elf``);
    ``depths``: stack bytes per function symbol (:func:`stack_depths`)."""

    obj: bytes
    asm: str | None = None
    ir: str | None = None
    binding: str = ""
    elf: ElfFile | None = None
    depths: dict[str, int] = field(default_factory=dict)


def emit(
    module_or_ir_text: ir.Module | str,
    *,
    mcpu: str = "v3",
    opt: int = 2,
    asm: bool = False,
    ir: bool = False,
) -> Emitted:
    """Parse, verify, optimize once; emit the object (and on request asm / optimized IR)."""
    tm = target_machine(mcpu)
    mod = optimize(parse(module_or_ir_text), mcpu=mcpu, opt=opt)
    text = str(mod)  # optimized IR: scanned by check_ir, returned when asked for
    lowered = libcalls.lower(text)  # 64-bit multiplies with overflow: no __multi3
    if lowered is not None:
        mod.close()
        mod, text = parse(lowered), lowered
    check_ir(text, mcpu)
    asm_text = None
    try:
        if mcpu not in jumps.LONG_JUMP_MCPUS and jumps.may_exceed(text):
            obj = _emit_object_guarded(tm, mod, text, mcpu)
        else:
            obj = tm.emit_object(mod)
        if asm and asm_text is None:
            asm_text = tm.emit_assembly(mod)
    except RuntimeError as e:
        raise InternalCompilerError("LLVM BPF code generation failed", str(e)) from None
    if not asm:
        asm_text = None
    try:
        elf = ElfFile(obj)  # the one read of the object: sizes, depths, BTF fix-up, spec
    except ElfError as e:
        raise InternalCompilerError("LLVM wrote an object bpfdsl cannot read", str(e)) from None
    check_sizes(text, elf)
    depths = stack_depths(elf)
    for func, depth in depths.items():
        if depth > MAX_BPF_STACK:
            raise _unsupported(
                text, None, "stack-limit",
                f"program '{func}' needs {depth} bytes of stack; the kernel allows {MAX_BPF_STACK}",
                _STACK_HINT,
                func=func,
            )  # fmt: skip
    try:
        obj = fixup_btf_datasecs(obj, elf)
        elf = elf.over(obj)  # .BTF rewritten in place: the same section table
    except (ElfError, BtfFormatError) as e:
        raise InternalCompilerError("LLVM wrote .BTF the loader cannot fix up", str(e)) from None
    return Emitted(obj, asm_text, text if ir else None, binding(), elf, depths)


# ---- program sizes: jump offsets and the kernel's instruction limit ---------------------

_SPLIT_HINT = (
    "keep long rule lists in a map (one `lookup`/`contains` of a hash or lpm_trie instead "
    "of one `if` per rule), or split the work over several programs"
)


def check_jumps(text: str, asm: str, mcpu: str) -> None:
    """Raise a located ``program-too-large`` error if a jump of the assembly ``asm`` does
    not fit the 16-bit offset of ``-mcpu`` v1..v3 (:mod:`bpfdsl.backend.jumps`): LLVM's
    assembler would abort the process on it."""
    for far in jumps.far_jumps(asm):
        raise _unsupported(
            text, None, "program-too-large",
            f"program '{far.func}' is {far.insns:,} BPF instructions long: a jump in it "
            f"spans {abs(far.distance):,} instructions, and a BPF jump reaches "
            f"{jumps.JMP_OFF_MAX:,} at --mcpu {mcpu} (16-bit offset)",
            f"{_SPLIT_HINT}; or compile with --mcpu v4 (32-bit jumps, kernel >= 6.6)",
            func=far.func,
        )  # fmt: skip


def _emit_object_guarded(tm: TargetMachine, mod: Module, text: str, mcpu: str) -> bytes:
    """``tm.emit_object(mod)`` in a forked child process, for a program that may be too long
    for 16-bit jumps: LLVM's assembler then aborts the process (``report_fatal_error``),
    which here ends the child only.  The child sends the object through a pipe (one
    emission: no cost but the fork); when it dies, the program's assembly (which LLVM
    prints without aborting) is measured and :func:`check_jumps` raises the located
    error, or InternalCompilerError carries what LLVM printed."""
    obj_r, obj_w = os.pipe()
    err_r, err_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: emit, write, _exit (no Python cleanup, no core file)
        code = 0
        try:
            os.close(obj_r)
            os.close(err_r)
            os.dup2(err_w, 2)
            resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
            view = memoryview(tm.emit_object(mod))
            while view:
                view = view[os.write(obj_w, view) :]
        except BaseException as e:  # the child reports any failure by its status
            os.write(2, str(e).encode("utf-8", "replace"))
            code = 70
        os._exit(code)
    os.close(obj_w)
    os.close(err_w)
    chunks: dict[int, list[bytes]] = {obj_r: [], err_r: []}
    with selectors.DefaultSelector() as sel:
        for fd in chunks:
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            for key, _ in sel.select():
                data = os.read(key.fd, 1 << 20)
                if data:
                    chunks[key.fd].append(data)
                else:
                    sel.unregister(key.fd)
                    os.close(key.fd)
    _, status = os.waitpid(pid, 0)
    if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
        return b"".join(chunks[obj_r])
    check_jumps(text, tm.emit_assembly(mod), mcpu)
    said = b"".join(chunks[err_r]).decode("utf-8", "replace")
    raise InternalCompilerError("LLVM BPF code generation failed", said or f"status {status}")


def check_sizes(text: str, elf: ElfFile) -> None:
    """Raise a located ``program-too-large`` error for a function of the object ``elf``
    above the kernel's 1,000,000 instructions (BPF_COMPLEXITY_LIMIT_INSNS; bpf_prog_load:
    E2BIG)."""
    sizes = {name: size // 8 for name, _sec, _start, size in elf.functions()}
    for func, n in jumps.over_kernel_limit(sizes):
        raise _unsupported(
            text, None, "program-too-large",
            f"program '{func}' is {n:,} BPF instructions long; the kernel loads at most "
            f"{BPF_COMPLEXITY_LIMIT_INSNS:,} (BPF_COMPLEXITY_LIMIT_INSNS)",
            _SPLIT_HINT, func=func,
        )  # fmt: skip


# ---- shapes the BPF backend would turn into exit(1) ---------------------------------------


def _unsupported(
    text: str, line: str | None, code: str, message: str, hint: str, func: str = ""
) -> DiagnosticError:
    """A DiagnosticError at the source position of the IR ``line`` (its ``!dbg``) or of
    ``func`` (its DISubprogram line), looked up in the module ``text``."""
    span = None
    fname = re.search(r'!DIFile\(filename: "([^"]*)"', text)
    if line is not None and (ref := re.search(r"!dbg (![0-9]+)", line)):
        loc = re.search(
            re.escape(ref.group(1)) + r" = !DILocation\(line: (\d+)(?:, column: (\d+))?", text
        )
        if loc and fname:
            span = Span(fname.group(1), int(loc.group(1)), int(loc.group(2) or 1))
    elif func:
        sp = re.search(r'!DISubprogram\(name: "' + re.escape(func) + r'".*?line: (\d+)', text)
        if sp and fname:
            span = Span(fname.group(1), int(sp.group(1)), 1)
    return DiagnosticError(error(code, message, span, hint=hint))


_CALL = r"\bcall\b.*?(@[\w.$\"]+|\))\((.*)\)"
_MEM = r"@llvm\.mem(?:cpy|move|set)\."
_ATOMIC = r"\b(?:atomicrmw \w+|cmpxchg)(?: volatile)? ptr [^,]+, i(?:8|16) "
# 32-bit atomic and/or/xor: the BPF back end lowers them only with ALU32 (v3 and later);
# below it LLVM aborts the process ("unsupported atomic operation, please use 64 bit
# version", BPFInstrInfo.td: ATOMIC_{AND,OR,XOR} W need HasALU32)
_ATOMIC32_LOGIC = r"\batomicrmw (?:and|or|xor)(?: volatile)? ptr [^,]+, i32 "


_WORDS = ("alloca", "div ", "rem ", "atomicrmw", "cmpxchg", "call ", "mul", "shl ", "shr ", ".fix.")
_DEFINE = r'define [^@]*(@[\w.$"]+)\('
_STACK_HINT = (
    "keep large structs and arrays in a map value instead of locals: declare "
    "`map scratch: percpu_array<u32, T>(max_entries: 1)` and use "
    "`let v = scratch.lookup(0) else { ... }` (one slot per CPU; it keeps the previous "
    "packet's values, so set the fields you read)"
)


def _in_entry_block(text: str, pos: int) -> bool:
    """Is the instruction line at ``pos`` of module ``text`` in its function's first block
    (no label line after the function's first instruction and before ``pos``)?"""
    start = text.rfind("\ndefine ", 0, pos)
    seen = False
    for line in text[start + 1 : pos].splitlines()[1:]:
        if line.startswith("  "):
            seen = True
        elif seen and line.split(";")[0].rstrip().endswith(":"):
            return False
    return True


def _args(text: str) -> list[str]:
    """Split an IR argument list at top-level commas."""
    out, depth, cur = [], 0, ""
    for ch in text:
        depth += (ch in "([{<") - (ch in ")]}>")
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return [*out, cur.strip()] if cur.strip() else out


def check_ir(mod: Module | str, mcpu: str = "v3") -> None:
    """Raise :class:`DiagnosticError` for IR the BPF backend cannot lower (see module doc):
    allocas outside the entry block, signed div/mod before v4, calls with more than 5
    arguments, non-constant or > 1024-byte memcpy/memset, 8/16-bit atomics (and 32-bit
    atomic and/or/xor before v3), calls to
    functions the object does not define (or to llvm.trap: ``__bpf_trap``).  Works on
    the module text."""
    text = mod if isinstance(mod, str) else str(mod)
    v4 = mcpu in jumps.LONG_JUMP_MCPUS  # "probe" is at most v3 (see jumps)
    defines, with_dbg = [], []  # the functions defined; those with a DISubprogram
    pos = text.find("\ndefine ")
    while pos >= 0:
        end = text.find("\n", pos + 1)
        line = text[pos + 1 : end if end >= 0 else len(text)]
        if m := re.match(_DEFINE, line):
            defines.append(m.group(1))
            if "!dbg !" in line:
                with_dbg.append(m.group(1))
        pos = text.find("\ndefine ", pos + 1)
    defined = set(defines)
    # kfuncs: declarations in .ksyms the loader resolves against the kernel's BTF (abi.kfuncs)
    for m in re.finditer(r'^declare [^\n]*?(@"?[\w.]+"?)\([^\n]*section "\.ksyms"', text, re.M):
        defined |= {m.group(1), m.group(1).replace('"', "")}
    if with_dbg and len(with_dbg) != len(defines):  # kernel: func_info count != subprogs
        missing = sorted(defined - set(with_dbg))
        raise InternalCompilerError(f"function {', '.join(missing)} has no "
                                    "debug info (DISubprogram)", "the kernel would refuse the "
                                    "object's func info")  # fmt: skip
    hits = []  # positions of the keywords
    for word in _WORDS:
        at = text.find(word)
        while at >= 0:
            hits.append(at)
            at = text.find(word, at + 1)
    last = -1
    for at in sorted(hits):  # most lines (loads, stores, branches...) are never looked at
        start = text.rfind("\n", 0, at) + 1
        if start <= last or not text.startswith("  ", start):  # seen / not an instruction
            continue
        end = text.find("\n", at)
        last = end = len(text) if end < 0 else end
        line = text[start:end]
        body = line.split(", !dbg")[0]
        if " = alloca " in body and not _in_entry_block(text, start):
            raise _unsupported(text, line, "internal-compiler-error",
                               "internal compiler error: dynamic stack allocation",
                               "this is a bpfdsl bug; please report it")  # fmt: skip
        if not v4 and ("div " in body or "rem " in body) and re.search(r"= s(?:div|rem) ", body):
            raise _unsupported(text, line, "signed-division",
                               "signed division or remainder needs BPF ISA v4 (kernel >= 6.6)",
                               "use unsigned operands, or compile with --mcpu v4")  # fmt: skip
        if what := libcalls.refusal(body):
            raise _unsupported(text, line, "unsupported-arithmetic",
                               f"LLVM made {what} of this expression, which the BPF back "
                               "end cannot compile (it has no runtime library)",
                               "split the expression into statements with `let`, or use "
                               "narrower operands")  # fmt: skip
        if ("atomicrmw" in body or "cmpxchg" in body) and re.search(_ATOMIC, body):
            raise _unsupported(text, line, "unsupported-atomic",
                               "atomic operations work on 32- or 64-bit values only",
                               "make the counter u32 or u64")  # fmt: skip
        if mcpu in ("v1", "v2") and "atomicrmw" in body and re.search(_ATOMIC32_LOGIC, body):
            raise _unsupported(text, line, "unsupported-atomic",
                               f"`|=`, `&=` and `^=` on a 32-bit map value field are atomic "
                               f"operations BPF has only from ISA v3 (this is --mcpu {mcpu})",
                               "compile with --mcpu v3 (the default) or later, or make the "
                               "field u64")  # fmt: skip
        call = re.search(_CALL, body) if "call " in body else None
        if call is None:
            continue
        callee = call.group(1)
        if (
            callee.startswith("@llvm.")
            and "trap" in callee
            or (
                callee.startswith("@") and not callee.startswith("@llvm.") and callee not in defined
            )
        ):
            raise _unsupported(text, line, "internal-compiler-error",
                               f"internal compiler error: call to {callee}, which no loader "
                               "can resolve", "this is a bpfdsl bug; please report it")  # fmt: skip
        mem = re.search(_MEM, body) if callee.startswith("@llvm.mem") else None
        if callee.startswith("@llvm.") and not mem:
            continue
        args = _args(call.group(2))
        if mem:
            size = re.fullmatch(r"i\d+ (?:noundef )?(\d+)", args[2]) if len(args) > 2 else None
            if size is None or int(size.group(1)) > MAX_INLINE_MEM:
                n = "a variable number of" if size is None else size.group(1)
                raise _unsupported(
                    text, line, "unsupported-copy",
                    f"copy or fill of {n} bytes (BPF inlines constant sizes up to "
                    f"{MAX_INLINE_MEM})", "copy in bounded pieces of constant size",
                )  # fmt: skip
        elif len(args) > 5:
            raise _unsupported(text, line, "too-many-arguments",
                               f"a BPF call takes at most 5 arguments, not {len(args)}",
                               "pass a pointer to a struct instead")  # fmt: skip


def stack_depths(obj: bytes | ElfFile) -> dict[str, int]:
    """Stack bytes used per function of an eBPF object (ELF bytes, or read: ElfFile),
    keyed by function symbol name: :func:`bpfdsl.abi.stack.frame_depth` of each (deepest
    r10-relative access, directly or through ``rX = r10; rX += -N``).  Raises
    InternalCompilerError for an object or instructions that cannot be read."""
    try:
        funcs = (obj if isinstance(obj, ElfFile) else ElfFile(obj)).functions()
        return {name: frame_depth(decode(sec.data()[start : start + size]))
                for name, sec, start, size in funcs}  # fmt: skip
    except (ElfError, InsnError) as e:
        raise InternalCompilerError("LLVM wrote an object bpfdsl cannot read", str(e)) from None


def emit_object(module_or_ir_text: ir.Module | str, mcpu: str = "v3", opt: int = 2) -> bytes:
    """ELF relocatable object bytes (EM_BPF, little-endian) with fixed-up ``.BTF``."""
    return emit(module_or_ir_text, mcpu=mcpu, opt=opt).obj


def emit_assembly(module_or_ir_text: ir.Module | str, mcpu: str = "v3", opt: int = 2) -> str:
    """BPF assembly text as ``llc -march=bpfel`` prints it."""
    return emit(module_or_ir_text, mcpu=mcpu, opt=opt, asm=True).asm or ""
