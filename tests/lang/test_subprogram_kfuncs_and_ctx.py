"""Kfuncs and context builtins in subprograms (issue 24), the front end's part: a fn of
any kind may call the XDP metadata kfuncs, and the program that calls it (directly or
through others, or through ``loop``) must be device-bound; a ``loop`` callback that reads
the packet may call the builtins that take the context (its subprogram reads the context
back from the loop's frame), on the kernel and the interpreter alike; other callbacks get
a located error.  The kernel side of the kfuncs is tests/runtime/test_kfuncs_in_subprograms.py."""

from __future__ import annotations

import pytest
from support.progrun import XDP_DROP, XDP_PASS, kernel_processed, udp4

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

HASH_FN = (
    "    let hash: u32 = 0\n    let rss_type: u32 = 0\n    let err = rx_hash(hash, rss_type)\n"
)


def _error(src: str):
    with pytest.raises(DiagnosticError) as ei:
        compile_source('license "GPL"\n' + src, "k.bpfd")
    return ei.value


ERRORS = [
    (
        "noinline_from_a_plain_xdp_program",
        "noinline fn h() -> i32 {\n" + HASH_FN + "    return err\n}\n"
        "xdp fn f(ctx) {\n    h()\n    return XDP_PASS\n}\n",
        "kfunc-not-dev-bound", 9, 5, "`rx_hash` (through `h`) reads the RX descriptor",
        "xdp(dev_bound) fn",
    ),
    (
        "global_through_a_plain_fn",
        "global fn h() -> i32 {\n" + HASH_FN + "    return err\n}\n"
        "fn via() -> i32 { return h() }\n"
        "xdp fn f(ctx) {\n    via()\n    return XDP_PASS\n}\n",
        "kfunc-not-dev-bound", 10, 5, "(through `via`)", "xdp(dev_bound) fn",
    ),
    (
        "packet_callback_in_a_plain_xdp_program",
        "struct s { n: u32 }\n"
        "fn cb(i: u32, st: s) -> bool {\n    let b = parse byte else { return true }\n"
        + HASH_FN + "    return false\n}\n"
        "xdp fn f(ctx) {\n    let st = s(n: 0)\n    loop(2, cb, st)\n    return XDP_PASS\n}\n",
        "kfunc-not-dev-bound", 12, 5, "(through `cb`)", "xdp(dev_bound) fn",
    ),
    (
        "callback_without_the_packet",
        "fn cb(i: u32) -> bool {\n" + HASH_FN + "    return false\n}\n"
        "xdp(dev_bound) fn f(ctx) {\n    loop(2, cb)\n    return XDP_PASS\n}\n",
        "loop-callback", 9, 13, "`rx_hash` needs the program's context, which loop callback "
        "`cb` does not have", "a callback that reads the packet",
    ),
]  # fmt: skip


@pytest.mark.parametrize("name,src,code,line,col,msg,hint", ERRORS, ids=[e[0] for e in ERRORS])
def test_kfunc_in_a_subprogram_misuse_is_a_located_error(name, src, code, line, col, msg, hint):
    err = _error(src)
    d = next(d for d in err.diagnostics if d.code == code)
    assert (d.span.line, d.span.col) == (line, col), d.render(err.source)
    assert msg in d.message and any(hint in h for h in d.hints), d.render(err.source)


PERF_CB = """license "GPL"
struct rec { first: u8, second: u8 }
map samples: perf_event_array<rec>()
struct walk { prev: u8, sent: u32 }

fn pair(i: u32, w: walk) -> bool {          // reads the packet: it has the context
    let b = parse byte else { return true }
    if i > 0 && b.value == w.prev {          // two equal bytes in a row: report them
        perf_event_output(samples, rec(first: w.prev, second: b.value))
        w.sent += 1
    }
    w.prev = b.value
    return false
}

xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let w = walk(prev: 0, sent: 0)
    loop(8, pair, w)
    if w.sent > 1 { return XDP_DROP }
    return XDP_PASS
}
"""


def _pairs(frame: bytes) -> list[dict[str, int]]:
    """What ``pair`` reports: equal neighbours among the 8 bytes after Ethernet."""
    b = frame[14:22]
    return [{"first": x, "second": y} for x, y in zip(b, b[1:], strict=False) if x == y]


def test_a_packet_loop_callback_calls_a_context_builtin(bpf_program):
    p = bpf_program(compile_source(PERF_CB, "cb.bpfd").obj)
    head = bytes(udp4())[:14]
    for frame in (
        bytes(udp4()),
        head + bytes([7, 7, 7, 1, 2, 3, 3, 9]),
        head + bytes([1, 2, 3, 4, 5, 6, 7, 7]),
        head + bytes([5, 5, 1]),
    ):
        want = _pairs(frame)
        assert p.run(frame).retval == (XDP_DROP if len(want) > 1 else XDP_PASS)
        assert [e.value for e in p.events("samples")] == want  # fmt: skip


@pytest.mark.kernel
def test_a_packet_loop_callback_with_a_context_builtin_is_checked_as_the_kernel_does():
    spec = read_object(compile_source(PERF_CB, "cb.bpfd").obj)
    (checked,) = check_object(spec).programs
    assert checked.ok, checked
    assert checked.insns_processed <= kernel_processed(spec)
