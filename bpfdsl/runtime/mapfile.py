"""Map entries in files: what ``bpfdsl map update --from FILE`` reads.

Three forms, told apart by their first non-blank character:

- the document ``bpfdsl map dump --json`` prints (``{"map": {...}, "entries": [{"key": K,
  "value": V}, ...]}``), so a dump loads back as it is;
- JSON lines, one ``{"key": K, "value": V}`` object per line;
- CSV (RFC 4180, Python's ``csv`` module): a header line naming the columns ``key`` and
  ``value``, then one entry per line, each field in the text forms the CLI takes for KEY
  and VALUE (``10.0.0.0/8``, ``0x2a``, a JSON object for a struct).

Keys and values are returned as they are written (Python values from JSON, text from CSV)
for :meth:`bpfdsl.runtime.mapview.MapView.update_batch` to encode by the map's BTF.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import replace
from typing import Any

from bpfdsl.abi.btf.values import JsonLineEncoder
from bpfdsl.diagnostics import Diagnostic, DiagnosticError, Span, UsageError, error

# the keys of entries already encoded by the map's line encoder (see read_entries'
# ``encode_line``): the value is (key bytes, value bytes), or for ENCODED_MANY (a list of
# key bytes, a list of value bytes) of many entries
ENCODED: Any = type("Encoded", (), {"__repr__": lambda self: "ENCODED"})()
ENCODED_MANY: Any = type("EncodedMany", (), {"__repr__": lambda self: "ENCODED_MANY"})()


LineEncoder = Callable[[str], "tuple[bytes, bytes] | None"]


class EntryFile:
    """The (key, value) entries of a file, in file order (iterate once), and where the
    last one taken came from: :meth:`locate` puts that file line on an error the entry's
    encoding raised (``MapView.update_batch`` does), so a bad value names its line."""

    def __init__(self, path: str, text: str, encode_line: LineEncoder | None) -> None:
        self.path = path
        self.text = text
        self.encode_line = encode_line
        self.line = 0  # the file line (1-based) of the last entry taken; 0: none
        self.entry = 0  # for a `map dump --json` document: the last entry's number

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        head = self.text.lstrip()[:1]
        if head == "{":
            yield from _json_entries(self)
        elif head:
            yield from _csv_entries(self)

    def locate(self, e: DiagnosticError) -> DiagnosticError:
        """``e`` (an error of the last entry taken) with its diagnostics at that entry's
        line of the file, the line shown; for the entries of a dump document, which has
        no line per entry, the entry's number put in front of the message."""
        out: list[Diagnostic] = []
        for d in e.diagnostics:
            if self.line:
                span = Span(self.path, self.line, 1, self.line, 1 + len(self._line_text()))
                out.append(replace(d, span=span))
            elif self.entry:
                out.append(replace(d, message=f"{self.path}: entry {self.entry}: {d.message}"))
            else:
                out.append(d)
        return type(e)(out, self.text if self.line else None)

    def _line_text(self) -> str:
        lines = self.text.split("\n")
        return lines[self.line - 1].rstrip("\r") if self.line <= len(lines) else ""


def read_entries(path: str, encode_line: LineEncoder | None = None) -> EntryFile:
    """The (key, value) entries of the file at ``path`` (``-``: stdin), in file order.
    ``encode_line`` (``MapView.json_line_encoder()``): JSON lines it encodes itself come
    as ``(ENCODED, (key bytes, value bytes))`` or, many lines at once,
    ``(ENCODED_MANY, (keys, values))`` (the bytes the map's encoder gives for the lines'
    keys and values), the others as Python values.  Raises UsageError naming the file
    (here) and the line (while iterating) of anything it cannot read: a bad line stops
    the iteration before that line's entry."""
    try:
        f = sys.stdin if path == "-" else open(path, encoding="utf-8")
    except OSError as e:
        raise UsageError(error("bad-file", f"{path}: {e.strerror or e}")) from None
    try:
        text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(error("bad-file", f"{path}: cannot read it: {e}")) from None
    finally:
        if f is not sys.stdin:
            f.close()
    return EntryFile(path, text, encode_line)


def _bad(path: str, line: int, what: str) -> UsageError:
    return UsageError(
        error(
            "bad-file",
            f"{path}:{line}: {what}",
            hint='give {"key": K, "value": V} per line, `bpfdsl map dump --json` output, '
            "or CSV with a key,value header",
        )
    )


def _json_entries(at: EntryFile) -> Iterator[tuple[Any, Any]]:
    path, text, encode_line = at.path, at.text, at.encode_line
    try:
        doc = json.loads(text)  # JSON lines stop it at the end of the first line
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "entries" in doc:  # `map dump --json`
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise _bad(path, 1, "`entries` is not a list")
        for i, e in enumerate(entries):
            at.entry = i + 1
            yield _entry(path, i + 1, e, "entry")
        return
    if isinstance(encode_line, JsonLineEncoder):
        yield from _bulk_lines(at, encode_line)
    else:
        yield from _lines(at, enumerate(text.splitlines(), 1), encode_line)


def _bulk_lines(at: EntryFile, enc: JsonLineEncoder) -> Iterator[tuple[Any, Any]]:
    """The entries of JSON lines, every line at once when each is in the encoder's form:
    one regular expression over the text (``enc.findall``) and the packing of its groups
    in one loop (``enc.rows``), yielded as ``(ENCODED_MANY, (keys, values))``; the lines
    it cannot pack (a value of another form, out of range) one by one as :func:`_lines`.
    The groups are taken only when there is one per non-empty line: then the i-th is
    the i-th non-empty line's (a \\n-line holding a line break of str.splitlines, such as
    U+2028 in a string, would count twice as lines and once as a match)."""
    every = at.text.splitlines()
    groups = enc.findall(at.text)
    # matches <= non-blank lines <= non-empty lines: equal counts make them the same lines
    if len(groups) != len(every) - every.count(""):
        yield from _lines(at, enumerate(every, 1), enc)
        return
    lines: list[tuple[int, str]] = []  # (number, text) of the non-empty lines, when needed
    i = 0
    while i < len(groups):
        keys, values = enc.rows(groups, i)
        if keys:
            yield ENCODED_MANY, (keys, values)
            i += len(keys)
        if i < len(groups):
            lines = lines or [(n, ln) for n, ln in enumerate(every, 1) if ln]
            yield from _lines(at, lines[i : i + 1], None)
            i += 1


def _lines(
    at: EntryFile, lines: Iterable[tuple[int, str]], encode_line: LineEncoder | None
) -> Iterator[tuple[Any, Any]]:
    path = at.path
    # json.loads per line, without its wrapper: the C scanner (scan_once) of a decoder
    # made as json.loads makes its own, on lines that are one object and nothing else;
    # any other line (leading or trailing blanks, bad JSON) goes through json.loads
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.scanner
    for n, line in lines:
        at.line = n
        if encode_line is not None:
            raw = encode_line(line)
            if raw is not None:
                yield ENCODED, raw
                continue
        obj: Any = None
        if line[:1] == "{":
            try:
                obj, end = scan(line, 0)
            except (StopIteration, ValueError):
                end = -1
            if end != len(line):
                obj = None
        if obj is None:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except ValueError as e:
                raise _bad(path, n, f"not JSON: {e}") from None
        if type(obj) is dict and "key" in obj and "value" in obj:
            yield obj["key"], obj["value"]
        else:
            yield _entry(path, n, obj, "line")


def _entry(path: str, n: int, obj: Any, what: str) -> tuple[Any, Any]:
    if not isinstance(obj, dict) or "key" not in obj or "value" not in obj:
        raise _bad(path, n, f'{what} {n} is not an object with "key" and "value"')
    return obj["key"], obj["value"]


def _csv_entries(at: EntryFile) -> Iterator[tuple[Any, Any]]:
    path = at.path
    rows = csv.reader(io.StringIO(at.text))
    header = next(rows, None)
    names = [h.strip().lower() for h in header or []]
    if "key" not in names or "value" not in names:
        raise _bad(path, 1, "the first line must name the columns key and value")
    ki, vi = names.index("key"), names.index("value")
    while True:
        n = rows.line_num + 1  # the line the record starts on (a quoted field may span lines)
        row = next(rows, None)
        if row is None:
            return
        if not row or not any(c.strip() for c in row):
            continue
        at.line = n
        if len(row) <= max(ki, vi):
            raise _bad(path, n, f"{len(row)} field(s), the header names {len(names)}")
        yield row[ki].strip(), row[vi].strip()
