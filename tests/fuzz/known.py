"""Failure kinds the campaigns find that other engineers are fixing right now (issue #13).

Each :class:`KnownIssue` matches one specific kind (by the fuzzer, the outcome, where the
exception came from and what the input holds), so that a campaign reports it as known
instead of failing, and nothing else hides behind it.  tests/fuzz/test_known_faults.py
runs each one's minimal reproducer as an ``xfail(strict=False)`` test: it starts to pass
(XPASS) when the fix lands, and then the entry here can go.

Not matched by any fuzzer (no oracle for the value): constant folding and signedness
(the same object runs on both engines, so a miscompile agrees with itself; tests of the
folding engineer), map dump formatting.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Result


@dataclass(frozen=True)
class KnownIssue:
    """``name``: short id; ``owner``: who fixes it; ``reason``: the fault in one line;
    ``kind``: the fuzzer; ``match(payload, result)``: True for this fault only."""

    name: str
    owner: str
    reason: str
    kind: str
    match: Callable[[Any, Result], bool]


def _text(payload) -> str:
    return payload[0] if isinstance(payload, tuple) and isinstance(payload[0], str) else ""


IDENT = re.compile(r"[A-Za-z_]\w*")


def _long_identifier(payload, res: Result) -> bool:
    """An identifier of 512+ characters (the kernel's BTF names stop at KSYM_NAME_LEN 512,
    kernel/bpf/btf.c btf_name_valid_identifier; sema has no limit, LLVM fails past ~1 KiB)."""
    if res.outcome == "kernel-rejected" and not res.detail.startswith("btf-rejected"):
        return False
    if res.outcome not in ("kernel-rejected", "unlocated", "traceback"):
        return False
    return any(len(m.group()) >= 512 for m in IDENT.finditer(_text(payload)))


def _forward_call(payload, res: Result) -> bool:
    """A call of a ``fn`` defined further down the file."""
    if res.signature != "traceback: KeyError in g_Call()":
        return False
    text = _text(payload)
    for m in re.finditer(r"\bfn\s+([A-Za-z_]\w*)\s*\(", text):
        if re.search(rf"\b{re.escape(m.group(1))}\s*\(", text[: m.start()]):
            return True
    return False


def _bad_utf8(payload, res: Result) -> bool:
    raw = _text(payload).encode("utf-8", "surrogateescape")
    try:
        raw.decode("utf-8")
        return False
    except UnicodeDecodeError:
        return res.signature == "unlocated: unreadable-input" and "codec can't decode" in res.text


def _map_limits(payload, res: Result) -> bool:
    """The kernel refuses a map declaration sema accepted: max_entries >= 2^30 (BTF array
    size overflow), flags a map type refuses (no_prealloc on arrays...), per-CPU values
    above 32 KiB."""
    if res.outcome != "kernel-rejected" or "map " not in _text(payload):
        return False
    return res.detail.startswith("map-create-failed") or (
        res.detail.startswith("btf-rejected") and "Array size overflows" in res.detail
    )


def _high_register(payload, res: Result) -> bool:
    """A traceback where the object holds an instruction naming a register above r10."""
    if res.outcome != "traceback":
        return False
    from .objects import apply, sections

    data = apply(payload[1], payload[2])
    for s in sections(data):
        if s.type == 1 and s.flags & 4:  # SHT_PROGBITS, SHF_EXECINSTR
            code = data[s.offset : s.offset + s.size]
            for i in range(0, len(code) - 7, 8):
                if code[i + 1] & 0xF > 10 or code[i + 1] >> 4 > 10:
                    return True
    return False


def _big_records(payload, res: Result) -> bool:
    """A capture holding a record of more than 65,535 bytes read as truncated."""
    if res.outcome != "wrong-count":
        return False
    base = payload[1]
    if payload[2]:  # converted to pcapng: the EPB captured lengths
        pos = 0
        while pos + 12 <= len(base):
            btype, n = struct.unpack_from("<II", base, pos)
            if btype == 6 and struct.unpack_from("<I", base, pos + 20)[0] > 65535:
                return True
            pos += max(n, 12)
        return False
    from .captures import records

    recs = records(base)
    return recs is not None and any(caplen > 65535 for _p, caplen, _l in recs[1])


def _cli_key_range(payload, res: Result) -> bool:
    return res.outcome == "traceback" and bool(
        re.search(r"struct\.error in (devmap|cpumap)_(set|delete)\(\)", res.detail)
    )


def _dev_zero(payload, res: Result) -> bool:
    return res.failed and "/dev/zero" in payload[0]


def _run_by_name_pins(payload, res: Result) -> bool:
    """`bpfdsl run` leaves maps pinned by name (LIBBPF_PIN_BY_NAME) on bpffs."""
    return res.signature == "leak: bpfdsl run: pins" and bool(
        re.search(r"left on bpffs: /sys/fs/bpf/[^/,\s]+(,|$)", res.text)
    )


KNOWN: list[KnownIssue] = [
    KnownIssue("fn-forward-call", "decls", "a call to a fn defined later raises KeyError",
               "sources", _forward_call),
    KnownIssue("long-identifier", "decls", "identifiers over 511 characters: kernel refuses the "
               "BTF names; over 1,024: internal compiler error without a location", "sources",
               _long_identifier),
    KnownIssue("number-literal-0x_", "decls", "`0x_`, `0b_` and similar literals give Python's "
               "ValueError", "sources",
               lambda p, r: r.signature == "traceback: ValueError in int_lit()"),
    KnownIssue("invalid-utf8", "decls", "invalid UTF-8 gives exit 2 with a byte offset instead "
               "of line:col", "sources", _bad_utf8),
    KnownIssue("map-declaration-limits", "decls", "map declarations the kernel refuses "
               "(max_entries >= 2^30, no_prealloc on arrays, per-CPU values > 32 KiB) compile",
               "sources", _map_limits),
    KnownIssue("compile-dev-zero", "decls", "`bpfdsl compile /dev/zero` reads without limit "
               "(MemoryError)", "cli", _dev_zero),
    KnownIssue("interp-register-above-r10", "mapsio", "an instruction naming r11-r15 crashes "
               "the interpreter (IndexError)", "objects", _high_register),
    KnownIssue("cli-map-key-range", "mapsio", "devmap set/delete and cpumap delete crash "
               "(struct.error) on keys outside u32", "cli", _cli_key_range),
    KnownIssue("pcap-records-over-65535", "mapsio", "captures with records over 65,535 bytes "
               "(BIG TCP, jumbograms) are read as truncated", "captures", _big_records),
    KnownIssue("run-leaves-by-name-pins", "runtime", "`bpfdsl run` of an object with maps "
               "pinned by name (LIBBPF_PIN_BY_NAME) leaves the pins on bpffs", "objects",
               _run_by_name_pins),
]  # fmt: skip


def known_issue(kind: str, payload: Any, res: Result) -> KnownIssue | None:
    """The known issue ``res`` (a failure of fuzzer ``kind`` on ``payload``) is, or None."""
    for k in KNOWN:
        if k.kind == kind and k.match(payload, res):
            return k
    return None
