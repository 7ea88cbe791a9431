"""The front end never leaks a traceback or an unlocated error: calls to fns defined later
in the file compile (recursion stays a located error), over-long names, malformed numbers
and bytes that are not UTF-8 are errors at their line:col, a source path that is not a
regular file, or is too large, is refused before anything reads it without bound, and
nesting too deep for the compiler is an error with a hint."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from support.paths import ROOT

from bpfdsl.compiler import MAX_SOURCE_BYTES, compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError, UsageError
from bpfdsl.lang.parser import MAX_NAME_LEN
from bpfdsl.obj.reader import ObjectReader

PASS = "xdp fn f(ctx) { return XDP_PASS }\n"


def diag(text: str, count: int = 1):
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "t.bpfd")
    assert len(ei.value.diagnostics) == count, ei.value.diagnostics
    return ei.value.diagnostics[0]


def cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "bpfdsl", *args], capture_output=True,
                          text=True, timeout=timeout, env=env)  # fmt: skip


# ---- calls to later fns ----

LATER = """license "GPL"
fn twice(x: u32) -> u32 { return add(x, x) }
fn add(a: u32, b: u32) -> u32 { return a + b }
xdp fn f(ctx) {
    let n = ctx.len as u32
    if twice(n) == 2 * n && add(1, 2) == 3 { return XDP_DROP }
    return XDP_PASS
}
"""


def test_a_fn_may_call_a_fn_defined_after_it(bpf_program):
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    prog = bpf_program(compile_source(LATER, "t.bpfd").obj)
    assert prog.run(Ether() / IP() / UDP() / b"x").verdict == "XDP_DROP"


def test_recursion_through_a_later_fn_is_an_error_at_the_fn():
    text = 'license "GPL"\nfn a(x: u32) -> u32 { return b(x) }\n'
    text += "fn b(x: u32) -> u32 { return a(x) + 1 }\n" + PASS
    d = diag(text, count=2)  # reported at each fn of the cycle: the first is `a`
    assert (d.code, d.span.line, d.span.col) == ("recursion", 2, 1)
    assert "fn `a` calls itself" in d.message
    assert d.hints == ["use a bounded `for` loop"]


# ---- names ----

LONG_NAMES = """license "GPL"
struct {s} {{ {f}: u32 }}
config {c}: u32 = 7
map {m}: array<u32, {s}>(max_entries: 1)
xdp fn {p}(ctx) {{
    let {v} = {c}
    {m}[0] = {s}({f}: {v})
    return XDP_PASS
}}
"""


def long_names(n: int) -> dict[str, str]:
    return {k: k + "_" * (n - 1) for k in "sfcmpv"}


@pytest.mark.kernel
def test_names_of_512_characters_load_and_the_kernel_refuses_513():
    from bpfdsl.abi.btf.core import Kind
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    names = long_names(MAX_NAME_LEN)
    spec = read_object(compile_source(LONG_NAMES.format(**names), "t.bpfd").obj)
    with load_collection(spec) as coll:
        assert set(coll.maps) >= {names["m"]} and names["p"] in coll.programs
    btf = spec.btf  # the same BTF with the struct named 513 characters: "Invalid name"
    (st,) = [t for t in btf.types if t.kind == Kind.STRUCT and t.name == names["s"]]
    st.name_off = len(btf.strings)
    btf.strings += b"s" * (MAX_NAME_LEN + 1) + b"\0"
    with pytest.raises(syscall.BpfError) as ei:
        syscall.btf_load(btf.to_bytes())
    assert "Invalid name" in ei.value.log


@pytest.mark.parametrize("which,line,col", [("s", 2, 8), ("f", 2, 523), ("c", 3, 8),
                                            ("m", 4, 5), ("p", 5, 8), ("v", 6, 9)])  # fmt: skip
def test_a_name_of_513_characters_is_an_error_at_it(which, line, col):
    names = long_names(MAX_NAME_LEN)
    names[which] += "_"
    d = diag(LONG_NAMES.format(**names))
    assert (d.code, d.span.line, d.span.col) == ("name-too-long", line, col)
    assert d.message == "this name is 513 characters long; names have at most 512"


def test_a_local_name_past_llvms_1024_limit_is_an_error_not_an_ice():
    body = "xdp fn f(ctx) {{ let {0} = 1\n let {0}b = 2\n return XDP_PASS }}\n"
    d = diag('license "GPL"\n' + body.format("x" * 1100))
    assert (d.code, d.span.line, d.span.col) == ("name-too-long", 2, 21)


# ---- numbers ----


@pytest.mark.parametrize(
    "lit,message",
    [
        ("0x_", "malformed number '0x_': no digits after 0x"),
        ("0b_", "malformed number '0b_': no digits after 0b"),
        ("0x__", "malformed number '0x__': no digits after 0x"),
        ("0b2", "malformed number '0b2'"),
        ("0x1g", "malformed number '0x1g'"),
    ],
)
@pytest.mark.parametrize("where", ["const", "array", "expr"])
def test_malformed_numbers_are_errors_at_the_literal(lit, message, where):
    text = {
        "const": f'license "GPL"\nconst A: u32 = {lit}\n' + PASS,
        "array": f'license "GPL"\nmap m: array<u32, [u8; {lit}]>(max_entries: 1)\n' + PASS,
        "expr": f'license "GPL"\nxdp fn f(ctx) {{\n    if ctx.len > {lit} {{ return XDP_DROP }}\n'
        "    return XDP_PASS\n}\n",
    }[where]
    col = {"const": 16, "array": 24, "expr": 18}[where]
    d = diag(text)
    assert (d.code, d.span.line, d.span.col, d.message) == ("bad-literal", 2 + (where == "expr"),
                                                            col, message)  # fmt: skip


def test_underscores_between_digits_keep_their_value():
    res = compile_source('license "GPL"\nconst A: u32 = 0x_ff_ff\nconst B: u32 = 1__0\n' + PASS)
    assert res.obj


# ---- source files ----


def test_bytes_that_are_not_utf8_are_an_error_at_their_line_and_column(tmp_path):
    p = tmp_path / "bad.bpfd"
    p.write_bytes(b'license "GPL"\n// caf\xc3\xa9 \xff\xfe\n' + PASS.encode())
    with pytest.raises(DiagnosticError) as ei:
        compile_file(p)
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("bad-encoding", 2, 9)  # after "// café "
    assert d.message == "byte 0xff is not UTF-8 (source files are UTF-8 text)"
    out = cli("compile", str(p), "-o", str(tmp_path / "bad.o"))
    assert out.returncode == 1
    assert f"--> {p}:2:9" in out.stderr and "        ^" in out.stderr
    assert "Traceback" not in out.stderr and "position" not in out.stderr


@pytest.mark.parametrize("path", ["/dev/zero", "fifo", "dir"])
def test_a_path_that_is_not_a_regular_file_is_refused_unread(tmp_path, path):
    if path == "fifo":
        path = str(tmp_path / "p.bpfd")
        os.mkfifo(path)  # opening it for reading would wait for a writer
    elif path == "dir":
        path = str(tmp_path)
    with pytest.raises(UsageError) as ei:
        compile_file(path)
    assert ei.value.diagnostics[0].code == "unreadable-input"
    out = cli("compile", path, "-o", str(tmp_path / "x.o"))
    assert out.returncode == 2
    assert out.stderr.startswith(f"error[unreadable-input]: cannot read {path}: ")
    assert "Traceback" not in out.stderr


def test_a_source_over_the_size_limit_is_refused_with_the_limit(tmp_path):
    p = tmp_path / "big.bpfd"
    with open(p, "wb") as f:  # sparse: the size is refused before any read
        f.truncate(MAX_SOURCE_BYTES + 1)
    with pytest.raises(UsageError) as ei:
        compile_file(p)
    (d,) = ei.value.diagnostics
    assert d.code == "source-too-large"
    assert d.message == f"{p} has 4194305 bytes; a source file has at most 4194304 (4 MiB)"
    q = tmp_path / "limit.bpfd"  # at the limit: read and compiled
    text = ('license "GPL"\n' + PASS).encode()
    q.write_bytes(text + b" " * (MAX_SOURCE_BYTES - len(text)))
    assert compile_file(q).programs == ["f"]


def test_without_debug_info_a_map_may_be_named_like_the_license_symbol():
    res = compile_source('license "GPL"\nmap _license: array<u32, u64>(max_entries: 1)\n' + PASS,
                         debug=False, check=False)  # fmt: skip
    r = ObjectReader("t.o", res.obj)
    r.read_symbols()
    assert r.symbol_offset(".maps", "_license") is not None  # the map, in .maps
    assert r.data(r.by_name["license"]).rstrip(b"\0") == b"GPL"  # and the license


# ---- nesting ----


def _prog(body: str) -> str:
    return f'license "GPL"\nmap v: array<u32>(max_entries: 1)\nxdp fn f(ctx) {{\n{body}\n    return XDP_PASS\n}}\n'


def test_deep_expressions_and_nesting_compile():
    terms = "+".join(["(ctx.len as u32)"] * 400)
    res = compile_source(_prog(f"    let x: u32 = {terms}\n    if x == 3 {{ return XDP_DROP }}"))
    assert res.programs == ["f"]
    body = "".join(f"    if ctx.len > {i} {{\n" for i in range(300))
    res = compile_source(_prog(body + "    return XDP_DROP\n" + "    }\n" * 300))
    assert res.programs == ["f"]


def test_too_deep_nesting_is_a_clean_error(tmp_path):
    body = "".join(f"if ctx.len > {i} {{\n" for i in range(6000))
    src = tmp_path / "deep.bpfd"
    src.write_text(_prog(body + "return XDP_DROP\n" + "}\n" * 6000))
    r = cli("compile", str(src), "-o", str(tmp_path / "deep.o"), timeout=300)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "error[too-deep]" in r.stderr and "help:" in r.stderr
    # the position of the first if nested 500 levels deep (an If node, then its block)
    assert f"{src}:" in r.stderr and "if ctx.len > " in r.stderr, r.stderr


# ---- byte-order mark ----


def test_utf8_bom_is_accepted():
    """A file some editors save with a UTF-8 byte-order mark compiles like one without."""
    src = 'license "GPL"\nxdp fn f(ctx) { return XDP_PASS }\n'
    assert compile_source("\ufeff" + src, "t.bpfd").obj == compile_source(src, "t.bpfd").obj
