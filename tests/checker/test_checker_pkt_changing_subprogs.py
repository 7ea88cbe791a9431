"""A subprogram that changes packet data invalidates its caller's packet pointers (kernel
6.13+ ``changes_pkt_data``, Linux 6.18 as here): a global function that calls a resizing
helper (bpf_xdp_adjust_head/_tail/_meta, ...), a pkt-changing kfunc or bpf_tail_call, or
calls such a function, clears every packet pointer of its caller at the call; a static one
at its return.  The checker refuses a later read through an old pointer as the kernel does
("R6 invalid mem access 'scalar'"), naming the call and the helper, and accepts what the
kernel accepts (pointers re-read after the call, a tail call in the program itself).

bpfdsl source cannot make such a subprogram (resizing and tail calls are refused in every
fn), which the last tests pin down."""

from __future__ import annotations

import pytest
from support.objbuild import build_text

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

HEAD = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} jt SEC(".maps");
char LICENSE[] SEC("license") = "GPL";
"""

# {leaf}: the body of leaf(ctx, n); {call}: how prog calls it; {after}: what it does next
PROG = r"""
{linkage} __noinline int leaf(struct xdp_md *ctx, int n)
{{
{leaf}
}}
__noinline int mid(struct xdp_md *ctx, int n)
{{
	return leaf(ctx, n) + 1;
}}
SEC("xdp") int prog(struct xdp_md *ctx)
{{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	int r = 0;

	if ((void *)(eth + 1) > end)
		return XDP_PASS;
{call}
{after}
	if (eth->h_proto == bpf_htons(ETH_P_IP))
		return XDP_DROP;
	return r > 5 ? XDP_PASS : XDP_TX;
}}
"""

REREAD = """\
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > end)
		return XDP_PASS;"""

ADJUST = "\treturn bpf_xdp_adjust_head(ctx, n);"
CALL_LEAF = "\tr = leaf(ctx, ctx->rx_queue_index);"

CASES = {
    # name: (linkage, leaf body, call, after, kernel verdict, what the checker names)
    "global-adjust-head": ("", ADJUST, CALL_LEAF, "", False, "global function leaf()"),
    "through-two-globals": ("", ADJUST, "\tr = mid(ctx, ctx->rx_queue_index);", "", False,
                            "calls leaf()"),
    "adjust-tail-on-a-branch-never-taken": (
        "", "\tif (n == 12345)\n\t\treturn bpf_xdp_adjust_tail(ctx, -4);\n\treturn n + 1;",
        CALL_LEAF, "", False, "bpf_xdp_adjust_tail"),
    "global-tail-call": ("", "\tbpf_tail_call(ctx, &jt, 0);\n\treturn n;", CALL_LEAF, "",
                         False, "bpf_tail_call"),
    # the path where the tail call succeeds leaves leaf() at the call (kernel 6.18)
    "static-tail-call": ("static", "\tbpf_tail_call(ctx, &jt, 0);\n\treturn n;", CALL_LEAF,
                         "", False, "bpf_tail_call"),
    "static-adjust-head": ("static", ADJUST, CALL_LEAF, "", False, "bpf_xdp_adjust_head"),
    "global-that-does-not-resize": ("", "\treturn n + 2;", CALL_LEAF, "", True, ""),
    "pointers-read-again-after-the-call": ("", ADJUST, CALL_LEAF, REREAD, True, ""),
    "tail-call-in-the-program-itself": ("", "\treturn n + 2;",
                                        "\tbpf_tail_call(ctx, &jt, 0);", "", True, ""),
}  # fmt: skip


def _obj(tmp_path, name: str):
    linkage, leaf, call, after, _ok, _why = CASES[name]
    text = HEAD + PROG.format(linkage=linkage, leaf=leaf, call=call, after=after)
    return build_text(text, tmp_path, name.replace("-", "_"))


@pytest.mark.parametrize("name", list(CASES))
def test_checker_verdict_and_reason(tmp_path, name):
    res = check_object(read_object(_obj(tmp_path, name).read_bytes()))
    ok, why = CASES[name][4], CASES[name][5]
    errs = [e for p in res.programs for e in p.errors]
    if ok:
        assert res.ok, [e.message for e in errs]
        return
    assert errs, "the checker accepted a read through an invalidated packet pointer"
    e = errs[0]
    assert "invalid mem access 'scalar'" in e.message
    text = " ".join([e.message, e.explain])
    assert "packet pointer invalidated" in text and why in text, text
    assert e.source is not None and "eth->h_proto" in (e.source.text or "")  # the read


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(CASES))
def test_checker_and_kernel_agree(tmp_path, name):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    spec = read_object(_obj(tmp_path, name).read_bytes())
    checker_ok = check_object(spec).ok
    try:
        load_collection(spec).close()
        kernel_ok, log = True, ""
    except VerifierError as e:
        kernel_ok, log = False, e.log
    assert kernel_ok == CASES[name][4], log
    assert checker_ok == kernel_ok
    if not kernel_ok:
        assert "invalid mem access 'scalar'" in log


# ---- bpfdsl source ----------------------------------------------------------------------

VIEW_AFTER_CALL = """license "GPL"
map hits: array<u32, u64>(max_entries: 1)
global fn count(n: u32) -> i32 {
    hits[0] += n as u64
    return 0
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    count(1)
    if eth.h_proto == ETH_P_IP { return XDP_DROP }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_a_header_view_used_after_a_global_fn_call_loads():
    """A global fn bpfdsl compiles never changes packet data: views stay valid after the
    call, for the checker (run by compile) and for the kernel."""
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(compile_source(VIEW_AFTER_CALL, "view.bpfd").obj)
    assert check_object(spec).ok
    load_collection(spec).close()


@pytest.mark.parametrize(
    "body,code",
    [
        ("adjust_head(-4)", "resize-in-fn"),
        ("adjust_tail(-4)", "resize-in-fn"),
        ("adjust_meta(-4)", "resize-in-fn"),
        ("tail_call(jt, 0) else { return 1 }", "tail-call-in-fn"),
    ],
)
@pytest.mark.parametrize("modifier", ["global", "noinline", ""])
def test_no_fn_can_change_packet_data(body, code, modifier):
    src = f"""license "GPL"
map jt: prog_array(max_entries: 1)
{modifier} fn g(n: u32) -> i32 {{
    {body}
    return 0
}}
xdp fn f(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    g(1)
    if eth.h_proto == ETH_P_IP {{ return XDP_DROP }}
    return XDP_PASS
}}
"""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "g.bpfd")
    codes = [d.code for d in ei.value.diagnostics]
    assert code in codes, codes
    d = next(d for d in ei.value.diagnostics if d.code == code)
    assert d.span is not None and d.span.line == 4


TRANSITIVE = """license "GPL"
global fn shrink(n: u32) -> i32 {
    adjust_tail(-4)
    return 0
}
noinline fn mid(n: u32) -> u32 {
    return shrink(n) as u32
}
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    mid(1)
    if eth.h_proto == ETH_P_IP { return XDP_DROP }
    return XDP_PASS
}
"""


def test_a_view_used_after_a_call_of_a_resizing_fn_is_stale_too():
    """Beside the refusal of the resize in the fn, the caller's view is invalid after the
    call (through two calls), as after adjust_tail in the program itself."""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(TRANSITIVE, "t.bpfd")
    by_code = {d.code: d for d in ei.value.diagnostics}
    assert "resize-in-fn" in by_code
    d = by_code["stale-header"]
    assert (d.span.line, d.span.col) == (12, 8)
    assert "resized at line 11" in d.message
