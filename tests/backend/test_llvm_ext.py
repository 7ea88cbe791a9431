"""bpfdsl/backend/llvm_ext.py holds every use of llvmlite internals; this fails loudly when
an llvmlite upgrade moves one (the IR would otherwise silently lose `volatile`, or a
kfunc declaration its `!dbg`, and the object its kfunc BTF): the internals exist, and the
text LLVM gets is what the kernel's object needs, parsed back by LLVM itself."""

from __future__ import annotations

import llvmlite
from llvmlite import binding as llvm
from llvmlite import ir

from bpfdsl.backend import llvm_ext

I32 = ir.IntType(32)


def test_the_internals_llvm_ext_uses_are_there() -> None:
    why = f"llvmlite {llvmlite.__version__} moved an internal bpfdsl/backend/llvm_ext.py uses"
    assert callable(getattr(ir.IRBuilder, "_insert", None)), why
    assert callable(getattr(ir.Function, "_stringify_metadata", None)), why
    assert callable(getattr(ir.Function, "descr_prototype", None)), why
    assert callable(getattr(ir.LoadInstr, "descr", None)), why


def _module() -> tuple[ir.Module, ir.IRBuilder, ir.GlobalVariable]:
    m = ir.Module("t")
    m.triple = "bpfel"
    gv = ir.GlobalVariable(m, I32, "cfg")
    gv.initializer = ir.Constant(I32, 7)
    gv.align = 4
    fn = ir.Function(m, ir.FunctionType(I32, []), "f")
    return m, ir.IRBuilder(fn.append_basic_block("entry")), gv


def test_volatile_load_is_volatile_and_parses() -> None:
    m, b, gv = _module()
    v = llvm_ext.volatile_load(b, gv, I32, 4, "x")
    b.ret(v)
    text = str(m)
    assert '%"x" = load volatile i32, i32* @"cfg", align 4' in text, text
    llvm.parse_assembly(text).verify()  # LLVM reads it back


def test_kfunc_declaration_carries_dbg_before_the_name() -> None:
    m, b, _ = _module()
    b.ret(ir.Constant(I32, 0))
    k = llvm_ext.KsymDecl(m, ir.FunctionType(I32, []), "bpf_kfunc")
    sp = m.add_debug_info(
        "DISubprogram",
        {"name": "bpf_kfunc", "spFlags": ir.DIToken("DISPFlagOptimized")},
        is_distinct=True,
    )
    k.set_metadata("dbg", sp)
    line = next(x for x in str(m).splitlines() if "bpf_kfunc" in x and x.startswith("declare"))
    assert line.startswith("declare !dbg !"), line
