"""Sema: byte order conversion of literals, struct layout (B07), constant folding, program
kinds (a file needs a program; ctx fields by kind).  Refused programs: tests/lang/errors/."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source, front_end
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang import types as T


def check(body: str, head: str = 'license "GPL"\n'):
    return front_end(head + body, "t.bpfd")


@pytest.mark.parametrize(
    "decl,raw",
    [
        ("const P: be16 = 53", 0x3500),
        ("const P: be32 = 10.0.0.1", 0x0100000A),
        ("const P: be16 = 0x8100", 0x0081),
        ("const P: u16 = 53", 53),
        ("const P: be32 = be32(1 << 8)", 0x00010000),
        ("const P: u16 = host(be16(0x1234))", 0x1234),
    ],
)
def test_sema_constants_fold_to_memory_order(decl, raw):
    c = check(decl + "\nxdp fn f(ctx) { return XDP_PASS }")
    assert c.consts["P"].value == raw


def test_sema_struct_layout_is_c_natural_b07():
    c = check("struct r { a: i32, b: i64, c: u8, d: be16 }\nxdp fn f(ctx) { return XDP_PASS }")
    r = c.structs["r"]
    assert {n: off for n, (off, _t) in r.fields.items()} == {"a": 0, "b": 8, "c": 16, "d": 18}
    assert (r.size, r.align) == (24, 8)
    assert (T.IPV6_PREFIX.size, T.IPV4_PREFIX.size) == (20, 8)


def test_sema_map_types_and_flags():
    c = check(
        "map a: lpm_trie<ipv6_prefix, u8>(max_entries: 4)\n"
        "map b: devmap(max_entries: 8)\n"
        "map d: percpu_array<u64>(max_entries: 2)\n"
        "xdp fn f(ctx) { return XDP_PASS }"
    )
    assert (c.maps["a"].map_type, c.maps["a"].flags, c.maps["a"].key.size) == (11, 1, 20)
    assert (c.maps["b"].map_type, c.maps["b"].key, c.maps["b"].value.size) == (14, T.U32, 8)
    assert (c.maps["d"].key, c.maps["d"].value) == (T.U32, T.U64)


def test_sema_config_offsets_in_rodata():
    c = check(
        "config a: u8 = 1\nconfig b: u32 = 2\nconfig p: be16 = 53\n"
        "xdp fn f(ctx) { return XDP_PASS }"
    )
    assert [(n, v.offset, v.value) for n, v in c.configs.items()] == [
        ("a", 0, 1),
        ("b", 4, 2),
        ("p", 8, 0x3500),
    ]


def test_sema_sock_ops_constants_match_the_kernel():
    c = check(
        "const A: u32 = BPF_SOCK_OPS_STATE_CB_FLAG\nconst B: u32 = BPF_TCP_NEW_SYN_RECV\n"
        "const C: u32 = BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB\n"
        "sock_ops fn t(s) { return 1 }"
    )
    assert (c.consts["A"].value, c.consts["B"].value, c.consts["C"].value) == (4, 12, 5)


@pytest.mark.parametrize("text", ["", "// nothing\n", 'license "GPL"\n'])
def test_file_without_programs_is_an_error(text):
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "t.bpfd")
    (d,) = ei.value.diagnostics
    assert d.code == "no-programs" and "xdp fn name(ctx)" in d.hints[0]


def test_egress_ifindex_still_compiles_in_devmap_programs():
    src = (
        'license "GPL"\nxdp(devmap) fn f(ctx) {\n'
        "    if ctx.egress_ifindex == 3 { return XDP_DROP }\n    return XDP_PASS\n}"
    )
    assert compile_source(src, "ok.bpfd").programs == ["f"]
