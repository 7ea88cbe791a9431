"""Packet bytes beyond headers: ``load T at cursor + N`` / ``load T at N`` read the bytes of
T from the parse cursor or from the packet's first byte, ``store T at ... = v else {...}``
writes them; a short packet takes the ``else`` as soon as *those* bytes are missing (a
2-byte read needs 2 bytes, not a whole header).  Byte strings ("GET ", "\\x00\\xff") compare
with byte arrays read from the packet or from header fields.  Run on the kernel and the
interpreter; offsets beyond what the verifier allows are errors at their place."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.l2 import Ether

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

ETH = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:02")


def obj(body: str, decls: str = "") -> bytes:
    src = 'license "GPL"\nmap out: array<u32, u64>(max_entries: 8)\n' + decls
    return compile_source(src + "xdp fn f(ctx) {\n" + body + "\n}\n", "bytes.bpfd").obj


HTTP = """
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_TCP { return XDP_PASS }
    let tcp = parse tcp else { return XDP_PASS }
    let method = load [u8; 4] at cursor else { return XDP_ABORTED }
    if method == "GET " { return XDP_DROP }
    if method == "POST" {
        let next = load u8 at cursor + 4 else { return XDP_ABORTED }
        out[0] = next as u64
        return XDP_TX
    }
    return XDP_PASS
"""


def tcp_with(payload: bytes) -> bytes:
    return bytes(ETH / IP() / TCP(dport=80, flags="PA") / payload)


@pytest.mark.parametrize(
    "payload,verdict",
    [
        (b"GET /index.html", "XDP_DROP"),
        (b"GET ", "XDP_DROP"),  # exactly the 4 bytes: enough
        (b"GET", "XDP_ABORTED"),  # 3 bytes: the 4-byte load is missing
        (b"POST /", "XDP_TX"),
        (b"POST", "XDP_ABORTED"),  # the byte after POST is missing
        (b"HEAD / HTTP/1.1", "XDP_PASS"),
        (b"get /", "XDP_PASS"),
    ],
    ids=["get", "get-exact", "short", "post", "post-short", "head", "lowercase"],
)
def test_payload_matching(bpf_program, payload: bytes, verdict: str) -> None:
    prog = bpf_program(obj(HTTP))
    assert prog.run(tcp_with(payload)).verdict == verdict
    assert prog.maps["out"].total(0) == (ord(" ") if verdict == "XDP_TX" else 0)


ABSOLUTE = """
    let et = load be16 at 12 else { return XDP_ABORTED }
    out[0] = host(et) as u64
    let ttl = load u8 at 22 else { return XDP_DROP }
    out[1] = ttl as u64
    let dst = load mac_addr at 0 else { return XDP_DROP }
    if dst == 02:00:00:00:00:02 { out[2] = 1 }
    let word = load be32 at cursor + 26 else { return XDP_DROP }   // cursor: the packet start
    out[3] = host(word) as u64
    return XDP_PASS
"""


def test_absolute_and_cursor_offsets(bpf_program) -> None:
    frame = bytes(ETH / IP(src="192.0.2.7", ttl=42) / UDP())
    prog = bpf_program(obj(ABSOLUTE))
    assert prog.run(frame).verdict == "XDP_PASS"
    assert [prog.maps["out"].total(i) for i in range(4)] == [0x0800, 42, 1, 0xC0000207]


NEEDS = """
    let w = load be16 at 30 else { return XDP_ABORTED }
    out[0] = host(w) as u64
    let b = load u8 at 40 else { return XDP_DROP }
    return XDP_PASS
"""


@pytest.mark.parametrize(
    "length,verdict", [(31, "XDP_ABORTED"), (32, "XDP_DROP"), (40, "XDP_DROP"), (41, "XDP_PASS")]
)
def test_a_load_needs_only_its_bytes(bpf_program, length: int, verdict: str) -> None:
    """`load be16 at 30` needs bytes 30 and 31, no more; `load u8 at 40` needs 41 bytes."""
    frame = bytes(ETH / IP(dst="10.0.0.2") / UDP(sport=0x1234))[:length]
    prog = bpf_program(obj(NEEDS))
    assert prog.run(frame).verdict == verdict
    assert prog.maps["out"].total(0) == (0x0A00 if length >= 32 else 0)  # daddr: 10.0


STORE = """
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let n = load u8 at cursor else { return XDP_PASS }
    store [u8; 3] at cursor + 1 = "xyz" else { return XDP_ABORTED }
    store be16 at cursor + (n as u64) = 0xbeef else { out[0] = 1 }
    udp.check = 0
    return XDP_TX
"""


@pytest.mark.parametrize(
    "payload,out,flag",
    [
        (b"\x05abcdefgh", b"\x05xyzd\xbe\xefgh", 0),
        (b"\x04abc", b"\x04xyz", 1),  # the be16 at cursor + 4 is past the end: else, no write
        (b"\x07abcdefgh", b"\x07xyzdef\xbe\xef", 0),  # a run-time offset, exactly at the end
        (b"\x01ab", None, 0),  # "xyz" needs 3 bytes after the first: the store's else
    ],
    ids=["middle", "past-end", "at-end", "short"],
)
def test_stores(bpf_program, payload: bytes, out: bytes | None, flag: int) -> None:
    frame = bytes(ETH / IP() / UDP(sport=1, dport=2) / payload)
    prog = bpf_program(obj(STORE))
    r = prog.run(frame)
    if out is None:
        assert (r.verdict, r.data_out) == ("XDP_ABORTED", frame)
        return
    assert r.verdict == "XDP_TX"
    assert r.data_out[: -len(payload)][:40] == frame[:40]  # the headers: as sent
    assert r.data_out[42:] == out
    assert prog.maps["out"].total(0) == flag


def test_stores_warn_about_the_l4_checksum() -> None:
    src = 'license "GPL"\nmap out: array<u32, u64>(max_entries: 8)\nxdp fn f(ctx) {\n'
    src += STORE.replace("    udp.check = 0\n", "") + "\n}\n"
    res = compile_source(src, "w.bpfd")
    (w,) = [w for w in res.warnings if w.code == "payload-checksum"][:1]
    assert (w.span.line, w.span.col) == (9, 5)


@pytest.mark.parametrize(
    "body,code,line,col",
    [
        ("    let x = load u8 at 70000 else { return XDP_PASS }", "out-of-range", 4, 24),
        ("    let x = load ethernet at 0 else { return XDP_PASS }", "load-type", 4, 18),
        ("    let x = load [u8; 300] at 0 else { return XDP_PASS }", "load-type", 4, 18),
        ("    let x = load u8 at 0", "unhandled-missing", 4, 13),
        ('    store [u8; 2] at 0 = "abc" else { return XDP_PASS }', "type-mismatch", 4, 26),
        (
            '    let x = load [u8; 2] at 0 else { return XDP_PASS }\n    if x == "abc" { return XDP_DROP }',
            "type-mismatch",
            5,
            8,
        ),
        ('    let s = "\\q"', "bad-literal", 4, 13),
    ],
    ids=["offset", "header-type", "too-big", "unhandled", "store-size", "compare-size", "escape"],
)
def test_byte_errors(body: str, code: str, line: int, col: int) -> None:
    src = (
        'license "GPL"\nmap out: array<u32, u64>(max_entries: 8)\nxdp fn f(ctx) {\n'
        + body
        + "\n    return XDP_PASS\n}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "e.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), d.render(src)


def test_sock_ops_has_no_packet_bytes() -> None:
    src = 'license "GPL"\nsock_ops fn s(skops) {\n    let b = load u8 at 0 else { return 1 }\n    return 1\n}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "s.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("parse-no-data", 3, 13)


def test_header_and_cursor_stay_names_load_store_at_are_keywords() -> None:
    ok = (
        'license "GPL"\nxdp fn f(ctx) {\n    let header = parse ethernet else { return XDP_PASS }\n'
        "    let cursor: u32 = 1\n    return XDP_PASS\n}\n"
    )
    assert compile_source(ok, "k.bpfd").programs == ["f"]
    bad = 'license "GPL"\nxdp fn store(ctx) { return XDP_PASS }\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(bad, "k.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("syntax", 2, 8)
    assert d.hints == ["`store` is a keyword of the language: pick another name"]
    shadow = ok.replace(
        "    return XDP_PASS",
        "    let b = load u8 at cursor + 1 else { return XDP_PASS }\n    return XDP_PASS",
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(shadow, "k.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == ("ambiguous-name", 5, 13)
