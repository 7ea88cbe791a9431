"""Target: LLVM IR -> eBPF ELF object bytes through llvmlite's ``bpfel`` backend.

Stage: back end (layer 4).  Takes an ``llvmlite.ir.Module`` (or its IR text), verifies it,
runs LLVM's O2 pipeline with a PassBuilder bound to the ``bpfel`` TargetMachine (so the BPF
IR passes BPFCheckAndAdjustIR / BPFAdjustOpt / BPFIRPeephole run, as under clang), and
emits an ELF relocatable object (EM_BPF, little-endian) or assembly text.

After emission the object's ``.BTF`` DATASEC records are fixed up the way libbpf does
before loading (``btf_fixup_datasec``): LLVM writes size 0 and offset 0; we write each
DATASEC's size = its ELF section size and each VAR's offset = its symbol value, sorted by
offset (FIELD-BUGS B13), so loaders that upload ``.BTF`` as-is (iproute2) accept it.

LLVM failures (invalid IR, verifier errors, codegen errors) raise
:class:`InternalCompilerError`: they are bugs of bpfdsl, not of the user's program.

LLVM's BPF backend reports some errors ("unsupported signed division", "too many
arguments", "A call to built-in function 'memcpy' is not supported", the 512-byte stack
limit) through LLVMContext's default diagnostic handler, which prints and calls exit(1):
the Python process would die.  llvmlite exposes no diagnostic handler, so :func:`check_ir`
finds those shapes in the optimized IR first and raises a :class:`DiagnosticError` naming
the source line; the stack limit is lifted in LLVM (``-bpf-stack-size``) and checked on
the emitted instructions instead (:func:`stack_depths`).
"""

from __future__ import annotations

import re
import struct

from bpfdsl.backend import llvm_c
from bpfdsl.diagnostics import DiagnosticError, Span, UsageError, error
from bpfdsl.record import FrozenRecord

TYPE_CHECKING = False  # (typing costs import time on the compile path)

if TYPE_CHECKING:  # LLVM is loaded lazily: `bpfdsl --help` must start fast
    from llvmlite import binding as llvm
    from llvmlite import ir

    from bpfdsl.backend import llvm_c

    Module = llvm.ModuleRef | llvm_c.Module
    TargetMachine = llvm.TargetMachine | llvm_c.TargetMachine

TRIPLE = "bpfel"
DATA_LAYOUT = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"  # clang-19 -target bpf (LE)
MCPUS = ("v1", "v2", "v3", "v4", "generic", "probe")  # llc -march=bpf -mcpu=help
MAX_STACK = 512  # bytes per BPF program frame (kernel MAX_BPF_STACK)
MAX_INLINE_MEM = 1024  # bytes: largest constant memcpy/memset the BPF backend expands inline

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


def _init(initialize, set_option) -> None:  # noqa: ANN001
    """Initialise all targets and asm printers and lift the BPF stack limit, once per process
    whichever binding does it: both open the same libllvmlite.so (one dlopen handle, one
    LLVM global state), and LLVM exits on a repeated ParseCommandLineOptions of an option."""
    global _initialized
    if not _initialized:
        initialize()
        # A frame above 512 bytes would make LLVM exit(1); stack_depths() reports it instead.
        set_option("bpfdsl", "-bpf-stack-size=1048576")
        _initialized = True


def _lean() -> llvm_c.Lib | None:
    """The lean binding (:mod:`bpfdsl.backend.llvm_c`), initialised; None means use :func:`_llvm`
    (other llvmlite version, or ``BPFDSL_LLVM=llvmlite``)."""
    lib = llvm_c.load()
    if lib is not None:
        _init(lib.initialize, lib.set_option)
    return lib


def _llvm():
    """The llvmlite binding with the BPF target and asm printer initialised (once)."""
    from llvmlite import binding as llvm  # noqa: PLC0415

    def initialize() -> None:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()

    _init(initialize, llvm.set_option)
    return llvm


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


class Emitted(FrozenRecord):
    """Result of :func:`emit`: ``obj`` ELF bytes, optional ``asm`` text and optimized ``ir``."""

    __slots__ = ("obj", "asm", "ir")

    def __init__(self, obj: bytes, asm: str | None = None, ir: str | None = None) -> None:
        self.obj, self.asm, self.ir = obj, asm, ir


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
    check_ir(text, mcpu)
    try:
        obj = tm.emit_object(mod)
        asm_text = tm.emit_assembly(mod) if asm else None
    except RuntimeError as e:
        raise InternalCompilerError("LLVM BPF code generation failed", str(e)) from None
    for func, depth in stack_depths(obj).items():
        if depth > MAX_STACK:
            raise _unsupported(
                text, None, "stack-limit",
                f"program '{func}' needs {depth} bytes of stack; the kernel allows {MAX_STACK}",
                _STACK_HINT,
                func=func,
            )  # fmt: skip
    return Emitted(fixup_btf_datasecs(obj), asm_text, text if ir else None)


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


# patterns as strings: re compiles (and caches) each on its first use, not at import
_CALL = r"\bcall\b.*?(@[\w.$\"]+|\))\((.*)\)"
_MEM = r"@llvm\.mem(?:cpy|move|set)\."
_ATOMIC = r"\b(?:atomicrmw \w+|cmpxchg)(?: volatile)? ptr [^,]+, i(?:8|16) "


_WORDS = ("alloca", "div ", "rem ", "atomicrmw", "cmpxchg", "call ")
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
    arguments, non-constant or > 1024-byte memcpy/memset, 8/16-bit atomics, calls to
    functions the object does not define (or to llvm.trap: ``__bpf_trap``).  Works on
    the module text (printing it costs far less than walking it through llvmlite)."""
    text = mod if isinstance(mod, str) else str(mod)
    v4 = mcpu in ("v4", "probe")
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
    if with_dbg and len(with_dbg) != len(defines):  # kernel: func_info count != subprogs
        missing = sorted(defined - set(with_dbg))
        raise InternalCompilerError(f"function {', '.join(missing)} has no "
                                    "debug info (DISubprogram)", "the kernel would refuse the "
                                    "object's func info")  # fmt: skip
    hits = []  # positions of the keywords (str.find is far faster than a regex here)
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
        if ("atomicrmw" in body or "cmpxchg" in body) and re.search(_ATOMIC, body):
            raise _unsupported(text, line, "unsupported-atomic",
                               "atomic operations work on 32- or 64-bit values only",
                               "make the counter u32 or u64")  # fmt: skip
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


def stack_depths(obj: bytes) -> dict[str, int]:
    """Stack bytes used per function of an eBPF object (deepest r10-relative access,
    directly or through ``rX = r10; rX += -N``), keyed by function symbol name."""
    secs, _ = _elf_sections(obj)
    out: dict[str, int] = {}
    for fname, shndx, start, fsize, kind in _elf_symbols(obj, secs):
        if kind != 2 or not 0 < shndx < len(secs):  # STT_FUNC, defined here
            continue
        _name, _typ, off, size, _link, flags = secs[shndx]
        if not flags & 0x4:  # SHF_EXECINSTR
            continue
        off += start
        size = fsize or size - start
        depth, fp = 0, {}  # fp: register -> its offset from r10 (a frame pointer copy)
        pos = off
        while pos + 8 <= off + size:
            code, regs, disp, imm = struct.unpack_from("<BBhi", obj, pos)
            dst, src, cls = regs & 0xF, regs >> 4, code & 7
            pos += 16 if code == 0x18 else 8  # ld_imm64 is two slots
            base = src if cls == 1 else dst if cls in (2, 3) else None
            if base == 10:
                depth = max(depth, -disp)
            elif base in fp:
                depth = max(depth, -(fp[base] + disp))
            if code == 0xBF and (src == 10 or src in fp):  # r_dst = r10 (or a copy)
                fp[dst] = 0 if src == 10 else fp[src]
            elif code == 0x07 and dst in fp:  # r_dst += imm
                fp[dst] += imm
                depth = max(depth, -fp[dst])
            elif cls in (0, 1, 4, 7) and dst in fp:  # ld/ldx/alu/alu64 overwrite dst
                del fp[dst]
            elif code == 0x85:  # a call clobbers r0-r5
                fp = {r: o for r, o in fp.items() if r > 5}
        out[fname] = depth
    return out


def emit_object(module_or_ir_text: ir.Module | str, mcpu: str = "v3", opt: int = 2) -> bytes:
    """ELF relocatable object bytes (EM_BPF, little-endian) with fixed-up ``.BTF``."""
    return emit(module_or_ir_text, mcpu=mcpu, opt=opt).obj


def emit_assembly(module_or_ir_text: ir.Module | str, mcpu: str = "v3", opt: int = 2) -> str:
    """BPF assembly text as ``llc -march=bpfel`` prints it."""
    return emit(module_or_ir_text, mcpu=mcpu, opt=opt, asm=True).asm or ""


# ---- .BTF DATASEC fix-up (libbpf btf_fixup_datasec; formats: linux/btf.h, elf.h) ----------

BTF_MAGIC = 0xEB9F
BTF_KIND_VAR = 14
BTF_KIND_DATASEC = 15
# bytes following struct btf_type (12 bytes) per kind; "v" entries are per vlen item
_BTF_EXTRA = {1: 4, 3: 12, 14: 4, 17: 4}
_BTF_PER_VLEN = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}


def _elf_sections(obj: bytes) -> tuple[list[tuple[str, int, int, int, int, int]], bytes]:
    """ELF64 LE section headers as (name, type, offset, size, link, flags) plus the bytes."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise InternalCompilerError("LLVM did not produce a 64-bit LE ELF object", "")
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    raw = [struct.unpack_from("<IIQQQQII", obj, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4]
    secs = []
    for name, typ, flags, _addr, off, size, link, _info in raw:
        end = obj.index(b"\0", stroff + name)
        secs.append((obj[stroff + name : end].decode(), typ, off, size, link, flags))
    return secs, obj


def _elf_symbols(obj: bytes, secs: list) -> list[tuple[str, int, int, int, int]]:
    """ELF64 LE symbols as (name, section index, value, size, STT type)."""
    symtab = next((s for s in secs if s[1] == 2), None)  # SHT_SYMTAB
    if symtab is None:
        return []
    strtab = secs[symtab[4]][2]
    out = []
    for off in range(symtab[2], symtab[2] + symtab[3], 24):
        st_name, info, _other, shndx, value, size = struct.unpack_from("<IBBHQQ", obj, off)
        name = obj[strtab + st_name : obj.index(b"\0", strtab + st_name)].decode()
        out.append((name, shndx, value, size, info & 0xF))
    return out


def fixup_btf_datasecs(obj: bytes) -> bytes:
    """Return ``obj`` with every ``.BTF`` DATASEC size = ELF section size and VAR offsets =
    symbol values (sorted).  Raises :class:`InternalCompilerError` if a DATASEC names a
    section or variable the object lacks.  Objects without ``.BTF`` are returned unchanged."""
    secs, _ = _elf_sections(obj)
    btf = next((s for s in secs if s[0] == ".BTF"), None)
    if btf is None:
        return obj
    by_name = {s[0]: i for i, s in enumerate(secs)}
    # (section index, name) -> st_value
    syms = {(shndx, name): value for name, shndx, value, _s, _k in _elf_symbols(obj, secs)}
    out = bytearray(obj)
    base = btf[2]
    magic, _v, _f, hdr_len, type_off, type_len, str_off, _sl = struct.unpack_from(
        "<HBBIIIII", obj, base
    )
    if magic != BTF_MAGIC:
        raise InternalCompilerError(".BTF has a bad magic", f"{magic:#x}")
    strs = base + hdr_len + str_off

    def name_at(off: int) -> str:
        return obj[strs + off : obj.index(b"\0", strs + off)].decode()

    types: list[tuple[int, int, int]] = [(0, 0, 0)]  # type id -> (kind, name_off, file pos)
    pos, end = base + hdr_len + type_off, base + hdr_len + type_off + type_len
    while pos < end:
        name_off, info, _sz = struct.unpack_from("<III", obj, pos)
        kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
        types.append((kind, name_off, pos))
        pos += 12 + _BTF_EXTRA.get(kind, 0) + _BTF_PER_VLEN.get(kind, 0) * vlen
    for kind, name_off, tpos in types:
        if kind != BTF_KIND_DATASEC:
            continue
        sec = name_at(name_off)
        if sec not in by_name:
            raise InternalCompilerError(f"BTF DATASEC {sec!r} has no ELF section", "")
        shndx = by_name[sec]
        vlen = struct.unpack_from("<I", obj, tpos + 4)[0] & 0xFFFF
        struct.pack_into("<I", out, tpos + 8, secs[shndx][3])
        infos = []
        for i in range(vlen):
            vtype, _off, vsize = struct.unpack_from("<III", obj, tpos + 12 + 12 * i)
            var = name_at(types[vtype][1])
            if (shndx, var) not in syms:
                raise InternalCompilerError(f"BTF VAR {var!r} has no symbol in {sec!r}", "")
            infos.append((syms[(shndx, var)], vtype, vsize))
        for i, (off, vtype, vsize) in enumerate(sorted(infos)):
            struct.pack_into("<III", out, tpos + 12 + 12 * i, vtype, off, vsize)
    return bytes(out)
