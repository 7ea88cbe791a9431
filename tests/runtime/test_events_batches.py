"""Event records read in batches (EventStream.read_batches, RecordBatch): the same records,
values and JSON lines as the Event objects of EventStream.read(), for plain record structs
(the compiled RowCodec) and for records the codec cannot read (packet bytes after the
record, a perf sample's padding): those fall back to the Event path."""

from __future__ import annotations

import json
import os

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import events, loader
from bpfdsl.runtime.packets import udp_frame

SRC = """license "GPL"
struct event { saddr: be32, dport: be16, mark: i8, len: u32, seq: u64, delta: i32 }
map events: ringbuf<event>(max_entries: 65536)
map n: array<u32, u64>(max_entries: 1)

xdp fn report(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let c = n.lookup(0) else { return XDP_PASS }
    c += 1
    let r = ringbuf_reserve(events) else { return XDP_PASS }
    r.saddr = ip.saddr
    r.dport = udp.dest
    r.mark = -3
    r.len = ctx.len as u32
    r.seq = c
    r.delta = -(c as i32)
    ringbuf_submit(r)
    return XDP_PASS
}
"""


def frame(i: int) -> bytes:
    return udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                     src_ip=f"10.0.{i // 256}.{i % 256}", dst_ip="10.0.0.2", sport=40000,
                     dport=1000 + i, payload=b"x" * 22)  # fmt: skip


@pytest.mark.kernel
def test_batches_give_the_records_values_and_json_lines_of_the_event_objects():
    spec = read_object(compile_source(SRC, "report.bpfd").obj)
    with loader.load_collection(spec) as coll:
        lm = coll.maps["events"]
        rec = events.record_type_of(spec.btf, "events")
        assert rec is not None and rec.codec() is not None

        def stream():
            fd = syscall.Fd(os.dup(int(lm.fd)))
            return events.EventStream(fd, syscall.map_info(fd), rec, name="events")

        prog = coll.programs["report"].fd
        with stream() as a, stream() as b:
            for i in range(300):
                syscall.prog_test_run(prog, frame(i))
            batches = a.read_batches()  # both streams read the same ring: one takes it
            assert sum(len(x) for x in batches) == 300 and b.read_batches() == []
            for i in range(300):
                syscall.prog_test_run(prog, frame(i))
            objs = b.read()
    assert len(objs) == 300
    (batch,) = batches
    evs = batch.events()
    seq0, seq1 = evs[0].value["seq"], objs[0].value["seq"]
    assert [e.value | {"seq": e.value["seq"] - seq0, "delta": e.value["delta"] + seq0}
            for e in evs] == [o.value | {"seq": o.value["seq"] - seq1,
                                         "delta": o.value["delta"] + seq1} for o in objs]  # fmt: skip
    assert evs[5].value == {"saddr": "10.0.0.5", "dport": 1005, "mark": -3, "len": 64,
                            "seq": seq0 + 5, "delta": -(seq0 + 5)}  # fmt: skip
    names = rec.codec().names
    assert batch.rows() == [tuple(e.value[k] for k in names) for e in evs]
    # the JSON lines of the template are json.dumps of the Event's dict, byte for byte
    off = 123_456_789
    assert batch.json_lines(off) == [json.dumps(e.to_dict(off)) for e in evs]
    np = pytest.importorskip("numpy")
    arr = batch.array()
    assert arr.dtype.itemsize == rec.size and len(arr) == 300
    assert arr["dport"].tolist() == [e.value["dport"] for e in evs]
    assert arr["delta"].tolist() == [e.value["delta"] for e in evs]
    assert arr["mark"].tolist() == [-3] * 300
    assert bytes(arr["saddr"][5]) == bytes([10, 0, 0, 5])
    assert isinstance(arr, np.ndarray)


def test_records_with_bytes_after_the_struct_use_the_event_path():
    """A record longer than its struct carries packet bytes: no codec rows, and the JSON
    lines and events are those of make_event (packet, orig_len)."""
    spec = read_object(compile_source(SRC, "report.bpfd").obj)
    rec = events.record_type_of(spec.btf, "events")
    assert rec is not None
    one = bytes(range(rec.size)) + b"\xaa\xbb"
    blob = bytes(8) + one
    b = events.RecordBatch("events", blob, [8], [len(one)], rec, None, 5)
    assert b.rows() is None
    (e,) = b.events()
    assert e.packet == b"\xaa\xbb" and e.data == one
    assert b.json_lines(0) == [json.dumps(e.to_dict(0))]


DISCARD = """license "GPL"
struct event { len: u32, seq: u64 }
map events: ringbuf<event>(max_entries: 65536)

xdp fn half(ctx) {
    let r = ringbuf_reserve(events) else { return XDP_PASS }
    r.len = ctx.len as u32
    r.seq = 7
    if ctx.len > 64 { ringbuf_discard(r) } else { ringbuf_submit(r) }
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_discarded_records_are_skipped_in_a_batch_and_the_ring_is_freed():
    """Discarded records break the even spacing: the header walk skips them, the batch has
    no stride, and the records read are the submitted ones, in order."""
    spec = read_object(compile_source(DISCARD, "half.bpfd").obj)
    with loader.load_collection(spec) as coll:
        lm = coll.maps["events"]
        rec = events.record_type_of(spec.btf, "events")
        fd = syscall.Fd(os.dup(int(lm.fd)))
        with events.EventStream(fd, syscall.map_info(fd), rec, name="events") as st:
            prog = coll.programs["half"].fd
            sizes = [60 + 10 * (i % 3 == 0) for i in range(90)]  # every 3rd discarded
            for n in sizes:
                syscall.prog_test_run(prog, bytes(n))
            (batch,) = st.read_batches()
            assert st.read_batches() == []  # the consumer position moved past all of them
            ring = next(iter(st.rings.values()))
            assert ring.pending() == 0
    assert batch.stride == 0 and len(batch) == 60
    assert batch.rows() == [(60, 7)] * 60
    assert [e.value for e in batch.events()] == [{"len": 60, "seq": 7}] * 60
