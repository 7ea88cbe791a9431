"""Parser and AST builder: literals convert at compile time (prefixes, string escapes),
positions are kept."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.lang import ast
from bpfdsl.lang.build import parse_program


def first_let(src: str) -> ast.Expr:
    prog = parse_program(f"xdp fn f(ctx) {{ let x = {src}\n return XDP_PASS }}", "t.bpfd")
    return prog.items[0].body.stmts[0].value


@pytest.mark.parametrize(
    "text,kind,data,plen",
    [
        ("10.0.0.1", "ipv4", bytes([10, 0, 0, 1]), None),
        ("10.0.0.0/8", "ipv4", bytes([10, 0, 0, 0]), 8),
        ("2001:db8::1", "ipv6", bytes.fromhex("20010db8000000000000000000000001"), None),
        ("::1", "ipv6", bytes(15) + b"\x01", None),
        ("2001:db8::/32", "ipv6", bytes.fromhex("20010db8") + bytes(12), 32),
        ("aa:bb:cc:dd:ee:ff", "mac", bytes.fromhex("aabbccddeeff"), None),
    ],
)
def test_parse_address_literals(text, kind, data, plen):
    e = first_let(text)
    assert isinstance(e, ast.AddrLit)
    assert (e.kind, e.data, e.prefixlen) == (kind, data, plen)


@pytest.mark.parametrize(
    "text,value", [("53", 53), ("0x8100", 0x8100), ("1_000", 1000), ("0b101", 5)]
)
def test_parse_integer_literals(text, value):
    e = first_let(text)
    assert isinstance(e, ast.IntLit) and e.value == value


def test_parse_precedence_and_spans():
    e = first_let("1 + 2 * 3 == 7 && !false")
    assert isinstance(e, ast.Logic) and e.op == "&&"
    cmp = e.left
    assert isinstance(cmp, ast.Compare) and isinstance(cmp.left, ast.BinOp)
    assert cmp.left.op == "+" and cmp.left.right.op == "*"
    assert (e.span.line, e.span.col) == (1, 25)


def test_parse_items_and_kinds():
    prog = parse_program(
        """license "GPL"
const P: be16 = 53
config port: u16 = 1
map m: lpm_trie<ipv4_prefix, u8>(max_entries: 8)
struct k { a: u32, b: u64, }
fn g(a: u32) -> u32 { return a }
xdp(cpumap) fn f(ctx) { match 1 { 1 | 2 => return XDP_PASS, _ => {} } return XDP_DROP }
""",
        "t.bpfd",
    )
    kinds = [type(i).__name__ for i in prog.items]
    assert kinds == [
        "License",
        "ConstDecl",
        "ConfigDecl",
        "MapDecl",
        "StructDecl",
        "FnDecl",
        "ProgDecl",
    ]
    assert prog.items[-1].keyword == "xdp(cpumap)"
    assert prog.items[3].kind == "lpm_trie" and prog.items[3].kind_span.col == 8


@pytest.mark.parametrize(
    "lit", ["10.0.0.0/8", "0.0.0.0/0", "1.2.3.4/32", "2001:db8::/32", "::1/128"]
)
def test_prefix_networks_are_accepted(lit):
    prog = parse_program(f"xdp fn f(ctx) {{ let x = {lit}\n return XDP_PASS }}", "t.bpfd")
    e = prog.items[0].body.stmts[0].value
    assert e.prefixlen == int(lit.split("/")[1])


@pytest.mark.parametrize(
    ("lit", "value"), [(r'"GPL"', "GPL"), (r'"G\"P\\L"', 'G"P\\L'), (r'"a\tb"', "a\tb")]
)
def test_license_escapes(lit, value):
    from bpfdsl.obj.collection import read_object

    src = f"license {lit}\nxdp fn f(ctx) {{ return XDP_PASS }}\n"
    assert read_object(compile_source(src, "t.bpfd", check=False).obj).license == value
