"""Capture files (pcap and pcapng) read the way libpcap reads them, so a capture gives the
same packets here as in ``tcpdump -r``.

Pure (no scapy, no kernel).  The rules are libpcap's (the-tcpdump-group/libpcap):

- pcap (sf-pcap.c ``pcap_check_header``/``pcap_next_packet``): magics a1b2c3d4 (µs),
  a1b23c4d (ns) and a1b2cd34 (Kuznetzov: 24-byte record headers, snapshot + 14 on
  Ethernet), either byte order; versions 2.0-2.4 and 543.0 (caplen/len swapped before 2.3,
  maybe in 2.3).  The file's snapshot length is its ``snaplen`` unless that is 0 or over
  INT_MAX (``pcap_adjust_snapshot``: then :func:`max_snaplen_for_linktype`).  A record
  longer than the maximum for the link type (262144 bytes for Ethernet) ends the read
  ("invalid packet capture length"); a record longer than the snapshot length is cut to
  it (its first ``snapshot`` bytes, the rest skipped).  Nothing limits records to 65535
  bytes: BIG TCP and jumbogram captures hold records of 80 KB and more.
- pcapng (sf-pcapng.c ``read_block``/``pcap_ng_next_packet``): SHB versions 1.0 and 1.2,
  blocks of at least 12 bytes, a multiple of 4, at most 16 MiB, with matching trailer;
  EPB, SPB and PB packets; every IDB of the file must have the first one's link type and
  snapshot length; an EPB/PB with caplen over the snapshot length ends the read.

Whatever ends a read early (a cut file, a record libpcap refuses) stops it with the
packets read so far, as ``tcpdump -r`` does; :attr:`Capture.error` says why.  :func:`open_capture`
reads one record at a time (a capture of any size in bounded memory), or batches of records
as spans of the mapped file (:meth:`CaptureReader.spans`, no copy per record);
:func:`read_capture` the whole file.
"""

from __future__ import annotations

import mmap
import os
import struct
import sys
from array import array
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

try:  # the walk over a mapped file's plain records in C, built with BPFDSL_COMPILE=1
    from bpfdsl.runtime import _pcapwalk
except ImportError:  # not built: the same walk in Python
    _pcapwalk = None  # type: ignore[assignment]
if os.environ.get("BPFDSL_PURE_PYTHON", "") not in ("", "0"):
    _pcapwalk = None  # type: ignore[assignment]
PCAP_WALK_C = _pcapwalk is not None
"""Whether :meth:`CaptureReader.spans` walks a mapped file in C (``bpfdsl --version``)."""

INT_MAX = 2**31 - 1
MAXIMUM_SNAPLEN = 262144  # libpcap pcap-int.h: the largest snapshot length for most types
# libpcap pcap-common.c max_snaplen_for_dlt(): the link types allowed bigger records
_MAX_SNAPLEN = {231: 128 * 1024 * 1024, 279: 8 * 1024 * 1024, 249: 1024 * 1024}
LINKTYPE_ETHERNET = 1  # tcpdump.org/linktypes.html (DLT_EN10MB)

_PCAP_MAGICS = {0xA1B2C3D4: ("us", 16), 0xA1B23C4D: ("ns", 16), 0xA1B2CD34: ("us", 24)}
_KUZNETZOV = 0xA1B2CD34
_SHB, _IDB, _PB, _SPB, _EPB = 0x0A0D0D0A, 1, 2, 3, 6
_BYTE_ORDER_MAGIC = 0x1A2B3C4D
_SHB_INSANE_MAX = 1024 * 1024  # sf-pcapng.c BT_SHB_INSANE_MAX
_INITIAL_MAX_BLOCKSIZE = 16 * 1024 * 1024  # sf-pcapng.c INITIAL_MAX_BLOCKSIZE


class CaptureFormatError(ValueError):
    """The file is not a capture libpcap would open (bad magic, cut or bad file header,
    unsupported version, a pcapng file without an interface); libpcap's wording."""


def max_snaplen_for_linktype(linktype: int) -> int:
    """The largest record libpcap accepts for ``linktype`` (bytes): 262144, or more for
    D-Bus, EBHSCR and USBPcap (libpcap pcap-common.c ``max_snaplen_for_dlt``)."""
    return _MAX_SNAPLEN.get(linktype, MAXIMUM_SNAPLEN)


def adjust_snapshot(linktype: int, snaplen: int) -> int:
    """libpcap's ``pcap_adjust_snapshot``: a file's snaplen of 0 or over INT_MAX means the
    maximum for the link type; any other value is used as is."""
    if snaplen == 0 or snaplen > INT_MAX:
        return max_snaplen_for_linktype(linktype)
    return snaplen


@dataclass(frozen=True, slots=True)
class Record:
    """One packet: ``data`` as captured (at most the snapshot length), ``wirelen`` the
    length on the wire (bytes), 1-based ``index`` in the file."""

    index: int
    data: bytes
    wirelen: int


@dataclass(frozen=True, slots=True)
class RecordSpans:
    """A batch of records lying in one buffer: record ``k`` (1-based index ``first + k``
    in the file) is ``lengths[k]`` bytes at byte ``offsets[k]`` of ``data`` (the mapped
    capture file, a private copy-on-write mapping, or bytes), ``wirelens[k]`` bytes on the
    wire.  ``offsets``: ``array('Q')``, ``lengths``/``wirelens``: ``array('I')``."""

    data: Any
    offsets: array
    lengths: array
    wirelens: array
    first: int

    def __len__(self) -> int:
        return len(self.lengths)

    def frame(self, k: int) -> memoryview:
        """Record ``k``'s bytes, a view of :attr:`data` (no copy)."""
        o = self.offsets[k]
        return memoryview(self.data)[o : o + self.lengths[k]]


@dataclass(frozen=True, slots=True)
class _Walk:
    """What the fast walk over a mapped pcap file needs of its header: record header
    size, the (caplen, wirelen) struct at +8, the longest record taken as it is
    (min(snapshot, link type maximum)), and whether caplen/wirelen may be swapped."""

    hdrsize: int
    lens: struct.Struct
    most: int
    swapped: str


@dataclass(slots=True)
class Capture:
    """What a capture file holds: ``format`` ("pcap"/"pcapng"), ``linktype`` (LINKTYPE_*,
    without pcap's upper-bit extensions), ``snaplen`` (the snapshot length in effect,
    bytes), ``records``; ``error`` is why reading ended before the end of the file (libpcap's
    words; None when it reached the end or ``limit``), ``cut`` is True when that was a
    record (header or data) cut by the end of the file."""

    format: str
    linktype: int
    snaplen: int
    records: list[Record] = field(default_factory=list)
    error: str | None = None
    cut: bool = False


class _Stop(Exception):
    """Reading ends here: libpcap's message; ``cut`` when the file ended inside a record."""

    def __init__(self, message: str, cut: bool = False):
        super().__init__(message)
        self.cut = cut


def _read(f: BinaryIO, n: int, what: str) -> bytes:
    data = f.read(n)
    if len(data) != n:
        raise _Stop(f"truncated dump file; tried to read {n} {what}, only got {len(data)}", True)
    return data


class CaptureReader:
    """A capture file being read, one record at a time (bounded memory, whatever the size
    of the file): ``format``, ``linktype`` and ``snaplen`` as in :class:`Capture`, known
    once the file header is read; iterating yields the :class:`Record` s in file order (at
    most ``limit``); once the iteration ends, ``error``/``cut`` say why it ended early (as
    :class:`Capture`).  A context manager: the file is closed on exit, or when the records
    run out."""

    def __init__(self, path: str | Path, *, limit: int | None = None) -> None:
        self._f: BinaryIO | None = open(path, "rb")
        self._mem: mmap.mmap | None = None  # the mapped file, while :meth:`spans` reads
        try:
            magic = self._f.read(4)
            if len(magic) != 4:
                raise CaptureFormatError(
                    f"truncated dump file; tried to read 4 file header bytes, only got {len(magic)}"
                )
            self._walk: _Walk | None = None
            if struct.unpack("<I", magic)[0] == _SHB:
                head, self._next = _open_pcapng(self._f, magic)
            else:
                head, self._next, self._walk = _open_pcap(self._f, magic)
        except BaseException:
            self.close()
            raise
        self.format, self.linktype, self.snaplen = head.format, head.linktype, head.snaplen
        self.limit = limit
        self.error: str | None = None
        self.cut = False
        self.count = 0

    def __iter__(self) -> Iterator[Record]:
        f = self._f
        if f is None:
            return
        try:
            while self.limit is None or self.count < self.limit:
                rec = self._next()
                if rec is None:
                    break
                self.count += 1
                yield Record(self.count, rec[0], rec[1])
        except _Stop as e:
            self.error, self.cut = str(e), e.cut
        finally:
            self.close()

    def spans(self, chunk: int = 4096) -> Iterator[RecordSpans]:
        """The records in batches of at most ``chunk`` (:class:`RecordSpans`), in file order
        (at most ``limit`` in all), by the same rules as iterating; ``error``/``cut`` as
        there once the batches end.  A classic pcap file is mapped (a private
        copy-on-write mapping, so the kernel can read frames where they lie) and its
        records are spans of the mapping: no copy per record; a record the plain case does
        not cover (cut to the snapshot length, swapped lengths, one libpcap refuses) is
        read by the full rules, as a batch of its own.  pcapng files and files that
        cannot be mapped (pipes) give batches of copied records.  The mapping is closed
        when the batches end: use each batch's frames before then (copy what is kept)."""
        if self._f is None:
            return
        try:
            m = self._map()
            if m is None:
                yield from self._copied_spans(chunk)
            else:
                yield from self._mapped_spans(m, chunk)
        except _Stop as e:
            self.error, self.cut = str(e), e.cut
        finally:
            self.close()

    def _map(self) -> mmap.mmap | None:
        f = self._f
        if self._walk is None or f is None:
            return None
        try:
            self._mem = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
        except (OSError, ValueError):  # not a regular file (a pipe), or empty
            return None
        return self._mem

    def _mapped_spans(self, m: mmap.mmap, chunk: int) -> Iterator[RecordSpans]:
        assert self._walk is not None and self._f is not None
        w, f = self._walk, self._f
        hdr, lens, most, swapped = w.hdrsize, w.lens.unpack_from, w.most, w.swapped
        pos, end = f.tell(), len(m)
        fast = _pcapwalk.walk if _pcapwalk is not None and swapped != "yes" else None
        swap = (w.lens.format[0] == "<") != (sys.byteorder == "little")
        while self.limit is None or self.count < self.limit:
            room = chunk if self.limit is None else min(chunk, self.limit - self.count)
            offs, sizes, wires = array("Q"), array("I"), array("I")
            if fast is not None:  # the loop below, in C
                pos, o, s, wl = fast(m, pos, room, hdr, swap, most, swapped != "no")
                offs.frombytes(o)
                sizes.frombytes(s)
                wires.frombytes(wl)
            put_o, put_s, put_w = offs.append, sizes.append, wires.append
            k = len(sizes)
            while fast is None and k < room and pos + hdr <= end:
                caplen, wirelen = lens(m, pos + 8)
                d = pos + hdr
                if caplen > most or d + caplen > end or (caplen > wirelen and swapped != "no"):
                    break
                if swapped == "yes":
                    break
                put_o(d)
                put_s(caplen)
                put_w(wirelen)
                pos = d + caplen
                k += 1
            if k:
                yield RecordSpans(m, offs, sizes, wires, self.count + 1)
                self.count += k
            if k == room:
                continue
            if pos == end:
                return
            f.seek(pos)  # a record outside the plain case: libpcap's rules in full
            rec = self._next()
            if rec is None:
                return
            pos = f.tell()
            self.count += 1
            data, wirelen = rec
            yield RecordSpans(data, array("Q", [0]), array("I", [len(data)]),
                              array("I", [wirelen]), self.count)  # fmt: skip

    def _copied_spans(self, chunk: int) -> Iterator[RecordSpans]:
        while self.limit is None or self.count < self.limit:
            room = chunk if self.limit is None else min(chunk, self.limit - self.count)
            blob = bytearray()
            offs, sizes, wires = array("Q"), array("I"), array("I")
            first = self.count + 1
            while len(sizes) < room:
                rec = self._next()
                if rec is None:
                    break
                offs.append(len(blob))
                sizes.append(len(rec[0]))
                wires.append(rec[1])
                blob += rec[0]
                self.count += 1
            if not sizes:
                return
            yield RecordSpans(blob, offs, sizes, wires, first)
            if len(sizes) < room:
                return

    def close(self) -> None:
        m = self._mem
        if m is not None:
            self._mem = None
            try:
                m.close()
            except BufferError:  # views of it are still held: unmapped when they go
                pass
        if self._f is not None:
            self._f.close()
            self._f = None

    def __enter__(self) -> CaptureReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_capture(path: str | Path, *, limit: int | None = None) -> CaptureReader:
    """Open the pcap or pcapng file at ``path`` to read its records one at a time (at most
    ``limit``).

    Raises CaptureFormatError when the file cannot be opened as a capture and OSError when
    it cannot be read; a problem after the file header ends the records instead
    (``CaptureReader.error``).
    """
    return CaptureReader(path, limit=limit)


def read_capture(path: str | Path, *, limit: int | None = None) -> Capture:
    """Read the whole pcap or pcapng file at ``path`` (at most ``limit`` records) into a
    :class:`Capture`; :func:`open_capture` reads one record at a time.  Raises as it."""
    with open_capture(path, limit=limit) as r:
        records = list(r)
        return Capture(r.format, r.linktype, r.snaplen, records, r.error, r.cut)


# ---- pcap (sf-pcap.c) ----


def _open_pcap(
    f: BinaryIO, magic: bytes
) -> tuple[Capture, Callable[[], tuple[bytes, int] | None], _Walk]:
    """The file header of a pcap file (after its 4 ``magic`` bytes), the function that
    reads the next record: (data, wirelen), None at the end of the file; raises _Stop --
    and what the walk over the mapped file needs to take plain records as they are."""
    for order in ("<", ">"):
        (m,) = struct.unpack(order + "I", magic)
        if m in _PCAP_MAGICS:
            break
    else:
        raise CaptureFormatError("unknown file format (not a pcap or pcapng capture)")
    rest = f.read(20)
    if len(rest) != 20:
        raise CaptureFormatError(
            f"truncated dump file; tried to read 24 file header bytes, only got {4 + len(rest)}"
        )
    major, minor, _zone, _sigfigs, snaplen, lt = struct.unpack(order + "HHiIII", rest)
    if major < 2:
        raise CaptureFormatError("archaic pcap savefile format")
    if not ((major == 2 and minor <= 4) or (major == 543 and minor == 0)):
        raise CaptureFormatError(f"unsupported pcap savefile version {major}.{minor}")
    linktype = lt & 0x03FFFFFF  # LT_LINKTYPE(): the upper 6 bits carry extensions (FCS)
    snapshot = adjust_snapshot(linktype, snaplen)
    hdrsize = _PCAP_MAGICS[m][1]
    if m == _KUZNETZOV and linktype == LINKTYPE_ETHERNET:
        snapshot = min(snapshot + 14, INT_MAX)  # cooked captures add a fake Ethernet header
    swapped = "yes" if major == 543 or minor < 3 else ("maybe" if minor == 3 else "no")
    biggest = max_snaplen_for_linktype(linktype)
    rec_fmt = struct.Struct(order + "IIII")

    def next_record() -> tuple[bytes, int] | None:
        head = f.read(hdrsize)
        if not head:
            return None  # the end of the file, between records
        if len(head) != hdrsize:
            raise _Stop(
                f"truncated dump file; tried to read {hdrsize} header bytes, only got {len(head)}",
                True,
            )
        _sec, _frac, caplen, wirelen = rec_fmt.unpack_from(head)
        if swapped == "yes" or (swapped == "maybe" and caplen > wirelen):
            caplen, wirelen = wirelen, caplen
        if caplen > biggest:
            over = f"snaplen of {snapshot}" if caplen > snapshot else f"maximum of {biggest}"
            raise _Stop(f"invalid packet capture length {caplen}, bigger than {over}")
        if caplen > snapshot:  # cut to the snapshot length, skip the rest
            data = _read(f, snapshot, "captured bytes")
            skipped = f.read(caplen - snapshot)
            if len(skipped) != caplen - snapshot:
                got = snapshot + len(skipped)
                raise _Stop(
                    f"truncated dump file; tried to read {caplen} captured bytes, only got {got}",
                    True,
                )
        else:
            data = _read(f, caplen, "captured bytes")
        return data, wirelen

    walk = _Walk(hdrsize, struct.Struct(order + "II"), min(snapshot, biggest), swapped)
    return Capture("pcap", linktype, snapshot), next_record, walk


# ---- pcapng (sf-pcapng.c) ----


class _Ng:
    """State of a pcapng read: byte order, snapshot length, interfaces of the section."""

    def __init__(self, order: str):
        self.order = order
        self.linktype: int | None = None
        self.snaplen = 0
        self.ifcount = 0
        self.max_block = _INITIAL_MAX_BLOCKSIZE


def _read_block(f: BinaryIO, ng: _Ng) -> tuple[int, bytes] | None:
    """(block type, body without header and trailer), or None at the end of the file."""
    head = f.read(8)
    if not head:
        return None
    if len(head) != 8:
        raise _Stop(
            f"truncated pcapng dump file; tried to read 8 bytes, only got {len(head)}", True
        )
    btype, total = struct.unpack(ng.order + "II", head)
    if total < 12:
        raise _Stop(f"block in pcapng dump file has a length of {total} < 12")
    if total % 4:
        raise _Stop(
            f"block in pcapng dump file has a length of {total} that is not a multiple of 4"
        )
    if total > ng.max_block:
        raise _Stop(f"pcapng block size {total} > maximum {ng.max_block}")
    rest = f.read(total - 8)
    if len(rest) != total - 8:
        raise _Stop(
            f"truncated pcapng dump file; tried to read {total - 8} bytes, only got {len(rest)}",
            True,
        )
    (trailer,) = struct.unpack_from(ng.order + "I", rest, len(rest) - 4)
    if trailer != total:
        raise _Stop(f"block total length in header {total} and trailer {trailer} don't match")
    return btype, rest[:-4]


def _too_short(btype: int) -> _Stop:
    return _Stop(f"block of type {btype} in pcapng dump file is too short")


def _idb_options(ng: _Ng, body: bytes) -> None:
    """Walk the options of an IDB as libpcap's process_idb_options does (it refuses options
    cut short and bad if_tsresol/if_tsoffset lengths)."""
    off = 8
    seen: set[int] = set()
    while off < len(body):
        if off + 4 > len(body):
            raise _too_short(_IDB)
        code, length = struct.unpack_from(ng.order + "HH", body, off)
        padded = (length + 3) // 4 * 4
        if off + 4 + padded > len(body):
            raise _too_short(_IDB)
        off += 4 + padded
        if code == 0:
            if length:
                raise _Stop(
                    f"Interface Description Block has opt_endofopt option with length {length} != 0"
                )
            return
        for opt, name, want in ((9, "if_tsresol", 1), (14, "if_tsoffset", 8)):
            if code == opt:
                if length != want:
                    raise _Stop(
                        f"Interface Description Block has {name} option with length "
                        f"{length} != {want}"
                    )
                if opt in seen:
                    raise _Stop(f"Interface Description Block has more than one {name} option")
                seen.add(opt)
                if opt == 9:
                    v = body[off - padded]
                    if (v & 0x80 and v & 0x7F > 63) or (not v & 0x80 and v > 19):
                        base, exp = ("2", v & 0x7F) if v & 0x80 else ("10", v)
                        raise _Stop(
                            f"Interface Description Block if_tsresol option resolution "
                            f"{base}^-{exp} is too high"
                        )


def _add_idb(ng: _Ng, body: bytes) -> None:
    if len(body) < 8:
        raise _too_short(_IDB)
    lt, _reserved, snaplen = struct.unpack_from(ng.order + "HHI", body)
    if ng.linktype is None:
        ng.linktype, ng.snaplen = lt, adjust_snapshot(lt, snaplen)
        biggest = 8 + 20 + max_snaplen_for_linktype(lt) + 131072 + 4  # MAX_BLOCKSIZE_FOR_SNAPLEN
        ng.max_block = max(ng.max_block, biggest)
    else:
        if lt != ng.linktype:
            raise _Stop(
                f"an interface has a type {lt} different from the type of the first interface"
            )
        if adjust_snapshot(lt, snaplen) != ng.snaplen:
            raise _Stop(
                f"an interface has a snapshot length {snaplen} different from the snapshot "
                "length of the first interface"
            )
    _idb_options(ng, body)
    ng.ifcount += 1


def _open_pcapng(
    f: BinaryIO, magic: bytes
) -> tuple[Capture, Callable[[], tuple[bytes, int] | None]]:
    """The Section Header Block and first Interface Description Block of a pcapng file,
    and the function that reads the next packet (as :func:`_open_pcap`)."""
    head = f.read(8)
    if len(head) != 8:
        raise CaptureFormatError("unknown file format (not a pcap or pcapng capture)")
    for order in ("<", ">"):
        total, bom = struct.unpack(order + "II", head)
        if bom == _BYTE_ORDER_MAGIC:
            break
    else:
        raise CaptureFormatError("unknown file format (not a pcap or pcapng capture)")
    if total < 28 or total > _SHB_INSANE_MAX:
        raise CaptureFormatError(
            f"Section Header Block in pcapng dump file has invalid length {total}"
        )
    rest = f.read(total - 12)
    if len(rest) != total - 12:
        raise CaptureFormatError(
            f"truncated pcapng dump file; tried to read {total - 12} bytes, only got {len(rest)}"
        )
    major, minor = struct.unpack_from(order + "HH", rest)
    if not (major == 1 and minor in (0, 2)):
        raise CaptureFormatError(f"unsupported pcapng savefile version {major}.{minor}")
    ng = _Ng(order)
    try:
        while ng.linktype is None:  # the first IDB gives the link type and snapshot length
            blk = _read_block(f, ng)
            if blk is None:
                raise CaptureFormatError("the capture file has no Interface Description Blocks")
            btype, body = blk
            if btype == _IDB:
                _add_idb(ng, body)
            elif btype in (_EPB, _SPB, _PB):
                raise CaptureFormatError(
                    "the capture file has a packet block before any Interface Description Blocks"
                )
    except _Stop as e:
        raise CaptureFormatError(str(e)) from None
    linktype: int = ng.linktype  # the loop above ran until the first IDB set it
    return Capture("pcapng", linktype, ng.snaplen), lambda: _next_packet(f, ng)


def _next_packet(f: BinaryIO, ng: _Ng) -> tuple[bytes, int] | None:
    o = ng.order
    while True:
        blk = _read_block(f, ng)
        if blk is None:
            return None
        btype, body = blk
        if btype == _EPB:
            if len(body) < 20:
                raise _too_short(btype)
            iface, _hi, _lo, caplen, wirelen = struct.unpack_from(o + "IIIII", body)
            start = 20
        elif btype == _SPB:
            if len(body) < 4:
                raise _too_short(btype)
            iface, start = 0, 4
            (wirelen,) = struct.unpack_from(o + "I", body)
            caplen = min(wirelen, ng.snaplen)
        elif btype == _PB:
            if len(body) < 20:
                raise _too_short(btype)
            iface, _drops, _hi, _lo, caplen, wirelen = struct.unpack_from(o + "HHIIII", body)
            start = 20
        elif btype == _IDB:
            _add_idb(ng, body)
            continue
        elif btype == _SHB:
            if len(body) < 16:
                raise _too_short(btype)
            bom, major = struct.unpack_from(o + "IH", body)
            if bom == 0x4D3C2B1A:  # BYTE_ORDER_MAGIC the other way round
                raise _Stop("the file has sections with different byte orders")
            if bom != _BYTE_ORDER_MAGIC:
                raise _Stop("the file has a section with a bad byte order magic field")
            if major != 1:
                raise _Stop(f"unknown pcapng savefile major version number {major}")
            ng.ifcount = 0
            continue
        else:
            continue  # other blocks (statistics, name resolution...): skipped as libpcap does
        if iface >= ng.ifcount:
            raise _Stop(
                f"a packet arrived on interface {iface}, but there's no Interface "
                "Description Block for that interface"
            )
        if caplen > ng.snaplen:
            raise _Stop(
                f"invalid packet capture length {caplen}, bigger than snaplen of {ng.snaplen}"
            )
        if start + caplen > len(body):
            raise _too_short(btype)
        return body[start : start + caplen], wirelen
