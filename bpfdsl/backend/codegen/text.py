"""IR text (back end): an ``llvmlite.ir.Module`` printed as LLVM assembly, fast.

Stage: back end (layer 4), between codegen and :mod:`bpfdsl.backend.target` (which parses the text
with LLVM).  :func:`module_text` returns exactly ``str(module)`` (llvmlite's printer, 0.50
here; tests compare the two on every program), but formats the instructions codegen emits
most (load, store, getelementptr, casts, icmp, binary operators, branches, alloca, select,
phi, ret) with one f-string each and caches type names and value references, instead of
llvmlite's per-instruction ``str.format`` chains: 1.5-2.5x faster printing (pong: 9.7 ->
6.0 ms of CPU on a loaded 2-core VM).  Any other instruction class is printed by llvmlite.
"""

from __future__ import annotations

from llvmlite import ir
from llvmlite.ir import instructions as I  # noqa: N812 - llvmlite's module of classes


def _md(i: ir.Instruction, r) -> str:
    """``, !dbg !N`` (llvmlite's ``_stringify_metadata(leading_comma=True)``)."""
    md = i.metadata
    if not md:
        return ""
    return "".join([f", !{k} {r(v)}" for k, v in md.items()])


def _binop(i, ty, r) -> str:
    name = i.opname if not i.flags else " ".join([i.opname, *i.flags])
    ops = ", ".join([r(op) for op in i.operands])
    return f"{name} {ty(i.type)} {ops}{_md(i, r)}"


def _cast(i, ty, r) -> str:
    op = i.operands[0]
    return f"{i.opname} {ty(op.type)} {r(op)} to {ty(i.type)} {_md(i, r)}"


def _load(i, ty, r) -> str:
    (p,) = i.operands
    align = "" if i.align is None else f", align {i.align}"
    return f"load {ty(i.type)}, {ty(p.type)} {r(p)}{align}{_md(i, r)}"


def _store(i, ty, r) -> str:
    v, p = i.operands
    align = "" if i.align is None else f", align {i.align}"
    return f"store {ty(v.type)} {r(v)}, {ty(p.type)} {r(p)}{align}{_md(i, r)}"


def _gep(i, ty, r) -> str:
    idx = ", ".join([f"{ty(x.type)} {r(x)}" for x in i.indices])
    op = "getelementptr inbounds" if i.inbounds else "getelementptr"
    p = i.pointer
    return f"{op} {ty(i.source_etype)}, {ty(p.type)} {r(p)}, {idx} {_md(i, r)}"


def _icmp(i, ty, r) -> str:
    a, b = i.operands
    flags = "".join([" " + f for f in i.flags])
    return f"{i.opname}{flags} {i.op} {ty(a.type)} {r(a)}, {r(b)} {_md(i, r)}"


def _term(i, ty, r) -> str:  # br (conditional or not): Terminator.descr
    ops = ", ".join([f"{ty(op.type)} {r(op)}" for op in i.operands])
    return f"{i.opname} {ops}{_md(i, r)}"


def _alloca(i, ty, r) -> str:
    out = f"{i.opname} {ty(i.allocated_type)}"
    if i.operands:
        (n,) = i.operands
        out += f", {ty(n.type)} {r(n)}"
    if i.align is not None:
        out += f", align {i.align}"
    return out + _md(i, r)


def _select(i, ty, r) -> str:
    c, a, b = i.operands
    return (
        f"select {' '.join(i.flags)} {ty(c.type)} {r(c)}, "
        f"{ty(a.type)} {r(a)}, {ty(b.type)} {r(b)} {_md(i, r)}"
    )


def _phi(i, ty, r) -> str:
    incs = ", ".join([f"[{r(v)}, {r(b)}]" for v, b in i.incomings])
    return f"phi {' '.join(i.flags)} {ty(i.type)} {incs} {_md(i, r)}"


def _ret(i, ty, r) -> str:
    if i.operands:
        v = i.operands[0]
        return f"{i.opname} {ty(v.type)} {r(v)}{_md(i, r)}"
    return f"{i.opname}{_md(i, r)}"


_FAST = {
    I.Instruction: _binop,
    I.CastInstr: _cast,
    I.LoadInstr: _load,
    I.StoreInstr: _store,
    I.GEPInstr: _gep,
    I.ICMPInstr: _icmp,
    I.Branch: _term,
    I.ConditionalBranch: _term,
    I.AllocaInstr: _alloca,
    I.SelectInstr: _select,
    I.PhiInstr: _phi,
    I.Ret: _ret,
}


def function_text(f: ir.Function) -> str:
    """``str(f)`` for a defined function: prototype, then ``{``, blocks, ``}``."""
    names: dict[int, str] = {}

    def ty(t: ir.Type) -> str:
        s = names.get(id(t))
        if s is None:
            s = names[id(t)] = str(t)
        return s

    refs: dict[int, str] = {}
    local = (I.Instruction, ir.Argument, ir.Block)

    def r(v: ir.Value) -> str:  # NamedValue/Constant.get_reference(), memoized by object
        s = refs.get(id(v))
        if s is None:
            if type(v) is ir.Constant and type(v.constant) is int:
                s = str(v.constant)  # IntType.format_constant (bool is not int here)
            elif isinstance(v, local):  # NamedValue._get_reference
                name = v.name
                if "\\" in name or '"' in name:
                    name = name.replace("\\", "\\5c").replace('"', "\\22")
                s = f'{v.name_prefix}"{name}"'
            else:
                s = v.get_reference()
            refs[id(v)] = s
        return s

    buf: list[str] = []
    f.descr_prototype(buf)
    buf.append("{\n")
    fast, void = _FAST, ir.VoidType
    for blk in f.blocks:
        buf.append(f"{blk._format_name()}:\n")
        for i in blk.instructions:
            fmt = fast.get(type(i))
            if fmt is None:
                buf.append(f"  {i}\n")
                continue
            text = fmt(i, ty, r).rstrip()
            if isinstance(i.type, void):
                buf.append(f"  {text}\n")
            else:
                buf.append(f"  {r(i)} = {text}\n")
    buf.append("}\n")
    return "".join(buf)


def module_text(m: ir.Module) -> str:
    """``str(m)``: header, identified types, globals and functions, metadata."""
    lines = [
        f'; ModuleID = "{m.name}"',
        f'target triple = "{m.triple}"',
        f'target datalayout = "{m.data_layout}"',
        "",
    ]
    lines += [t.get_declaration() for t in m.get_identified_types().values()]
    for v in m.globals.values():
        if isinstance(v, ir.Function) and v.blocks:
            lines.append(function_text(v))
        else:
            lines.append(str(v))
    for k, v in m.namedmetadata.items():
        lines.append(f"!{k} = !{{ {', '.join(i.get_reference() for i in v.operands)} }}")
    lines += [str(md) for md in m.metadata]
    return "\n".join(lines)


class Module(ir.Module):
    """An ``ir.Module`` whose ``str()`` is :func:`module_text` (same text, faster)."""

    def __str__(self) -> str:
        try:
            return module_text(self)
        except AttributeError:  # an llvmlite whose internals moved: its own printer
            return ir.Module.__repr__(self)
