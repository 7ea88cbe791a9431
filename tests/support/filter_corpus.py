"""The tcpdump filter corpus (tests/corpus/filters): each ``NAME.bpfd`` is an XDP program
that returns XDP_PASS where libpcap's filter in its first line (``// tcpdump: EXPR``)
matches and XDP_DROP where it does not; ``NAME.c`` is a hand-written libpcap-style C
equivalent (clang-19), the yardstick of the instruction counts.  A progs/ program whose
first line is such a comment (progs/xdp_src_net.bpfd) is in the corpus too, with its
tests/data/c twin.

libpcap's verdicts come from tcpdump itself: every Ethernet frame of the capture corpus
(support.paths.PCAPS, read with bpfdsl.runtime.pcapfile as libpcap reads it) is written to
one pcap whose record *i* has the timestamp *i* seconds, captured bytes and wire length
kept; ``tcpdump -r ALL -w OUT EXPR`` then writes the matching records, and their
timestamps name them.  A BPF filter is a function of (captured bytes, captured length,
wire length) only, so this gives the verdicts a ``tcpdump -r`` of each file gives.

An XDP program sees the captured bytes as the packet: for a frame cut by the snapshot
length it cannot know the wire length that libpcap's ``greater``/``less``/``len`` compare
(``ld #pktlen``).  For those filters (:attr:`Filter.uses_length`) the reference is libpcap
on the frames as the program sees them (wire length = captured length), and the frames
where that differs from the real wire length are all cut ones (the test checks it).

Used by tests/corpus/test_filter_corpus.py and benchmarks/filter_corpus_bench.py.
"""

from __future__ import annotations

import functools
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from bpfdsl.runtime.pcapfile import LINKTYPE_ETHERNET, CaptureFormatError, read_capture
from support.paths import DATA, PCAPS, PROGS, ROOT

FILTERS = ROOT / "tests" / "corpus" / "filters"
PREFIX = "// tcpdump: "
XDP_DROP, XDP_PASS = 1, 2
PCAP_HDR = struct.Struct("<IHHiIII")  # pcap file header (µs magic, native little endian)
PCAP_REC = struct.Struct("<IIII")  # ts_sec, ts_usec, caplen, wirelen
TCPDUMP_SNAPLEN = 262144  # libpcap MAXIMUM_SNAPLEN: no record is cut again


@dataclass(frozen=True, slots=True)
class Frame:
    """One Ethernet frame of the corpus: ``data`` as captured, ``wirelen`` on the wire
    (bytes), ``capture`` its file's name, ``index`` its 1-based number in that file."""

    data: bytes
    wirelen: int
    capture: str
    index: int

    @property
    def where(self) -> str:
        return f"{self.capture}#{self.index}"


@dataclass(frozen=True, slots=True)
class Filter:
    """A corpus entry: ``name`` (file stem and program name), ``expr`` (tcpdump syntax),
    ``source`` (.bpfd) and ``c_source`` (.c)."""

    name: str
    expr: str
    source: Path
    c_source: Path

    @property
    def uses_length(self) -> bool:
        """libpcap's filter reads the wire length (``greater``, ``less``, ``len``)."""
        return any(w in ("greater", "less", "len") for w in self.expr.replace("=", " ").split())


def filters() -> list[Filter]:
    """Every filter of tests/corpus/filters and progs/, by name; the expression is the
    first line's ``// tcpdump: EXPR`` comment (``/* tcpdump: EXPR */`` opens the C file)."""
    out = []
    found = [(src, src.with_suffix(".c")) for src in FILTERS.glob("*.bpfd")]
    for src in PROGS.glob("*.bpfd"):
        if src.read_text().startswith(PREFIX):
            found.append((src, DATA / "c" / f"{src.stem}.c"))
    for src, c_src in sorted(found, key=lambda t: t[0].stem):
        first = src.read_text().splitlines()[0]
        assert first.startswith(PREFIX), f"{src}: first line must be '{PREFIX}EXPR'"
        expr = first[len(PREFIX) :]
        assert c_src.read_text().splitlines()[0] == f"/* tcpdump: {expr} */", c_src
        out.append(Filter(src.stem, expr, src, c_src))
    return out


@functools.cache
def captures() -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(Ethernet capture names, other capture names) of the corpus."""
    eth, other = [], []
    for path in sorted(PCAPS.glob("*.pcap*")):
        try:
            cap = read_capture(path)
        except CaptureFormatError:
            other.append(path.name)
            continue
        (eth if cap.linktype == LINKTYPE_ETHERNET else other).append(path.name)
    return tuple(eth), tuple(other)


@functools.cache
def frames() -> tuple[Frame, ...]:
    """Every record of every Ethernet capture, in file then record order."""
    out = []
    for name in captures()[0]:
        for r in read_capture(PCAPS / name).records:
            out.append(Frame(r.data, r.wirelen, name, r.index))
    return tuple(out)


def sample(items: Iterable[Frame], every: int) -> list[Frame]:
    """Every ``every``-th frame (deterministic), and every frame that is cut short or over
    one page (the kinds a sample must not lose)."""
    return [
        f
        for i, f in enumerate(items)
        if i % every == 0 or len(f.data) < f.wirelen or len(f.data) > 3520
    ]


def write_pcap(path: Path, items: Iterable[Frame], *, as_seen: bool = False) -> None:
    """A pcap (µs, LINKTYPE_ETHERNET) of ``items`` whose record i has timestamp i s;
    ``as_seen``: wire length = captured length (the packet an XDP program gets)."""
    with open(path, "wb") as f:
        f.write(PCAP_HDR.pack(0xA1B2C3D4, 2, 4, 0, 0, TCPDUMP_SNAPLEN, LINKTYPE_ETHERNET))
        for i, fr in enumerate(items):
            wirelen = len(fr.data) if as_seen else fr.wirelen
            f.write(PCAP_REC.pack(i, 0, len(fr.data), wirelen))
            f.write(fr.data)


def _timestamps(path: Path) -> set[int]:
    raw = path.read_bytes()
    magic = struct.unpack_from("<I", raw)[0]
    order = "<" if magic == 0xA1B2C3D4 else ">"
    off, out = PCAP_HDR.size, set()
    while off + 16 <= len(raw):
        ts, _us, caplen, _wl = struct.unpack_from(order + "IIII", raw, off)
        out.add(ts)
        off += 16 + caplen
    return out


class Libpcap:
    """libpcap's verdicts on a list of frames, by tcpdump (one process per expression)."""

    def __init__(self, items: list[Frame]):
        self.tcpdump = shutil.which("tcpdump")
        if self.tcpdump is None:
            raise FileNotFoundError("tcpdump not installed (apt-get install tcpdump)")
        self._dir = Path(tempfile.mkdtemp(prefix="bpfdsl_corpus_"))
        self.items = items
        self.all = self._dir / "all.pcap"
        self.seen = self._dir / "seen.pcap"
        write_pcap(self.all, items)
        write_pcap(self.seen, items, as_seen=True)

    def matches(self, expr: str, *, as_seen: bool = False) -> list[bool]:
        """Per frame: does libpcap's ``expr`` accept it (``as_seen``: with the wire length
        taken to be the captured length)."""
        out = self._dir / "out.pcap"
        src = self.seen if as_seen else self.all
        proc = subprocess.run(
            [self.tcpdump, "-r", str(src), "-w", str(out), expr],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if proc.returncode:
            raise RuntimeError(f"tcpdump {expr!r}: {proc.stderr.strip()}")
        hit = _timestamps(out)
        return [i in hit for i in range(len(self.items))]

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def slots(obj: bytes | Path) -> int:
    """Instructions of the object's one program in 8-byte slots, as the kernel counts them
    (``insn_cnt`` of BPF_PROG_LOAD: an ld_imm64 is 2), read with bpfdsl.obj.collection."""
    from bpfdsl.obj.collection import read_object

    spec = read_object(obj)
    (prog,) = spec.programs.values()
    return sum(i.width for i in prog.insns)


def compile_pair(f: Filter, out_dir: Path) -> tuple[bytes, Path]:
    """(our object, the C equivalent's object built with clang-19 into ``out_dir``)."""
    from bpfdsl.compiler import compile_file
    from support.objbuild import compile_c

    return compile_file(f.source).obj, compile_c(f.c_source, out_dir / f"{f.name}_c.o")
