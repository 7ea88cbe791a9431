"""Bad input: every error names file:line:col and says what to do; the CLI exits 1 with the
source line and a caret, never a traceback.  One test per error kind of issue 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

HEAD = 'license "GPL"\nmap m: hash<u32, u64>(max_entries: 16)\n'

# (name, program body after HEAD, code, line, col, words in the message, words in the hint)
CASES = [
    (
        "unknown_field",
        """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_protocol == ETH_P_IP { return XDP_DROP }
    return XDP_PASS
}""",
        "unknown-field",
        5,
        8,
        "no field `h_protocol`",
        "h_proto",
    ),
    (
        "byte_order",
        """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let port: u16 = 53
    if udp.dest == port { return XDP_DROP }
    return XDP_PASS
}""",
        "byte-order",
        8,
        8,
        "be16 (network byte order) with u16",
        "be16(x)",
    ),
    (
        "lookup_unhandled",
        """xdp fn f(ctx) {
    let v = m.lookup(1)
    return XDP_PASS
}""",
        "unhandled-missing",
        4,
        13,
        "may be missing",
        "else",
    ),
    (
        "lookup_field_unhandled",
        """struct s { a: u32 }
map n: hash<u32, s>(max_entries: 4)
xdp fn f(ctx) {
    if n.lookup(1).a == 3 { return XDP_DROP }
    return XDP_PASS
}""",
        "unhandled-missing",
        6,
        8,
        "may be missing",
        "if let",
    ),
    (
        "parse_unhandled",
        """xdp fn f(ctx) {
    let eth = parse ethernet
    return XDP_PASS
}""",
        "unhandled-missing",
        4,
        15,
        "parse ethernet",
        "else",
    ),
    (
        "bad_return_kind",
        """xdp(devmap) fn f(ctx) {
    return XDP_TX
}""",
        "bad-return",
        4,
        12,
        "`XDP_TX` is not a valid return value for a xdp(devmap)",
        "XDP_PASS",
    ),
    (
        "cpumap_returns_xdp_tx",
        """xdp(cpumap) fn f(ctx) {
    return XDP_TX
}""",
        "bad-return",
        4,
        12,
        "`XDP_TX` is not a valid return value for a xdp(cpumap)",
        "XDP_PASS",
    ),
    (
        "bad_return_value",
        """xdp fn f(ctx) {
    return 7
}""",
        "bad-return",
        4,
        12,
        "`7` is not a valid return value",
        "XDP_ABORTED",
    ),
    (
        "bad_return_other_kind",
        """xdp fn f(ctx) {
    return SK_PASS
}""",
        "bad-return",
        4,
        12,
        "`SK_PASS`",
        "XDP_",
    ),
    (
        "msg_redirect_from_xdp",
        """struct k { a: u32 }
map socks: sockhash<k, u64>(max_entries: 4)
xdp fn f(ctx) {
    return msg_redirect_hash(socks, k(a: 1), BPF_F_INGRESS)
}""",
        "helper-not-allowed",
        6,
        12,
        "cannot be called from a xdp program",
        "sk_msg",
    ),
    (
        "sockhash_key_type",
        """struct k { a: u32 }
map socks: sockhash<k, u64>(max_entries: 4)
sk_msg fn f(msg) {
    return msg_redirect_hash(socks, msg.local_port, BPF_F_INGRESS)
}""",
        "key-type",
        6,
        37,
        "key of type u16 does not match the key type k",
        "k(field",
    ),
    (
        "msg_data_without_parse",
        """sk_msg fn f(msg) {
    if msg.data == 0 { return SK_DROP }
    return SK_PASS
}""",
        "raw-data",
        4,
        8,
        "bounds-checked `parse`",
        "parse byte",
    ),
    (
        "xsk_socket_field_b10",
        """map xsks: xskmap(max_entries: 4)
xdp fn f(ctx) {
    let s = xsks.lookup(0) else { return XDP_PASS }
    if s.ifindex == 1 { return XDP_DROP }
    return XDP_PASS
}""",
        "unknown-field",
        6,
        8,
        "`bpf_xdp_sock` has no field `ifindex`",
        "queue_id",
    ),
    (
        "unbounded_loop",
        """xdp fn f(ctx) {
    let n: u32 = 0
    while n < 10 { n += 1 }
    return XDP_PASS
}""",
        "unbounded-loop",
        5,
        5,
        "unbounded loop",
        "for i in 0..N",
    ),
    (
        "loop_bound_not_constant",
        """xdp fn f(ctx) {
    for i in 0..ctx.ingress_ifindex { }
    return XDP_PASS
}""",
        "unbounded-loop",
        4,
        17,
        "not a compile-time constant",
        "constants",
    ),
    (
        "unknown_map_kind",
        """map q: hashmap<u32, u64>(max_entries: 16)
xdp fn f(ctx) { return XDP_PASS }""",
        "unknown-map-kind",
        3,
        8,
        "unknown map kind `hashmap`",
        "`hash`",
    ),
    (
        "key_type",
        """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    m[eth.h_proto] += 1
    return XDP_PASS
}""",
        "key-type",
        5,
        7,
        "key of type be16 does not match the key type u32 of map `m`",
        "as u32",
    ),
    (
        "key_type_struct",
        """struct k { a: u32, b: u16 }
map h: hash<k, u64>(max_entries: 4)
xdp fn f(ctx) {
    h.update(5, 1)
    return XDP_PASS
}""",
        "key-type",
        6,
        14,
        "does not match the key type k",
        "k(field: value",
    ),
    (
        "syntax",
        """xdp fn f(ctx) {
    let x = (1 + 2
    return XDP_PASS
}""",
        "syntax",
        5,
        5,
        "unexpected 'return'",
        "')'",
    ),
    (
        "stale_header_b06",
        """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if adjust_head(4) != 0 { return XDP_DROP }
    eth.h_proto = ETH_P_IP
    return XDP_PASS
}""",
        "stale-header",
        6,
        5,
        "resized at line 5",
        "parse the header again",
    ),
    (
        "redirect_into_hash",
        """xdp fn f(ctx) {
    return redirect_map(m, 0, XDP_PASS)
}""",
        "redirect-map-kind",
        4,
        25,
        "cannot redirect into a hash map",
        "devmap",
    ),
    (
        "redirect_missing_fallback",
        """map tx: devmap(max_entries: 4)
xdp fn f(ctx) {
    return redirect_map(tx, 0)
}""",
        "arg-count",
        5,
        12,
        "fallback action is required",
        "XDP_PASS",
    ),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_error_position_and_message(case):
    _name, body, code, line, col, msg, hint = case
    with pytest.raises(DiagnosticError) as ei:
        compile_source(HEAD + body, "bad.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.file, d.span.line, d.span.col) == (code, "bad.bpfd", line, col), d
    assert msg in d.message
    assert any(hint in h for h in d.hints), d.hints


def test_errors_are_collected_not_cascaded():
    src = (
        HEAD
        + """xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_protocol == ETH_P_IP { return XDP_DROP }
    while true { }
    return 9
}"""
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    assert [d.code for d in ei.value.diagnostics] == [
        "unknown-field",
        "unbounded-loop",
        "bad-return",
    ]


def test_cli_error_shows_source_caret_and_exits_1(tmp_path):
    src = tmp_path / "bad.bpfd"
    src.write_text(HEAD + CASES[1][1])
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(src), "-o", str(tmp_path / "bad.o")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 1
    assert "Traceback" not in r.stderr
    assert f"{src}:8:8" in r.stderr
    assert "    if udp.dest == port { return XDP_DROP }" in r.stderr
    assert "       ^^^^^^^^^^^^^^^^" in r.stderr
    assert "help:" in r.stderr
    assert not (tmp_path / "bad.o").exists()


def test_cli_missing_file_is_usage_error(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "compile", str(tmp_path / "nope.bpfd")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and "cannot read" in r.stderr and "Traceback" not in r.stderr
