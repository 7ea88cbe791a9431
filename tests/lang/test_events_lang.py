"""Events to user space in the language: ringbuf and perf_event_array maps, the ringbuf
reservation rule (a located error for a reservation not submitted or discarded on every
path), the record types in BTF, and the records a program sends, on both engines (the
interpreter and BPF_PROG_TEST_RUN read back through the ring's mmap / the perf rings)."""

from __future__ import annotations

import errno

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

from bpfdsl.abi.btf.core import Kind
from bpfdsl.abi.btf.records import RECORDS_SECTION, RECORDS_VAR, record_type
from bpfdsl.abi.map_types import MapType
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

HEAD = """license "GPL"
struct event { len: u32 }
map events: ringbuf<event>(max_entries: 4096)
xdp fn f(ctx) {
"""  # the body starts on line 5


def errors(body: str) -> list:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(HEAD + body + "\n}\n", "ev.bpfd")
    return ei.value.diagnostics


# (body from line 5, [(code, line, col, words of the message)])
RULE = [
    (  # submitted on one branch only: the return after the if leaves it open
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    if ctx.len > 100 { ringbuf_submit(r) }\n"
        "    return XDP_PASS",
        [("unreleased-reservation", 7, 5, "leaves reservation `r` (reserved at line 5) "
          "submitted or discarded on some paths only")],
    ),
    (  # never ended
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    r.len = 1\n"
        "    return XDP_DROP",
        [("unreleased-reservation", 7, 5, "`return` leaves reservation `r` (reserved at "
          "line 5) open")],
    ),
    (  # used after submit
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    ringbuf_submit(r)\n"
        "    r.len = 2\n"
        "    return XDP_PASS",
        [("reservation-use", 7, 5, "used after ringbuf_submit (line 6)")],
    ),
    (  # ended twice
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    ringbuf_submit(r)\n"
        "    ringbuf_discard(r)\n"
        "    return XDP_PASS",
        [("reservation-use", 7, 5, "`ringbuf_discard` of reservation `r`, which "
          "ringbuf_submit at line 6 ended already")],
    ),
    (  # a loop would submit it again on its second iteration
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    for i in 0..4 { ringbuf_submit(r) }\n"
        "    return XDP_PASS",
        [("reservation-use", 6, 21, "ended already on some paths"),
         ("unreleased-reservation", 7, 5, "on some paths only")],
    ),
    (  # continue leaves the body's reservation open
        "    for i in 0..4 {\n"
        "        let r = ringbuf_reserve(events) else { break }\n"
        "        if i == 2 { continue }\n"
        "        ringbuf_submit(r)\n"
        "    }\n"
        "    return XDP_PASS",
        [("unreleased-reservation", 7, 21, "`continue` leaves reservation `r` (reserved at "
          "line 6) open")],
    ),
    (  # if let: open at the end of its block; a copy would escape the rule
        "    if let r = ringbuf_reserve(events) {\n"
        "        let copy = r\n"
        "    }\n"
        "    return XDP_PASS",
        [("reservation-use", 6, 20, "can only be used through its fields"),
         ("unreleased-reservation", 7, 5, "is open at the end of its block")],
    ),
    (  # a match arm that forgets it
        "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
        "    match ctx.rx_queue_index {\n"
        "        0 => ringbuf_submit(r),\n"
        "        1 => ringbuf_discard(r),\n"
        "        _ => {}\n"
        "    }\n"
        "    return XDP_PASS",
        [("unreleased-reservation", 11, 5, "on some paths only")],
    ),
]  # fmt: skip


@pytest.mark.parametrize("body,want", RULE, ids=[str(i) for i in range(len(RULE))])
def test_reservation_rule_is_a_located_error(body, want):
    got = [(d.code, d.span.line, d.span.col) for d in errors(body)]
    assert got == [w[:3] for w in want]
    for d, w in zip(errors(body), want, strict=True):
        assert w[3] in d.message, d.message
        assert d.hints  # what to do


GOOD = [
    # every path ends it: submit, discard, and the else of the reserve that failed
    "    let r = ringbuf_reserve(events) else { return XDP_PASS }\n"
    "    r.len = ctx.len as u32\n"
    "    if r.len > 100 {\n"
    "        ringbuf_discard(r)\n"
    "        return XDP_DROP\n"
    "    }\n"
    "    r.len += 1\n"
    "    ringbuf_submit(r, BPF_RB_NO_WAKEUP)\n"
    "    return XDP_PASS",
    # reserved and ended inside a loop body, break after the end
    "    for i in 0..4 {\n"
    "        let r = ringbuf_reserve(events) else { break }\n"
    "        r.len = i\n"
    "        ringbuf_submit(r)\n"
    "        if i == 2 { break }\n"
    "    }\n"
    "    if let r = ringbuf_reserve(events) { ringbuf_discard(r) }\n"
    "    return XDP_PASS",
]


@pytest.mark.parametrize("body", GOOD, ids=["branches", "loop"])
def test_reservation_ended_on_every_path_compiles_and_checks(body):
    res = compile_source(HEAD + body + "\n}\n", "ev.bpfd")  # the checker runs on it too
    spec = read_object(res.obj)
    assert spec.maps["events"].map_type == MapType.RINGBUF


BAD_DECLS = [
    ("map e: ringbuf<event>(max_entries: 5000)", "map-limit", 2, 36,
     "power of 2 and a multiple of the page size (4096), not 5000"),
    ("map e: ringbuf<u32>(max_entries: 4096)", "map-types", 2, 16,
     "the records of `ringbuf` are structs, not u32"),
    ("map e: ringbuf(max_entries: 4096)", "map-types", 2, 8, "takes one type"),
    ("map e: perf_event_array<event>(pinning: yes)", "map-args", 2, 41,
     "pinning takes LIBBPF_PIN_BY_NAME or LIBBPF_PIN_NONE"),
    ("map e: ringbuf<event>(max_entries: 4096, no_prealloc: true)", "map-args", 2, 42,
     "unknown map argument `no_prealloc`"),
]  # fmt: skip


@pytest.mark.parametrize("decl,code,line,col,words", BAD_DECLS)
def test_bad_event_map_declarations(decl, code, line, col, words):
    text = (
        f'license "GPL"\n{decl}\nstruct event {{ a: u32 }}\nxdp fn f(ctx) {{ return XDP_PASS }}\n'
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "m.bpfd")
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == (code, line, col)
    assert words in d.message


MISUSE = [
    ("    events[0] = 1\n    return XDP_PASS", "map-method", 5, 5, "has no entries"),
    ("    let x = events.lookup(0) else { return XDP_PASS }\n    return XDP_PASS",
     "map-method", 5, 13, "has no entries"),
    ("    ringbuf_output(events, 5)\n    return XDP_PASS", "type-mismatch", 5, 28,
     "takes records of struct event"),
    ("    ringbuf_submit(ctx)\n    return XDP_PASS", "type-mismatch", 5, 20,
     "takes a reservation of `ringbuf_reserve`"),
    ("    ringbuf_reserve(events)\n    return XDP_PASS", "unhandled-missing", 5, 5,
     "may be missing"),
    ("    perf_event_output(events, event(len: 1))\n    return XDP_PASS", "event-map-kind",
     5, 23, "takes a perf_event_array map, not a ringbuf map"),
]  # fmt: skip


@pytest.mark.parametrize("body,code,line,col,words", MISUSE)
def test_event_builtin_misuse(body, code, line, col, words):
    (d,) = errors(body)
    assert (d.code, d.span.line, d.span.col) == (code, line, col)
    assert words in d.message


def test_perf_event_output_is_refused_outside_xdp():
    text = (
        'license "GPL"\nstruct event { len: u32 }\nmap p: perf_event_array<event>()\n'
        "sk_msg fn m(msg) {\n    perf_event_output(p, event(len: 1))\n    return SK_PASS\n}\n"
    )
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "m.bpfd")
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line) == ("helper-not-allowed", 5)
    assert "ringbuf" in d.hints[0]


SRC = """license "GPL"
struct event { saddr: be32, dport: be16, len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: 8192)
map perf: perf_event_array<event>()
map n: array<u32, u64>(max_entries: 1)

xdp fn report(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let c = n.lookup(0) else { return XDP_PASS }
    c += 1
    if udp.dest == 9 {
        let r = ringbuf_reserve(events) else { return XDP_ABORTED }
        r.seq = c
        ringbuf_discard(r)
        return XDP_DROP
    }
    if udp.dest == 7 {
        ringbuf_output(events, event(saddr: ip.saddr, dport: udp.dest, len: ctx.len as u32, seq: c))
        return XDP_PASS
    }
    let r = ringbuf_reserve(events) else { return XDP_ABORTED }
    r.saddr = ip.saddr
    r.dport = udp.dest
    r.len = ctx.len as u32
    r.seq = c
    ringbuf_submit(r)
    perf_event_output(perf, event(saddr: ip.saddr, len: ctx.len as u32, seq: c), 20)
    return XDP_PASS
}
"""


def test_record_types_are_in_btf_and_map_definitions_are_libbpfs():
    spec = read_object(compile_source(SRC, "report.bpfd").obj)
    rb, perf = spec.maps["events"], spec.maps["perf"]
    assert (rb.map_type, rb.key_size, rb.value_size, rb.max_entries) == (
        MapType.RINGBUF,
        0,
        0,
        8192,
    )
    assert (rb.key_type_id, rb.value_type_id) == (0, 0)
    # no max_entries: the loader sizes it per possible CPU (libbpf)
    assert (perf.map_type, perf.key_size, perf.value_size, perf.max_entries) == (
        MapType.PERF_EVENT_ARRAY, 4, 4, 0,
    )  # fmt: skip
    btf = spec.btf
    var = btf.find(RECORDS_VAR, Kind.VAR)
    assert btf.find(RECORDS_SECTION, Kind.DATASEC) is not None and var is not None
    for name in ("events", "perf"):
        t = btf.resolve(record_type(btf, name))
        assert t.name == "event" and t.size == 24
        assert [(m.name, m.bit_offset // 8) for m in t.members] == [
            ("saddr", 0), ("dport", 4), ("len", 8), ("seq", 16),
        ]  # fmt: skip
    assert record_type(btf, "n") is None


def frame(dport: int, src: str = "10.1.2.3") -> bytes:
    return bytes(Ether() / IP(src=src, dst="10.9.9.9") / UDP(sport=1000, dport=dport) / b"abcd")


def test_records_reach_user_space_on_both_engines(bpf_program):
    prog = bpf_program(compile_source(SRC, "report.bpfd").obj)
    f = frame(5353)
    assert prog.run(f).verdict == "XDP_PASS"
    (ev,) = prog.events("events")
    assert ev.value == {"saddr": "10.1.2.3", "dport": 5353, "len": len(f), "seq": 1}
    assert ev.packet is None
    (pe,) = prog.events("perf")
    assert pe.value == {"saddr": "10.1.2.3", "dport": 0, "len": len(f), "seq": 1}
    assert pe.packet[:20] == f[:20] and 20 <= len(pe.packet) < 28  # perf pads to 8 bytes
    assert prog.run(frame(7, "10.0.0.7")).verdict == "XDP_PASS"  # ringbuf_output
    assert [e.value for e in prog.events("events")] == [
        {"saddr": "10.0.0.7", "dport": 7, "len": len(f), "seq": 2}
    ]
    assert prog.run(frame(9)).verdict == "XDP_DROP"  # reserved, then discarded
    assert prog.events("events") == [] and prog.events("perf") == []
    for i in range(3):  # in order, none lost
        prog.run(frame(6000 + i))
    assert [e.value["dport"] for e in prog.events("events")] == [6000, 6001, 6002]
    assert [e.value["seq"] for e in prog.events("perf")] == [4, 5, 6]


def test_a_full_ring_fails_the_reservation(bpf_program):
    """A 4096-byte ring holds records of round_up(24 + 8, 8) = 32 bytes while the producer
    stays less than the ring's size ahead of the consumer (kernel __bpf_ringbuf_reserve:
    ``new_prod_pos - cons_pos > mask`` fails): 127 of them; the 128th reservation fails
    (the program returns XDP_ABORTED) until user space reads."""
    prog = bpf_program(compile_source(SRC.replace("8192", "4096"), "report.bpfd").obj)
    verdicts = [prog.run(frame(5000)).verdict for _ in range(128)]
    assert verdicts[:127] == ["XDP_PASS"] * 127 and verdicts[127] == "XDP_ABORTED"
    assert len(prog.events("events")) == 127
    assert prog.run(frame(5000)).verdict == "XDP_PASS"  # read: room again


FULL = """license "GPL"
struct event { len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: 4096)
map events_drops: array<u64>(max_entries: 1)
map last: array<i64>(max_entries: 1)

xdp fn out(ctx) {
    let rc = ringbuf_output(events, event(len: ctx.len as u32))
    if rc != 0 { events_drops[0] += 1 }
    last[0] = rc
    return XDP_PASS
}
"""


def test_a_full_ring_fails_ringbuf_output_with_eagain(bpf_program):
    """``ringbuf_output`` into a full ring returns -EAGAIN (kernel/bpf/ringbuf.c
    bpf_ringbuf_output: no room from __bpf_ringbuf_reserve), as docs/language.md says, and
    the program counts it in RING_drops: records of round_up(16 + 8, 8) = 24 bytes, 170 fit
    in 4096 (the producer stays at most 4095 ahead); the 171st and 172nd fail."""
    prog = bpf_program(compile_source(FULL, "full.bpfd").obj)
    for _ in range(170):
        prog.run(frame(5000))
    assert prog.maps["last"].lookup(0) == 0 and prog.maps["events_drops"].lookup(0) == 0
    prog.run(frame(5000))
    prog.run(frame(5000))
    assert prog.maps["last"].lookup(0) == -errno.EAGAIN
    assert prog.maps["events_drops"].lookup(0) == 2
    assert len(prog.events("events")) == 170
    prog.run(frame(5000))  # read: room again
    assert prog.maps["last"].lookup(0) == 0


def test_sampler_sends_each_frame_cut_to_snaplen(bpf_program, root):
    """progs/xdp_sampler.bpfd: a `sample` record with the frame's first `snaplen` bytes
    (cap_len of them, pkt_len the frame's length); sample_every 0 sends none."""
    prog = bpf_program(root / "progs" / "xdp_sampler.bpfd", config={"snaplen": 32})
    frames = [frame(6000 + i) for i in range(3)] + [bytes(Ether()) + bytes(16)]
    for f in frames:
        assert prog.run(f).verdict == "XDP_PASS"
    got = prog.events("samples")
    assert [e.value["pkt_len"] for e in got] == [len(f) for f in frames]
    assert [e.value["cap_len"] for e in got] == [min(32, len(f)) for f in frames]
    assert [e.packet for e in got] == [f[:32] for f in frames]  # cap_len trims the padding
    assert all(e.orig_len == len(f) for e, f in zip(got, frames, strict=True))
    assert prog.maps["sampled"].total(0) == 4
    off = bpf_program(root / "progs" / "xdp_sampler.bpfd", config={"sample_every": 0})
    off.run(frames[0])
    assert off.events("samples") == [] and off.maps["seen"].total(0) == 1


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_bpfdsl_run_shows_the_records_of_each_packet(capsys, root, engine):
    import json

    from bpfdsl.cli import main

    f = frame(5353)
    args = ["run", str(root / "progs" / "xdp_sampler.bpfd"), "--hex", f.hex(), "--set",
            "snaplen=16", "--engine", engine]  # fmt: skip
    assert main([*args, "--json"]) == 0
    (pkt,) = json.loads(capsys.readouterr().out)["packets"]
    (ev,) = pkt["events"]
    assert ev["map"] == "samples" and ev["packet"] == f[:16].hex() and ev["orig_len"] == len(f)
    assert ev["record"] == {"ifindex": 1, "rx_queue": 0, "pkt_len": len(f), "cap_len": 16}
    assert main(args) == 0
    out = capsys.readouterr().out
    assert (
        f"event samples: ifindex=1 rx_queue=0 pkt_len={len(f)} cap_len=16 [+16 packet bytes]" in out
    )


def test_record_decoder_equals_format_value():
    """The member-table decoder of `bpfdsl events` gives what format_value gives, for
    every member kind a record may have (random bytes, many times)."""
    import random

    from bpfdsl.abi.btf.values import decoder, format_value

    text = """license "GPL"
struct inner { a: u16, b: be16 }
struct rec { saddr: be32, daddr6: ipv6_addr, mac: mac_addr, port: be16, n: i32, big: u64,
             flag: bool, small: i8, arr: [u32; 3], sub: inner, pfx: ipv4_prefix, dip: be32 }
map r: ringbuf<rec>(max_entries: 4096)
xdp fn f(ctx) { ringbuf_output(r, rec(n: 1)) return XDP_PASS }
"""
    spec = read_object(compile_source(text, "d.bpfd").obj)
    tid = record_type(spec.btf, "r")
    size = spec.btf.size_of(tid)
    dec = decoder(spec.btf, tid)
    rng = random.Random(7)
    for _ in range(200):
        data = bytes(rng.getrandbits(8) for _ in range(size))
        assert dec(data) == format_value(spec.btf, tid, data)
    assert set(dec(bytes(size))) == {"saddr", "daddr6", "mac", "port", "n", "big", "flag",
                                     "small", "arr", "sub", "pfx", "dip"}  # fmt: skip


def test_plain_struct_decoder_equals_format_value():
    """A struct of plain members (integers, network-order integers, addresses, with
    padding between them) is decoded by one generated struct unpack (`map dump`, `events`):
    the same values as format_value, also for IPv4-mapped IPv6 addresses and short bytes."""
    import random

    from bpfdsl.abi.btf.values import decoder, format_value, row_layout

    text = """license "GPL"
struct rec { proto: u8, saddr: be32, port: be16, n: i32, daddr6: ipv6_addr, mac: mac_addr,
             big: u64, small: i8, w: be64 }
map r: ringbuf<rec>(max_entries: 4096)
xdp fn f(ctx) { ringbuf_output(r, rec(n: 1)) return XDP_PASS }
"""
    spec = read_object(compile_source(text, "d.bpfd").obj)
    tid = record_type(spec.btf, "r")
    size = spec.btf.size_of(tid)
    assert row_layout(spec.btf, tid) is not None  # the generated path, not the member table
    dec = decoder(spec.btf, tid)
    rng = random.Random(11)
    mapped = bytes(10) + b"\xff\xff" + bytes([192, 0, 2, 1])  # ::ffff:192.0.2.1
    for i in range(300):
        data = bytearray(rng.getrandbits(8) for _ in range(size))
        if i % 3 == 0:
            off = next(o for name, o, *_ in row_layout(spec.btf, tid) if name == "daddr6")
            data[off : off + 16] = mapped
        assert dec(bytes(data)) == format_value(spec.btf, tid, bytes(data))
    short = bytes(range(size - 5))
    assert dec(short) == format_value(spec.btf, tid, short)
