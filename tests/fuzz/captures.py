"""Capture mutator: tcpdump's test captures (tests/data/pcaps, the repo's copy of
../shared/pcaps), as pcap and converted to pcapng, truncated and garbled, through
``bpfdsl run PROG.o --pcap F`` (interpreter; as root also the kernel's test run).

Every run must end with its per-packet results or a clean error (``bad-capture`` and the
like); never a traceback or a raw Python message.  Where the input stays a valid capture
(the file as it is, converted to pcapng, cut at a record boundary, ``--limit``) the number
of packets run must be the number of records it holds (``wrong-count`` otherwise): that is
what tcpdump reads.

Mutations: truncation (inside the file header, at, inside and just after a record header,
inside record data); file header fields (magic: swapped, nanosecond, garbage; version;
snaplen 0/1/65535/65536/262144/2^32-1; link type incl. FCS bits); record header fields
(caplen 0, 13, 14, > len, > snaplen, 65536, 2^31, 2^32-1; len < caplen; timestamps);
bit flips; a record repeated many times; pcapng block type, total length (0, odd,
mismatched trailer, huge), byte-order magic, section length, interface link type and
snaplen, packet interface id and lengths, option lengths.
"""

from __future__ import annotations

import os
import random
import re
import struct
import tempfile

from .cli_run import judge, run_cli
from .harness import PCAPS, PROGS, Case, Fuzzer, Result, ddmin

PCAP_MAGICS = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
               b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}  # fmt: skip
EDGE = [0, 1, 13, 14, 15, 60, 1514, 65535, 65536, 262144, 262145, 0x7FFFFFFF, 0xFFFFFFFF]


def records(data: bytes) -> tuple[str, list[tuple[int, int, int]]] | None:
    """(byte order, [(record offset, caplen, len)]) of the whole records of a pcap file;
    None when it is not one."""
    e = PCAP_MAGICS.get(data[:4])
    if e is None or len(data) < 24:
        return None
    out, pos = [], 24
    while pos + 16 <= len(data):
        caplen, wirelen = struct.unpack_from(e + "II", data, pos + 8)
        if pos + 16 + caplen > len(data):
            break
        out.append((pos, caplen, wirelen))
        pos += 16 + caplen
    return e, out


def to_pcapng(data: bytes) -> bytes:
    """The same packets as pcapng (SHB, one IDB with the file's link type and snaplen, an
    EPB per record; pcapng spec draft-ietf-opsawg-pcapng sections 4.1, 4.2, 4.3).  A record
    longer than the snapshot length is cut to it, as libpcap reads it from the pcap (an EPB
    longer than the IDB's snaplen would end libpcap's pcapng read instead)."""
    from bpfdsl.runtime.pcapfile import adjust_snapshot

    e, recs = records(data)
    snaplen, linktype = struct.unpack_from(e + "II", data, 16)
    snapshot = adjust_snapshot(linktype & 0xFFFF, snaplen)

    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        n = 12 + len(body)
        return struct.pack("<II", btype, n) + body + struct.pack("<I", n)

    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += block(1, struct.pack("<HHI", linktype & 0xFFFF, 0, snaplen))
    for pos, caplen, wirelen in recs:
        sec, usec = struct.unpack_from(e + "II", data, pos)
        ts = sec * 1_000_000 + usec
        cut = min(caplen, snapshot)
        body = struct.pack("<IIIII", 0, ts >> 32, ts & 0xFFFFFFFF, cut, wirelen)
        out += block(6, body + data[pos + 16 : pos + 16 + cut])
    return out


def pcapng_blocks(data: bytes) -> list[tuple[int, int, int]]:
    """(offset, type, total length) of the blocks of a little-endian pcapng file."""
    out, pos = [], 0
    while pos + 12 <= len(data):
        btype, n = struct.unpack_from("<II", data, pos)
        if n < 12 or pos + n > len(data):
            break
        out.append((pos, btype, n))
        pos += n
    return out


class Mutator:
    """Patch lists (as in :mod:`fuzz.objects`) for one capture; ``expect`` is the number
    of packets a reader must give when the result is still a valid capture, else None."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def _u32(self, off: int, e: str = "<") -> tuple:
        return (off, struct.pack(e + "I", self.r.choice(EDGE + [self.r.getrandbits(32)])))

    def pcap(self, data: bytes) -> tuple[list, str, int | None]:
        e, recs = records(data)
        r = self.r
        k = r.random()
        if k < 0.12:
            return [], "as is", len(recs)
        if k < 0.25 and recs:  # cut at a record boundary: a valid, shorter capture
            i = r.randrange(len(recs))
            return [("cut", recs[i][0])], f"cut before record {i + 1}", i
        if k < 0.35:
            if recs and r.random() < 0.7:
                pos, caplen, _ = r.choice(recs)
                cut = pos + r.choice((1, 8, 15, 16, 17, 16 + max(0, caplen - 1)))
            else:
                cut = r.randrange(min(len(data), 24) + 1)
            return [("cut", cut)], f"cut at byte {cut}", None
        if k < 0.5:
            field = r.choice([(0, "magic"), (4, "version"), (16, "snaplen"), (20, "linktype")])
            if field[1] == "magic":
                val = r.choice(list(PCAP_MAGICS) + [b"\x0a\x0d\x0d\x0a", b"\0\0\0\0", b"GIF8"])
                return [(0, val)], f"file magic {val.hex()}", None
            if field[1] == "version":
                return (
                    [(4, struct.pack(e + "HH", r.choice((0, 1, 2, 3, 0xFFFF)), 4))],
                    "version",
                    None,
                )
            if field[1] == "linktype":
                lt = r.choice((0, 1, 101, 113, 276, 0xFFFF, 0x10000001, 0xFFFFFFFF))
                return [(20, struct.pack(e + "I", lt))], f"link type {lt:#x}", None
            return [self._u32(16, e)], "snaplen", None
        if k < 0.7 and recs:
            pos, caplen, wirelen = r.choice(recs)
            f = r.choice(("caplen", "len", "ts"))
            if f == "caplen":
                v = r.choice(EDGE + [wirelen + 1, caplen + 1, caplen - 1 if caplen else 0])
                return [(pos + 8, struct.pack(e + "I", v))], f"record caplen {v}", None
            if f == "len":
                v = r.choice((0, 1, max(0, caplen - 1), 0xFFFFFFFF))
                return [(pos + 12, struct.pack(e + "I", v))], f"record len {v}", None
            return (
                [
                    (
                        pos,
                        struct.pack(
                            e + "II", 0xFFFFFFFF, r.choice((0, 999999, 1000000, 0xFFFFFFFF))
                        ),
                    )
                ],
                "timestamp",
                None,
            )
        if k < 0.8 and recs:  # one record many times: a long capture of small frames
            pos, caplen, _ = min(recs, key=lambda x: x[1])
            rec = data[pos : pos + 16 + caplen]
            n = r.choice((100, 2000))
            end = recs[-1][0] + 16 + recs[-1][1]  # the file ends after its last record
            return (
                [("append", rec * n)],
                f"record of {caplen} B appended {n} times",
                len(recs) + n if end == len(data) else None,
            )
        patches = []
        for _ in range(r.choice((1, 2, 4, 16))):
            off = r.randrange(len(data))
            patches.append((off, bytes([data[off] ^ (1 << r.randrange(8))])))
        return patches, f"{len(patches)} bit flip(s)", None

    def pcapng(self, data: bytes, n: int) -> tuple[list, str, int | None]:
        r = self.r
        blocks = pcapng_blocks(data)
        k = r.random()
        if k < 0.2:
            return [], "as is", n
        if k < 0.3 and len(blocks) > 2:
            i = r.randrange(2, len(blocks))
            return [("cut", blocks[i][0])], f"cut before block {i}", i - 2
        if k < 0.45:
            return [("cut", r.randrange(len(data)))], "cut", None
        pos, btype, blen = r.choice(blocks)
        f = r.choice(("type", "length", "trailer", "body"))
        if f == "type":
            v = r.choice((0, 1, 2, 3, 5, 6, 0x0A0D0D0A, 0x80000001, 0xFFFFFFFF))
            return [(pos, struct.pack("<I", v))], f"block type {v:#x}", None
        if f == "length":
            v = r.choice((0, 4, 11, 12, 13, blen + 4, blen - 4, len(data), 0xFFFFFFFC))
            return [(pos + 4, struct.pack("<I", v))], f"block length {v}", None
        if f == "trailer":
            return (
                [(pos + blen - 4, struct.pack("<I", r.choice((0, blen + 4, 0xFFFFFFFF))))],
                "trailer length",
                None,
            )
        word = pos + 8 + 4 * r.randrange(max(1, (blen - 12) // 4))  # a body word: magic,
        return (
            [self._u32(word)],
            f"body word at +{word - pos} of block type {btype:#x}",
            None,
        )  # ids, lengths


def apply(base: bytes, patches: list) -> bytes:
    data = bytearray(base)
    for p in patches:
        if p[0] == "cut":
            del data[p[1] :]
        elif p[0] == "append":
            data += p[1]
        elif p[0] < len(data):
            data[p[0] : p[0] + len(p[1])] = p[1][: len(data) - p[0]]
    return bytes(data)


def base_captures() -> list[tuple[str, bytes]]:
    return [(f"tests/data/pcaps/{p.name}", p.read_bytes()) for p in sorted(PCAPS.glob("*.pcap"))]


_OBJ: dict[str, bytes] = {}


def program_object() -> bytes:
    """progs/xdp_udp_filter.bpfd compiled (once per process)."""
    if "udp" not in _OBJ:
        from .api import compile_file

        _OBJ["udp"] = compile_file(PROGS / "xdp_udp_filter.bpfd").obj
    return _OBJ["udp"]


def cases(seed: int, count: int, kernel: bool):
    """Payload (label, base, as pcapng, patches, expect, limit, engine, json)."""
    rng = random.Random(seed)
    base = [(lab, d) for lab, d in base_captures() if records(d) is not None]
    mut = Mutator(rng)
    for i in range(count):
        label, data = rng.choice(base)
        ng = rng.random() < 0.35
        if ng:
            n = len(records(data)[1])
            data = to_pcapng(data)
            patches, what, expect = mut.pcapng(data, n)
        else:
            patches, what, expect = mut.pcap(data)
        limit = rng.choice((None, None, None, 1, 3))
        engine = "kernel" if kernel and rng.random() < 0.25 else "interp"
        kind = "pcapng" if ng else "pcap"
        yield Case(
            (label, data, ng, patches, expect, limit, engine, i % 2 == 0),
            f"{label} as {kind}, {what}{f', --limit {limit}' if limit else ''} ({engine})",
        )


_TMP: list[str] = []


def _workdir() -> str:
    if not _TMP or not os.path.isdir(_TMP[0]):
        _TMP[:] = [tempfile.mkdtemp(prefix="bpfdsl-fuzz-pcap-")]
    return _TMP[0]


COUNT = re.compile(r"^(\d+) packet\(s\) through", re.M)


def run_case(payload) -> Result:
    label, base, ng, patches, expect, limit, engine, as_json = payload
    d = _workdir()
    obj = os.path.join(d, "prog.o")
    if not os.path.exists(obj):
        with open(obj, "wb") as f:
            f.write(program_object())
    cap = os.path.join(d, "capture.pcapng" if ng else "capture.pcap")
    with open(cap, "wb") as f:
        f.write(apply(base, patches))
    argv = (["--json"] if as_json else []) + ["run", obj, "--pcap", cap, "--engine", engine, "-q"]
    argv += ["--limit", str(limit)] if limit else []
    res = judge(argv)
    if res.failed or expect is None:
        return res if res.failed or res.outcome == "ok" else Result("refused", res.detail)
    want = min(expect, limit) if limit else expect
    rc, out, err, _ = run_cli(argv)
    got = max(0, _count(out, as_json))  # exit 1 ("no packet was run") still lists them
    if got != want:
        return Result("wrong-count", f"bpfdsl run --pcap read {'more' if got > want else 'fewer'} packets than the capture holds",
                      f"$ bpfdsl {' '.join(argv)}   (exit {rc})\nread {got}, the capture holds {want}\n{err[-1500:]}")  # fmt: skip
    return res


def _count(out: str, as_json: bool) -> int:
    if as_json:
        import json

        try:
            return len(json.loads(out)["packets"])
        except (ValueError, KeyError, TypeError):
            return -1
    m = COUNT.search(out)
    return int(m.group(1)) if m else -1


def reproducer(payload) -> str:
    label, base, ng, patches, expect, limit, engine, as_json = payload
    desc = []
    for p in patches:
        if p[0] == "cut":
            desc.append(f"truncate to {p[1]} bytes")
        elif p[0] == "append":
            desc.append(f"append {len(p[1])} bytes")
        else:
            desc.append(f"at {p[0]:#x}: {base[p[0] : p[0] + len(p[1])].hex()} -> {p[1].hex()}")
    kind = "converted to pcapng (one IDB, EPBs)" if ng else "pcap"
    j = "--json " if as_json else ""
    lim = f" --limit {limit}" if limit else ""
    exp = "" if expect is None else f"\nit holds {expect} packet(s)"
    return (f"capture = {label}, {kind}, patches: {'; '.join(desc) or 'none'}{exp}\n"
            f"$ bpfdsl {j}run xdp_udp_filter.o --pcap capture --engine {engine} -q{lim}")  # fmt: skip


def shrink(payload, fails, deadline: float):
    label, base, ng, patches, expect, limit, engine, as_json = payload
    if len(patches) > 1:
        patches = ddmin(patches, lambda ps: fails((label, base, ng, ps, expect, limit, engine, as_json)),
                        deadline=deadline)  # fmt: skip
    return (label, base, ng, patches, expect, limit, engine, as_json)


FUZZER = Fuzzer("captures", cases, run_case, reproducer, shrink, timeout=60.0)
