"""Value classes are dataclasses with the equality, hashing and repr their users rely on:
spans and instructions are keys (frozen, equal by value), diagnostics compare by value,
an attachment's fd does not take part, specs copy with ``dataclasses.replace`` (the
difftest scripts do), AST nodes are keys by identity, and types are equal by their fields
except the per-declaration ones (struct, map, optional, ref)."""

from __future__ import annotations

import dataclasses

import pytest

from bpfdsl.abi.insn import Insn
from bpfdsl.abi.prog_types import PROGRAM_KINDS
from bpfdsl.compiler import front_end
from bpfdsl.diagnostics import Diagnostic, Span, error
from bpfdsl.lang import ast
from bpfdsl.lang import types as T
from bpfdsl.lang.headers import HEADERS
from bpfdsl.obj.spec import ProgramSpec, Relocation
from bpfdsl.runtime.attach import XdpAttachment


def test_span_is_a_frozen_key():
    a, b = Span("f.bpfd", 3, 5, 3, 9), Span("f.bpfd", 3, 5, 3, 9)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert a != Span("f.bpfd", 3, 6, 3, 9)
    assert str(a) == "f.bpfd:3:5"
    assert repr(Span("f", 1, 2)) == "Span(file='f', line=1, col=2, end_line=None, end_col=None)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.line = 4  # type: ignore[misc]


def test_diagnostic_compares_by_value_and_is_not_a_key():
    d = error("bad-literal", "malformed number '0x'", Span("f", 1, 1), hint="write 0x5dc")
    assert d == error("bad-literal", "malformed number '0x'", Span("f", 1, 1), hint="write 0x5dc")
    assert d != error("bad-literal", "malformed number '0x'", Span("f", 1, 2), hint="write 0x5dc")
    with pytest.raises(TypeError):
        hash(d)  # mutable
    assert repr(Diagnostic("error", "x", "m")) == (
        "Diagnostic(severity='error', code='x', message='m', span=None, hints=[], notes=[])"
    )
    one, two = Diagnostic("note", "a", "m"), Diagnostic("note", "a", "m")
    one.hints.append("h")
    assert two.hints == []  # each gets its own list


def test_instruction_is_a_frozen_key():
    ld = Insn(0x18, 1, 0, 0, 1 << 40)
    assert ld == Insn(0x18, 1, 0, 0, 1 << 40) and hash(ld) == hash(Insn(0x18, 1, imm=1 << 40))
    assert {ld: 1}[Insn(0x18, 1, imm=1 << 40)] == 1
    assert ld.width == 2 and Insn(0x95).is_exit
    with pytest.raises(dataclasses.FrozenInstanceError):
        ld.imm = 0  # type: ignore[misc]
    assert PROGRAM_KINDS[0] == dataclasses.replace(PROGRAM_KINDS[0])


def test_attachment_fd_takes_no_part_in_equality_or_repr():
    a = XdpAttachment("veth0", 7, "native", "link", 42, "f", 3, None, link_fd=object())
    b = XdpAttachment("veth0", 7, "native", "link", 42, "f", 3, None, link_fd=None)
    assert a == b and hash(a) == hash(b)
    assert "link_fd" not in repr(a) and "prog_id=42" in repr(a)
    assert a != dataclasses.replace(b, prog_id=43)


def test_specs_copy_with_dataclasses_replace():
    p = ProgramSpec("f", "xdp", PROGRAM_KINDS[0], [Insn(0xB7), Insn(0x95)])
    q = dataclasses.replace(p, name="g", relocations=[Relocation(0, "map", "m")])
    assert (q.name, q.insns, q.kind) == ("g", p.insns, p.kind) and p.relocations == []
    assert ProgramSpec("f", "xdp", None, []).subprograms is not p.subprograms  # not shared
    assert [f.name for f in dataclasses.fields(Relocation)] == [
        "insn_idx",
        "kind",
        "symbol",
        "offset",
    ]


SRC = """license "GPL"
xdp fn f(ctx) {
    let a: u32 = 1
    let b: u32 = 1
    if a == b { return XDP_DROP }
    return XDP_PASS
}
"""


def test_ast_nodes_are_keys_by_identity():
    checked = front_end(SRC, "t.bpfd")
    prog = next(it for it in checked.program.items if isinstance(it, ast.ProgDecl))
    let_a, let_b = prog.body.stmts[0], prog.body.stmts[1]
    one_a, one_b = let_a.value, let_b.value
    assert isinstance(one_a, ast.IntLit) and (one_a.value, one_b.value) == (1, 1)
    assert one_a != one_b and hash(one_a) != hash(one_b)  # same text, different nodes
    assert checked.cval[one_a] == 1 and checked.cval[one_b] == 1  # sema's side table
    assert one_a.ty == T.U32  # filled by sema
    assert ast.IntLit(Span("t", 1, 1), 5).ty is None  # before sema
    assert list(vars(let_a))[:2] == ["span", "name"]
    assert repr(ast.Name(Span("t", 1, 1), "x")).startswith("Name(span=Span(")


def test_types_are_equal_by_fields_except_per_declaration_ones():
    assert T.IntType(32) == T.U32 and hash(T.IntType(32)) == hash(T.U32)
    assert T.IntType(16, be=True) != T.U16 and str(T.BE16) == "be16" and T.U64.size == 8
    assert T.ArrayType(T.U8, 6) == T.ArrayType(T.U8, 6) and T.ArrayType(T.U8, 6).size == 6
    assert T.HeaderType("udp", HEADERS["udp"]) == T.HeaderType("udp", None)  # by name only
    s1 = T.make_struct("k", [("a", T.U32)])
    s2 = T.make_struct("k", [("a", T.U32)])
    assert s1 != s2 and s1 == s1 and (s1.size, s1.align) == (4, 4)
    assert T.OptionalType(T.U8) != T.OptionalType(T.U8)
    assert repr(T.U32) == "IntType(bits=32, signed=False, be=False)"
    with pytest.raises(dataclasses.FrozenInstanceError):
        T.U32.bits = 64  # type: ignore[misc]
