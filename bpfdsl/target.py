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
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpfdsl.diagnostics import DiagnosticError, UsageError, error

if TYPE_CHECKING:  # llvmlite is imported lazily: `bpfdsl --help` must start fast
    from llvmlite import binding as llvm
    from llvmlite import ir

TRIPLE = "bpfel"
DATA_LAYOUT = "e-m:e-p:64:64-i64:64-i128:128-n32:64-S128"  # clang-19 -target bpf (LE)
MCPUS = ("v1", "v2", "v3", "v4", "generic", "probe")  # llc -march=bpf -mcpu=help

_machines: dict[str, llvm.TargetMachine] = {}
_initialized = False


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


def _llvm():
    """The llvmlite binding with the BPF target and asm printer initialised (once)."""
    global _initialized
    from llvmlite import binding as llvm  # noqa: PLC0415

    if not _initialized:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()
        _initialized = True
    return llvm


def target_machine(mcpu: str = "v3") -> llvm.TargetMachine:
    """The cached ``bpfel`` TargetMachine for ``mcpu`` (BPF ISA level v1..v4; v3 = jmp32 +
    alu32, kernel >= 5.1).  Raises :class:`UsageError` for an unknown level."""
    tm = _machines.get(mcpu)
    if tm is None:
        if mcpu not in MCPUS:
            raise UsageError(
                error(
                    "bad-mcpu",
                    f"unknown BPF CPU level {mcpu!r}",
                    hint="use one of v1, v2, v3 (default), v4",
                )
            )
        llvm = _llvm()
        tm = llvm.Target.from_triple(TRIPLE).create_target_machine(cpu=mcpu, opt=2)
        _machines[mcpu] = tm
    return tm


def parse(module_or_ir_text: ir.Module | str) -> llvm.ModuleRef:
    """Parse and verify IR into an LLVM module for ``bpfel`` (triple and layout forced)."""
    llvm = _llvm()
    text = module_or_ir_text if isinstance(module_or_ir_text, str) else str(module_or_ir_text)
    try:
        mod = llvm.parse_assembly(text)
    except RuntimeError as e:
        raise InternalCompilerError("LLVM could not parse the generated IR", str(e)) from None
    mod.triple = TRIPLE
    mod.data_layout = DATA_LAYOUT
    try:
        mod.verify()
    except RuntimeError as e:
        raise InternalCompilerError("generated IR is invalid", str(e)) from None
    return mod


def optimize(mod: llvm.ModuleRef, *, mcpu: str = "v3", opt: int = 2) -> llvm.ModuleRef:
    """Run LLVM's default per-module pipeline at ``-O{opt}`` in place (0 <= opt <= 3), with the
    BPF TargetMachine's IR passes registered; returns ``mod``."""
    if opt <= 0:
        return mod
    llvm = _llvm()
    tm = target_machine(mcpu)
    pto = llvm.PipelineTuningOptions(speed_level=min(opt, 3))
    pb = llvm.PassBuilder(tm, pto)
    pb.getModulePassManager().run(mod, pb)
    return mod


@dataclass(frozen=True, slots=True)
class Emitted:
    """Result of :func:`emit`: ``obj`` ELF bytes, optional ``asm`` text and optimized ``ir``."""

    obj: bytes
    asm: str | None = None
    ir: str | None = None


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
    try:
        obj = tm.emit_object(mod)
        asm_text = tm.emit_assembly(mod) if asm else None
    except RuntimeError as e:
        raise InternalCompilerError("LLVM BPF code generation failed", str(e)) from None
    return Emitted(fixup_btf_datasecs(obj), asm_text, str(mod) if ir else None)


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


def _elf_sections(obj: bytes) -> tuple[list[tuple[str, int, int, int, int]], bytes]:
    """ELF64 LE section headers as (name, type, offset, size, link) plus the raw bytes."""
    if obj[:4] != b"\x7fELF" or obj[4] != 2 or obj[5] != 1:
        raise InternalCompilerError("LLVM did not produce a 64-bit LE ELF object", "")
    (shoff,) = struct.unpack_from("<Q", obj, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", obj, 0x3A)
    raw = [struct.unpack_from("<IIQQQQII", obj, shoff + i * shentsize) for i in range(shnum)]
    stroff = raw[shstrndx][4]
    secs = []
    for name, typ, _fl, _addr, off, size, link, _info in raw:
        end = obj.index(b"\0", stroff + name)
        secs.append((obj[stroff + name : end].decode(), typ, off, size, link))
    return secs, obj


def fixup_btf_datasecs(obj: bytes) -> bytes:
    """Return ``obj`` with every ``.BTF`` DATASEC size = ELF section size and VAR offsets =
    symbol values (sorted).  Raises :class:`InternalCompilerError` if a DATASEC names a
    section or variable the object lacks.  Objects without ``.BTF`` are returned unchanged."""
    secs, _ = _elf_sections(obj)
    btf = next((s for s in secs if s[0] == ".BTF"), None)
    symtab = next((s for s in secs if s[1] == 2), None)  # SHT_SYMTAB
    if btf is None or symtab is None:
        return obj
    by_name = {s[0]: i for i, s in enumerate(secs)}
    strtab = secs[symtab[4]]
    syms: dict[tuple[int, str], int] = {}  # (section index, name) -> st_value
    for off in range(symtab[2], symtab[2] + symtab[3], 24):
        st_name, _info, _other, shndx, value, _size = struct.unpack_from("<IBBHQQ", obj, off)
        end = obj.index(b"\0", strtab[2] + st_name)
        syms[(shndx, obj[strtab[2] + st_name : end].decode())] = value
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
