"""Packets for test runs and traffic: read captures, parse hex, build frames, describe changes.

Takes pcap/pcapng files (read by libpcap's rules: :mod:`bpfdsl.runtime.pcapfile`) or hex text, returns
Ethernet frames as ``bytes`` (wire order);
builds UDP/IPv4 frames with correct checksums (RFC 791/768) without scapy, and
uses scapy only to describe a frame in one line.  Errors are DiagnosticError/UsageError.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from bpfdsl.abi.net import ETH_HLEN, ETH_P_IP
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.runtime.pcapfile import (
    MAXIMUM_SNAPLEN,
    CaptureFormatError,
    CaptureReader,
    RecordSpans,
    open_capture,
)

DLT_EN10MB = 1  # pcap LINKTYPE_ETHERNET (tcpdump.org/linktypes.html)


@dataclass(frozen=True, slots=True)
class Frame:
    """One captured frame: ``data`` as captured (may be shorter than ``wirelen``), 1-based ``index``."""

    index: int
    data: bytes
    wirelen: int


def read_pcap(
    path: str | Path, *, limit: int | None = None, warnings: list[str] | None = None
) -> list[Frame]:
    """Frames of an Ethernet pcap or pcapng file, in file order (at most ``limit``): the
    list of :func:`iter_pcap` (which reads one frame at a time).  Raises as it."""
    return list(iter_pcap(path, limit=limit, warnings=warnings))


def iter_pcap(
    path: str | Path, *, limit: int | None = None, warnings: list[str] | None = None
) -> Iterator[Frame]:
    """Frames of an Ethernet pcap or pcapng file, in file order (at most ``limit``), the
    packets ``tcpdump -r`` shows, read one at a time (a capture of any size in bounded
    memory): records are read by libpcap's rules (:mod:`bpfdsl.runtime.pcapfile`), so
    records over 65535 bytes (BIG TCP, jumbograms) are whole and a record longer than the
    file's snapshot length is cut to it.

    Raises UsageError -- here, before the first frame -- for a missing/unreadable file, a
    file that is not a capture, or a link type other than Ethernet (LINKTYPE_ETHERNET = 1).
    A cut last record, or a record libpcap refuses, ends the frames (what tcpdump does)
    instead of failing: a sentence saying so is appended to ``warnings`` when they end.
    """

    p = Path(path)
    return _frames(p, _open_ethernet(p, limit), warnings)


def iter_pcap_spans(
    path: str | Path,
    *,
    limit: int | None = None,
    warnings: list[str] | None = None,
    chunk: int = 4096,
) -> Iterator[RecordSpans]:
    """The frames of :func:`iter_pcap` in batches of at most ``chunk``: each a
    :class:`~bpfdsl.runtime.pcapfile.RecordSpans` whose frames are spans of the mapped
    capture (no copy per frame; :meth:`CaptureReader.spans`).  Raises and warns as
    :func:`iter_pcap`, the UsageError before the first batch."""
    p = Path(path)
    return _batches(p, _open_ethernet(p, limit), warnings, chunk)


def _open_ethernet(p: Path, limit: int | None) -> CaptureReader:
    """The capture at ``p``, open, its link type Ethernet; raises UsageError."""
    if p.is_dir():
        raise UsageError(
            error("bad-capture", f"{p} is a directory, not a capture file", hint="give a .pcap")
        )
    if not p.is_file():
        raise UsageError(error("bad-capture", f"{p}: no such capture file"))
    try:
        cap = open_capture(p, limit=limit)
    except CaptureFormatError as e:
        raise UsageError(
            error(
                "bad-capture",
                f"{p}: not a pcap/pcapng capture ({e})",
                hint="write captures with `tcpdump -w FILE` (Ethernet)",
            )
        ) from None
    except OSError as e:
        raise UsageError(error("bad-capture", f"{p}: {e.strerror or e}")) from None
    if cap.linktype != DLT_EN10MB:
        cap.close()
        raise UsageError(
            error(
                "bad-capture",
                f"{p}: link type {cap.linktype} is not Ethernet",
                hint="XDP sees Ethernet frames; capture on an Ethernet interface "
                "(not `-i any`, which writes Linux cooked captures)",
            )
        )
    return cap


def _frames(p: Path, cap: CaptureReader, warnings: list[str] | None) -> Iterator[Frame]:
    try:
        for r in cap:
            yield Frame(r.index, r.data, r.wirelen)
    except OSError as e:
        raise UsageError(error("bad-capture", f"{p}: {e.strerror or e}")) from None
    finally:
        cap.close()
    _warn_stop(p, cap, warnings)


def _batches(
    p: Path, cap: CaptureReader, warnings: list[str] | None, chunk: int
) -> Iterator[RecordSpans]:
    try:
        yield from cap.spans(chunk)
    except OSError as e:
        raise UsageError(error("bad-capture", f"{p}: {e.strerror or e}")) from None
    finally:
        cap.close()
    _warn_stop(p, cap, warnings)


def _warn_stop(p: Path, cap: CaptureReader, warnings: list[str] | None) -> None:
    """The sentence saying why the frames ended early, when they did."""
    if cap.error is not None and warnings is not None:  # tcpdump: "pcap_loop: <error>"
        n = cap.count
        where = f"ends inside packet {n + 1}" if cap.cut else f"stops at packet {n + 1}"
        why = "truncated file" if cap.cut else "libpcap refuses this record"
        warnings.append(
            f"{p}: the capture {where} ({cap.error}; {why}): read {n} whole packet(s), "
            "as tcpdump does"
        )


def parse_hex(text: str) -> bytes:
    """Bytes from hex text: ``"00 11 22"``, ``"001122"``, ``"00:11:22"``, ``"0x0011"``.

    Raises UsageError naming the first character that is not hex.
    """
    s = re.sub(r"0x", "", text.strip(), flags=re.IGNORECASE)
    s = re.sub(r"[\s:,.\-]", "", s)
    m = re.search(r"[^0-9a-fA-F]", s)
    if m:
        raise UsageError(
            error(
                "bad-hex",
                f"not a hex digit: {m.group()!r} in --hex",
                hint="give bytes as hex, e.g. --hex 'ffffffffffff 0011...'",
            )
        )
    if len(s) % 2:
        raise UsageError(error("bad-hex", f"odd number of hex digits ({len(s)}) in --hex"))
    return bytes.fromhex(s)


def mac_bytes(mac: str) -> bytes:
    """``"aa:bb:cc:dd:ee:ff"`` -> 6 bytes."""
    return bytes.fromhex(mac.replace(":", "").replace("-", ""))


def inet_checksum(data: bytes) -> int:
    """The Internet checksum (RFC 1071) of ``data``, as a host-order 16-bit number."""
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(
    *,
    src_mac: str,
    dst_mac: str,
    src_ip: str,
    dst_ip: str,
    sport: int,
    dport: int,
    payload: bytes = b"",
    ttl: int = 64,
    ident: int = 0,
) -> bytes:
    """An Ethernet/IPv4/UDP frame (ports host order in, network order on the wire)."""
    sip, dip = socket.inet_aton(src_ip), socket.inet_aton(dst_ip)
    ulen = 8 + len(payload)
    pseudo = sip + dip + struct.pack("!BBH", 0, socket.IPPROTO_UDP, ulen)
    udp = struct.pack("!HHHH", sport, dport, ulen, 0) + payload
    csum = inet_checksum(pseudo + udp) or 0xFFFF
    udp = udp[:6] + struct.pack("!H", csum) + udp[8:]
    ip = struct.pack(
        "!BBHHHBBH4s4s",
        0x45,
        0,
        20 + ulen,
        ident & 0xFFFF,
        0x4000,
        ttl,
        socket.IPPROTO_UDP,
        0,
        sip,
        dip,
    )
    ip = ip[:10] + struct.pack("!H", inet_checksum(ip)) + ip[12:]
    eth = mac_bytes(dst_mac) + mac_bytes(src_mac) + struct.pack("!H", ETH_P_IP)
    return eth + ip + udp


def summary(frame: bytes) -> str:
    """One-line scapy description of an Ethernet frame (never raises)."""
    try:
        import scapy.layers.inet  # binds IPv4/UDP/TCP to Ether
        import scapy.layers.inet6  # noqa: F401
        from scapy.layers.l2 import Ether

        return Ether(frame).summary()
    except Exception as e:  # scapy may fail on any malformed frame
        return f"<{len(frame)} bytes, not decodable: {type(e).__name__}>"


def changed_ranges(before: bytes, after: bytes) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` (offsets into ``after``) that differ from ``before``.

    Compares position by position over the common length; bytes beyond it count as
    changed when the length changed.
    """
    out: list[tuple[int, int]] = []
    n = min(len(before), len(after))
    i = 0
    while i < n:
        if before[i] != after[i]:
            j = i
            while j < n and before[j] != after[j]:
                j += 1
            out.append((i, j))
            i = j
        else:
            i += 1
    if len(after) > n:
        out.append((n, len(after)))
    return out


_MAC, _IP4, _NUM = "mac", "ip4", "num"


def header_fields(frame: bytes) -> list[tuple[str, int, int, str]]:
    """(name, start, end, format) of the Ethernet/802.1Q/IPv4/IPv6/UDP/TCP header fields in
    ``frame`` (offsets in bytes, headers as the kernel's uapi structs name their fields).

    Only headers that fit the frame are listed; never raises.
    """
    out: list[tuple[str, int, int, str]] = []
    if len(frame) < ETH_HLEN:
        return out
    out += [("eth.h_dest", 0, 6, _MAC), ("eth.h_source", 6, 12, _MAC)]
    off, proto = 12, int.from_bytes(frame[12:14], "big")
    while proto in (0x8100, 0x88A8) and len(frame) >= off + 6:
        out.append(("vlan.tci", off + 2, off + 4, _NUM))
        off += 4
        proto = int.from_bytes(frame[off : off + 2], "big")
    out.append(("eth.h_proto", off, off + 2, _NUM))
    off += 2
    l4 = None
    if proto == ETH_P_IP and len(frame) >= off + 20:
        ihl = (frame[off] & 0xF) * 4
        out += [
            ("ip.tos", off + 1, off + 2, _NUM),
            ("ip.tot_len", off + 2, off + 4, _NUM),
            ("ip.id", off + 4, off + 6, _NUM),
            ("ip.frag_off", off + 6, off + 8, _NUM),
            ("ip.ttl", off + 8, off + 9, _NUM),
            ("ip.protocol", off + 9, off + 10, _NUM),
            ("ip.check", off + 10, off + 12, _NUM),
            ("ip.saddr", off + 12, off + 16, _IP4),
            ("ip.daddr", off + 16, off + 20, _IP4),
        ]
        l4, off = frame[off + 9], off + max(ihl, 20)
    elif proto == 0x86DD and len(frame) >= off + 40:
        out += [
            ("ip6.payload_len", off + 4, off + 6, _NUM),
            ("ip6.nexthdr", off + 6, off + 7, _NUM),
            ("ip6.hop_limit", off + 7, off + 8, _NUM),
            ("ip6.saddr", off + 8, off + 24, "ip6"),
            ("ip6.daddr", off + 24, off + 40, "ip6"),
        ]
        l4, off = frame[off + 6], off + 40
    if l4 == socket.IPPROTO_UDP and len(frame) >= off + 8:
        out += [
            ("udp.source", off, off + 2, _NUM),
            ("udp.dest", off + 2, off + 4, _NUM),
            ("udp.len", off + 4, off + 6, _NUM),
            ("udp.check", off + 6, off + 8, _NUM),
        ]
    elif l4 == socket.IPPROTO_TCP and len(frame) >= off + 20:
        out += [
            ("tcp.source", off, off + 2, _NUM),
            ("tcp.dest", off + 2, off + 4, _NUM),
            ("tcp.seq", off + 4, off + 8, _NUM),
            ("tcp.ack_seq", off + 8, off + 12, _NUM),
            ("tcp.flags", off + 13, off + 14, _NUM),
            ("tcp.window", off + 14, off + 16, _NUM),
            ("tcp.check", off + 16, off + 18, _NUM),
        ]
    return out


def _show(data: bytes, fmt: str) -> str:
    if fmt == _MAC:
        return ":".join(f"{b:02x}" for b in data)
    if fmt == _IP4:
        return socket.inet_ntop(socket.AF_INET, data)
    if fmt == "ip6":
        return socket.inet_ntop(socket.AF_INET6, data)
    return str(int.from_bytes(data, "big"))


def describe_change(before: bytes, after: bytes, *, max_lines: int = 8) -> list[str]:
    """Human lines saying how ``after`` differs from ``before`` (empty when identical).

    Same length: changed header fields by name with old and new values (network order
    shown as numbers/addresses), other changed bytes as offset ranges.  Different length:
    the length change and whether the head grew or shrank (adjust_head) or the tail.
    """
    if before == after:
        return []
    lines: list[str] = []
    if len(after) != len(before):
        d = len(after) - len(before)
        lines.append(f"length {len(before)} -> {len(after)} ({d:+d} bytes)")
        k = min(len(before), len(after), 32)
        if k and d > 0 and after.endswith(before[-k:]) and not after.startswith(before[:k]):
            lines.append(
                f"head grew by {d} bytes: {after[: min(d, 16)].hex(' ')}{' ...' if d > 16 else ''}"
            )
        elif k and d < 0 and before.endswith(after[-k:]) and not before.startswith(after[:k]):
            lines.append(f"head shrank by {-d} bytes")
        elif after.startswith(before[: min(len(before), len(after))]):
            lines.append(f"tail {'grew' if d > 0 else 'shrank'} by {abs(d)} bytes")
        else:
            lines.append("contents differ (compared from the start):")
            lines += [f"  {ln}" for ln in _byte_lines(before, after, [], max_lines)]
        return lines[: max_lines + 2]
    fields = header_fields(before)
    covered: list[tuple[int, int]] = []
    for name, start, end, fmt in fields:
        if before[start:end] != after[start:end]:
            lines.append(
                f"{name}: {_show(before[start:end], fmt)} -> {_show(after[start:end], fmt)}"
            )
            covered.append((start, end))
    lines += _byte_lines(before, after, [(s, e) for _n, s, e, _f in fields], max_lines)
    if len(lines) > max_lines:
        lines = lines[:max_lines] + [f"... {len(lines) - max_lines} more changes"]
    return lines


def _byte_lines(before: bytes, after: bytes, skip: list[tuple[int, int]], limit: int) -> list[str]:
    """Changed byte ranges outside the ``skip`` ranges (already shown as named fields)."""
    n = min(len(before), len(after))
    named = bytearray(n)
    for s, e in skip:
        named[s : min(e, n)] = b"\1" * max(0, min(e, n) - s)
    diff = bytes(before[:n])
    masked_after = bytes(a if not named[k] else diff[k] for k, a in enumerate(after[:n]))
    out = []
    for start, end in changed_ranges(diff, masked_after + after[n:]):
        old, new = before[start:end][:16].hex(" "), after[start:end][:16].hex(" ")
        more = " ..." if end - start > 16 else ""
        out.append(f"bytes {start}..{end - 1}: {old or '-'}{more} -> {new}{more}")
        if len(out) >= limit:
            break
    return out


PCAP_MAGIC_NS = 0xA1B23C4D  # pcap with nanosecond timestamps (pcap-savefile(5))
PCAP_SNAPLEN = MAXIMUM_SNAPLEN  # the largest record libpcap reads back for Ethernet


class PcapWriter:
    """A classic pcap file of Ethernet frames (LINKTYPE_ETHERNET, nanosecond timestamps,
    little endian), written frame by frame and flushed after each, so tcpdump and
    Wireshark can read it while it grows.  Raises UsageError when the file cannot be
    made; a context manager."""

    def __init__(self, path: str | Path):
        try:
            self.f = open(path, "wb")
        except OSError as e:
            raise UsageError(error("bad-pcap", f"{path}: cannot write: {e.strerror}")) from None
        self.count = 0
        self.f.write(struct.pack("<IHHiIII", PCAP_MAGIC_NS, 2, 4, 0, 0, PCAP_SNAPLEN, DLT_EN10MB))
        self.f.flush()

    def write(self, time_ns: int, data: bytes, orig_len: int | None = None) -> None:
        """One frame: ``time_ns`` since the epoch (UTC), the ``data`` captured, and the
        frame's length on the wire (``orig_len``, at least ``len(data)``)."""
        sec, nsec = divmod(max(0, time_ns), 1_000_000_000)
        wire = max(orig_len or 0, len(data))
        self.f.write(struct.pack("<IIII", sec, nsec, len(data), wire) + data)
        self.f.flush()
        self.count += 1

    def close(self) -> None:
        self.f.close()

    def __enter__(self) -> PcapWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
