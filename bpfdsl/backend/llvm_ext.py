"""What bpfdsl needs of LLVM IR that llvmlite's public ``ir`` API does not give, in one
place (issue #26).  Each item leans on an llvmlite internal, named here, that
tests/backend/test_llvm_ext.py checks so an llvmlite upgrade that moves it fails loudly
instead of emitting wrong IR:

- :func:`volatile_load`: ``load volatile`` (``ir.LoadInstr`` has no volatile flag; the
  instruction is placed with ``IRBuilder._insert``, what every ``IRBuilder`` method uses);
- :class:`KsymDecl`: a function declaration carrying ``!dbg`` where LLVM's parser takes it
  on a declaration (``declare !dbg !N ...``; llvmlite writes metadata after the prototype,
  right only for definitions), through ``Function._stringify_metadata`` and
  ``descr_prototype``.
"""

from __future__ import annotations

from llvmlite import ir


class _VolatileLoad(ir.LoadInstr):
    """``load volatile``: llvmlite's LoadInstr text with the keyword added."""

    def descr(self, buf: list[str]) -> None:
        inner: list[str] = []
        super().descr(inner)
        buf.append("".join(inner).replace("load ", "load volatile ", 1))


def volatile_load(
    builder: ir.IRBuilder, ptr: ir.Value, typ: ir.Type, align: int, name: str = ""
) -> ir.Instruction:
    """Emit ``%name = load volatile TYP, ptr PTR, align ALIGN`` at ``builder``'s position
    (a load LLVM may neither fold, nor move out of a loop, nor merge with another)."""
    instr = _VolatileLoad(builder.block, ptr, name=name, typ=typ)
    instr.align = align
    builder._insert(instr)
    return instr


class KsymDecl(ir.Function):
    """A function declaration whose ``!dbg`` goes where LLVM's parser wants it on a
    declaration, ``declare !dbg !N ...`` (a kfunc's BTF comes from that DISubprogram)."""

    def descr_prototype(self, buf: list[str]) -> None:
        md = self._stringify_metadata()
        saved: dict = getattr(self, "metadata")  # noqa: B009 (llvmlite leaves it untyped)
        setattr(self, "metadata", {})  # noqa: B010
        inner: list[str] = []
        try:
            super().descr_prototype(inner)
        finally:
            setattr(self, "metadata", saved)  # noqa: B010
        text = "".join(inner)
        buf.append(text.replace("declare ", f"declare {md} ", 1) if md else text)
