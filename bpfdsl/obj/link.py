"""Programs of an object: split executable sections into functions and link subprograms.

As libbpf (bpf_object__add_programs, bpf_object__reloc_code): every FUNC symbol of a
non-``.text`` executable section is a program; ``.text`` holds subprograms.  A program's
instructions are its function followed by every subprogram it reaches through BPF-to-BPF
calls (or ld_imm64 function references, BPF_PSEUDO_FUNC), each appended once, with call
offsets re-pointed and func/line info moved to the new slots.  Call targets follow
libbpf's rule: relocated call -> ``sym.value / 8 + imm + 1`` in the symbol's section;
unrelocated -> PC-relative in the same section.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from bpfdsl.abi.btf.core import Btf
from bpfdsl.abi.btf.ext import BtfExt
from bpfdsl.abi.insn import Insn, InsnError, check_jumps, decode, index_by_slot, slot_offsets
from bpfdsl.abi.opcodes import BPF_PSEUDO_CALL, BPF_PSEUDO_FUNC, BPF_PSEUDO_KFUNC_CALL
from bpfdsl.abi.prog_types import kind_for_section
from bpfdsl.diagnostics import Span
from bpfdsl.obj.elf import SHF_EXECINSTR, Section, Symbol
from bpfdsl.obj.reader import ObjectReader
from bpfdsl.obj.spec import FuncRecord, ProgramSpec, Relocation


@dataclass(slots=True)
class _Func:
    section: str
    name: str
    start: int  # bytes in section
    end: int
    insns: list[Insn] = field(default_factory=list)
    relocs: list[Relocation] = field(default_factory=list)
    calls: dict[int, tuple[str, int, bool]] = field(default_factory=dict)
    # list index -> (section, byte offset of the target, is_func_ref)


def link_programs(
    reader: ObjectReader, btf: Btf | None, ext: BtfExt | None, maps: set[str], datasecs: set[str]
) -> dict[str, ProgramSpec]:
    """Programs by name (``section/name`` when a name repeats).  Raises UsageError."""
    funcs: dict[str, list[_Func]] = {}
    for idx, sec in enumerate(reader.sections):
        h = sec.header
        if not (isinstance(h.sh_flags, int) and h.sh_flags & SHF_EXECINSTR) or not h.sh_size:
            continue
        if h.sh_type != "SHT_PROGBITS":
            continue
        funcs[sec.name] = _split(reader, sec, idx, maps, datasecs, ext)
    programs: dict[str, ProgramSpec] = {}
    for sec_name, fl in funcs.items():
        if sec_name == ".text":
            continue
        for f in fl:
            p = _link(reader, f, funcs, ext)
            key = f.name if f.name not in programs else f"{sec_name}/{f.name}"
            programs[key] = p
    return programs


def _split(
    reader: ObjectReader,
    sec: Section,
    idx: int,
    maps: set[str],
    datasecs: set[str],
    ext: BtfExt | None,
) -> list[_Func]:
    data = reader.data(sec)
    if len(data) % 8:
        raise reader.fail(f"section '{sec.name}': size {len(data)} is not a multiple of 8")
    syms = sorted(
        (s.entry.st_value, s.name)
        for s in reader.symbols
        if s.entry.st_shndx == idx and s["st_info"]["type"] == "STT_FUNC"
    )
    if not syms:
        syms = [(0, sec.name.replace("/", "_").replace(".", "_"))]
    funcs = []
    for i, (start, name) in enumerate(syms):
        end = syms[i + 1][0] if i + 1 < len(syms) else len(data)
        if start % 8 or start >= len(data) or end <= start:
            raise reader.fail(
                f"section '{sec.name}': function '{name}' at byte {start} is "
                "not aligned or outside the section"
            )
        try:
            insns = decode(data[start:end])
            check_jumps(insns, calls=False)  # calls are checked when linked (_link)
        except InsnError as e:
            err = reader.fail(
                f"section '{sec.name}' function '{name}': {e}",
                hint="the kernel refuses this instruction; the object is corrupt or not "
                "for this kernel (rebuild it)",
            )
            at = start + 8 * (e.slot or 0)
            err.diagnostics[0].span = _source_span(ext, sec.name, start, at)
            raise err from None
        funcs.append(_Func(sec.name, name, start, end, insns))
    relocs = reader.relocations_for(sec.name)
    for f in funcs:
        by_slot = index_by_slot(f.insns)
        for r_off, sym_idx, _rtype in relocs:
            if not f.start <= r_off < f.end:
                continue
            at = by_slot.get((r_off - f.start) // 8) if r_off % 8 == 0 else None
            if at is None:
                raise reader.fail(
                    f"section '{sec.name}': relocation at byte {r_off} does not "
                    "start an instruction"
                )
            _classify(reader, f, at, reader.symbol(sym_idx), maps, datasecs)
        slots = slot_offsets(f.insns)
        for i, x in enumerate(f.insns):
            kfunc = any(r.insn_idx == i and r.kind == "kfunc" for r in f.relocs)
            if x.is_call and x.src == BPF_PSEUDO_KFUNC_CALL and not kfunc:
                raise reader.fail(f"function '{f.name}': kfunc calls are not supported")
            if x.is_pseudo_call and i not in f.calls:
                f.calls[i] = (sec.name, f.start + (slots[i] + 1 + x.imm) * 8, False)
    return funcs


def _source_span(ext: BtfExt | None, section: str, start: int, byte: int) -> Span | None:
    """Source position (.BTF.ext line info) of the instruction at ``byte`` of ``section``,
    in the function that starts at byte ``start``."""
    best = None
    for li in ext.line_info.get(section, ()) if ext is not None else ():
        if (
            start <= li.insn_off <= byte
            and li.line
            and (best is None or li.insn_off >= best.insn_off)
        ):
            best = li
    return Span(best.file or "<object>", best.line, max(1, best.col)) if best else None


def _classify(
    reader: ObjectReader, f: _Func, i: int, sym: Symbol, maps: set[str], datasecs: set[str]
) -> None:
    x = f.insns[i]
    target = reader.sym_section(sym)
    where = f"function '{f.name}' insn {i}"
    is_section_sym = sym["st_info"]["type"] == "STT_SECTION"
    if target is None and x.is_call and x.src == BPF_PSEUDO_CALL and x.imm == -1:
        # an extern function: a kfunc (libbpf RELO_EXTERN_CALL); the loader puts its BTF id
        # in imm, the call is a kernel-function call from here on
        f.insns[i] = Insn(x.opcode, x.dst, BPF_PSEUDO_KFUNC_CALL, 0, 0)
        f.relocs.append(Relocation(i, "kfunc", sym.name))
        return
    if target is None:
        raise reader.fail(
            f"{where}: reference to undefined symbol '{sym.name}' "
            "(extern variables/functions are not supported)"
        )
    if x.is_call:
        if x.src != BPF_PSEUDO_CALL:
            raise reader.fail(f"{where}: relocated call is not a BPF-to-BPF call")
        f.calls[i] = (target, sym.entry.st_value + (x.imm + 1) * 8, False)
        return
    if not x.is_ld_imm64:
        raise reader.fail(
            f"{where}: relocation on a {x.opcode:#04x} instruction "
            f"(only ld_imm64 and calls are relocated)"
        )
    if target == ".maps":
        if sym.name not in maps:
            raise reader.fail(f"{where}: '{sym.name}' is not a map defined in '.maps'")
        f.relocs.append(Relocation(i, "map", sym.name))
    elif target in datasecs:
        off = (0 if is_section_sym else sym.entry.st_value) + x.imm
        f.relocs.append(Relocation(i, "data", target, off))
    elif target == ".text" or target == f.section:
        f.calls[i] = (target, sym.entry.st_value + x.imm, True)
    else:
        raise reader.fail(
            f"{where}: reference to '{sym.name}' in section '{target}', which "
            "is neither a map, a data section nor code"
        )


def _find(funcs: dict[str, list[_Func]], sec: str, byte: int) -> _Func | None:
    for g in funcs.get(sec, ()):
        if g.start == byte:
            return g
    return None


def _link(
    reader: ObjectReader, main: _Func, funcs: dict[str, list[_Func]], ext: BtfExt | None
) -> ProgramSpec:
    order, base = [main], {id(main): 0}
    total = sum(x.width for x in main.insns)
    k = 0
    while k < len(order):
        g = order[k]
        for i, (sec, byte, _) in sorted(g.calls.items()):
            callee = _find(funcs, sec, byte)
            if callee is None:
                raise reader.fail(
                    f"function '{g.name}' insn {i}: call target at byte {byte} of "
                    f"'{sec}' is not the start of a function"
                )
            if id(callee) not in base:
                base[id(callee)] = total
                total += sum(x.width for x in callee.insns)
                order.append(callee)
        k += 1
    insns: list[Insn] = []
    relocs: list[Relocation] = []
    finfo, linfo = [], []
    for g in order:
        b, first = base[id(g)], len(insns)
        slots = slot_offsets(g.insns)
        for i, x in enumerate(g.insns):
            if i in g.calls:
                sec, byte, is_ref = g.calls[i]
                callee = _find(funcs, sec, byte)
                delta = base[id(callee)] - (b + slots[i] + 1)
                x = (
                    Insn(x.opcode, x.dst, BPF_PSEUDO_FUNC, x.off, delta)
                    if is_ref
                    else x.with_imm(delta)
                )
            insns.append(x)
        relocs += [replace(r, insn_idx=r.insn_idx + first) for r in g.relocs]
        if ext is not None:
            for fi in ext.func_info.get(g.section, ()):
                if g.start <= fi.insn_off < g.end:
                    finfo.append(FuncRecord(b + (fi.insn_off - g.start) // 8, fi.type_id, g.name))
            for li in ext.line_info.get(g.section, ()):
                if g.start <= li.insn_off < g.end:
                    linfo.append(replace(li, insn_off=b + (li.insn_off - g.start) // 8))
    return ProgramSpec(
        main.name,
        main.section,
        kind_for_section(main.section),
        insns,
        relocs,
        finfo,
        linfo,
        [g.name for g in order[1:]],
        main.start,
    )
