"""``loop`` callbacks that read the packet (issue 24): a plain fn that parses, given to
``loop``, walks TCP options (RFC 9293 3.2) and DNS labels (RFC 1035 3.1) one per call.
bpf_loop passes its callback the index and the callback context only, so codegen makes
the loop's subprogram, which takes the context and the cursor's offset through a frame on
the caller's stack (as C passes ``struct xdp_md *`` in its callback context).  The kernel
accepts both walks, the verdicts on real packets are right on the kernel
(BPF_PROG_TEST_RUN) and the interpreter, the checker accepts them, and the kernel's
processed count is at most that of the C twin in tests/data/loop_parse (clang-19,
``bpf_loop`` with the same callback context) built in the same run."""

from __future__ import annotations

import re

import pytest
from support.objbuild import compile_c
from support.parse_walks import CASES
from support.paths import DATA
from support.progrun import kernel_processed

from bpfdsl.abi.btf.core import BTF_FUNC_STATIC, Kind
from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

DIR = DATA / "loop_parse"


@pytest.mark.parametrize("name", sorted(CASES))
def test_loop_parser_verdicts(name, bpf_program):
    obj = compile_source((DIR / f"{name}.bpfd").read_text(), f"{name}.bpfd").obj
    p = bpf_program(obj)
    got = [p.run(bytes(f)).retval for f, _ in CASES[name]()]
    assert got == [v for _, v in CASES[name]()]


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["tcp_mss", "dns_qname"])  # 6.18: 836 vs 1508, 184 vs 187
def test_loop_parser_is_accepted_and_processed_at_most_clangs(name, tmp_path):
    src = (DIR / f"{name}.bpfd").read_text()
    ours = read_object(compile_source(src, f"{name}.bpfd").obj)
    clang = read_object(compile_c(DIR / f"{name}.c", tmp_path / f"{name}.o"))
    k_ours, k_clang = kernel_processed(ours), kernel_processed(clang)
    (checked,) = check_object(ours).programs
    assert checked.ok, checked
    # the checker widens a callback's changed state at once (docs: Loops with a run-time
    # bound), the kernel visits it again until nothing changes: never more than it
    assert checked.insns_processed <= k_ours
    assert k_ours <= k_clang, f"bpfdsl {k_ours} > clang {k_clang}"


def _compile_error(src: str) -> str:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "l.bpfd")
    return ei.value.render()


def test_noinline_loop_callback_that_parses_is_a_located_error():
    text = _compile_error(
        'license "GPL"\n'
        "struct s { n: u32 }\n"
        "noinline fn step(i: u32, st: s) -> bool {\n"
        "    let b = parse byte else { return true }\n    return false\n}\n"
        "xdp fn f(ctx) {\n    let st = s(n: 0)\n    loop(4, step, st)\n    return XDP_PASS\n}\n"
    )
    assert "loop-callback" in text and "l.bpfd:9:13" in text
    assert "declare it `fn step`" in text


def test_loop_callback_that_parses_needs_packet_data():
    text = _compile_error(
        'license "GPL"\n'
        "fn step(i: u32) -> bool {\n    let b = parse byte else { return true }\n"
        "    return false\n}\n"
        "sock_ops fn f(ctx) {\n    loop(4, step)\n    return 1\n}\n"
    )
    assert "parse-no-data" in text and "l.bpfd:7:5" in text


def test_the_callers_cursor_stays_where_it_was(bpf_program):
    """The callback's cursor starts at the caller's and moves from call to call; the
    caller's stays (as after a ``noinline`` fn): here the walk reads bytes 0..3 and the
    caller's next ``parse`` still reads byte 0."""
    src = (
        'license "GPL"\n'
        "struct acc { sum: u32 }\n"
        "fn add(i: u32, a: acc) -> bool {\n"
        "    let b = parse byte else { return true }\n"
        "    a.sum += b.value as u32\n    return false\n}\n"
        "xdp fn f(ctx) {\n"
        "    let a = acc(sum: 0)\n    loop(4, add, a)\n"
        "    let first = parse byte else { return XDP_ABORTED }\n"
        "    if a.sum == 10 && first.value == 1 { return XDP_DROP }\n"
        "    return XDP_PASS\n}\n"
    )
    p = bpf_program(compile_source(src, "c.bpfd").obj)
    assert p.run(bytes([1, 2, 3, 4]) + bytes(60)).retval == 1  # XDP_DROP
    assert p.run(bytes([1, 2, 3, 5]) + bytes(60)).retval == 2


def test_the_loops_subprogram_counts_in_the_call_chains_stack():
    """The loop's subprogram holds the packet callback's variables: its frame counts in the
    chain from the program (kernel check_max_stack_depth), a located ``stack-limit``."""
    text = _compile_error(
        'license "GPL"\n'
        "struct big { a: [u64; 40] }\nstruct acc { n: u32 }\n"
        "map m: hash<big, u32>(max_entries: 4)\n"
        "fn step(i: u32, st: acc) -> bool {\n"
        "    let b = parse byte else { return true }\n"
        "    let x = big()\n    x.a[0] = b.value as u64\n"
        "    let v = m.lookup(x) else { return false }\n    st.n += v\n    return false\n}\n"
        "xdp fn f(ctx) {\n    let y = big()\n    y.a[3] = ctx.len as u64\n"
        "    let s = acc(n: 0)\n    let w = m.lookup(y) else { return XDP_PASS }\n"
        "    s.n = w\n    loop(4, step, s)\n    return XDP_PASS\n}\n"
    )
    assert "stack-limit" in text and "f -> step" in text and "l.bpfd:19:5" in text
    assert "`step` 328 bytes (`x` 320)" in text


@pytest.mark.kernel
def test_an_unbounded_callback_offset_is_refused_by_both(tmp_path):
    """Without the bound on the offset read back from the state (the loop subprogram's
    LOOP_CURSOR_MAX), the callback's packet pointer has no range: the kernel refuses the
    C twin, and the checker refuses it at the same instruction."""
    from bpfdsl.runtime.loader import load_collection

    c = (DIR / "dns_qname.c").read_text()
    bound = "    if (off > 0x7fff)\n        return 1;\n"
    assert bound in c
    (tmp_path / "unbounded.c").write_text(c.replace(bound, ""))
    spec = read_object(compile_c(tmp_path / "unbounded.c", tmp_path / "unbounded.o"))
    (checked,) = check_object(spec).programs
    assert checked.status == "rejected" and checked.errors[0].code == "pkt-bounds"
    with pytest.raises(DiagnosticError) as ei:
        load_collection(spec, log_level=1, log_size=1 << 22).close()
    insn = int(re.search(r"outside of the packet \(insn (\d+)\)", str(ei.value)).group(1))
    assert checked.errors[0].slot == insn


def test_the_loops_subprogram_is_a_static_btf_func_of_bpf_loops_callback_shape():
    """``option__loop(i, frame)``: BTF linkage static (the kernel refuses a global
    callback), the plain fn ``option`` inlined into it (no FUNC of its own)."""
    obj = compile_source((DIR / "tcp_mss.bpfd").read_text(), "tcp_mss.bpfd").obj
    btf = read_object(obj).btf
    funcs = {t.name: t for t in btf.types if t.kind == Kind.FUNC}
    assert "option" not in funcs
    fn = funcs["option__loop"]
    assert fn.linkage == BTF_FUNC_STATIC
    assert [m.name for m in btf[fn.type].members] == ["i", "frame"]
