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
from typing import Any

from bpfdsl.abi.btf.values import JsonLineEncoder
from bpfdsl.diagnostics import UsageError, error

# the keys of entries already encoded by the map's line encoder (see read_entries'
# ``encode_line``): the value is (key bytes, value bytes), or for ENCODED_MANY (a list of
# key bytes, a list of value bytes) of many entries
ENCODED: Any = type("Encoded", (), {"__repr__": lambda self: "ENCODED"})()
ENCODED_MANY: Any = type("EncodedMany", (), {"__repr__": lambda self: "ENCODED_MANY"})()


LineEncoder = Callable[[str], "tuple[bytes, bytes] | None"]


def read_entries(path: str, encode_line: LineEncoder | None = None) -> Iterator[tuple[Any, Any]]:
    """The (key, value) entries of the file at ``path`` (``-``: stdin), in file order.
    ``encode_line`` (``MapView.json_line_encoder()``): JSON lines it encodes itself come
    as ``(ENCODED, (key bytes, value bytes))`` or, many lines at once,
    ``(ENCODED_MANY, (keys, values))`` (the bytes the map's encoder gives for the lines'
    keys and values), the others as Python values.  Raises UsageError naming the file and line of anything
    it cannot read (before the entries of that line are used: a bad line in a batch stops
    before that batch)."""
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
    head = text.lstrip()[:1]
    if head == "{":
        yield from _json_entries(path, text, encode_line)
    elif head:
        yield from _csv_entries(path, text)


def _bad(path: str, line: int, what: str) -> UsageError:
    return UsageError(
        error(
            "bad-file",
            f"{path}:{line}: {what}",
            hint='give {"key": K, "value": V} per line, `bpfdsl map dump --json` output, '
            "or CSV with a key,value header",
        )
    )


def _json_entries(
    path: str, text: str, encode_line: LineEncoder | None
) -> Iterator[tuple[Any, Any]]:
    try:
        doc = json.loads(text)  # JSON lines stop it at the end of the first line
    except ValueError:
        doc = None
    if isinstance(doc, dict) and "entries" in doc:  # `map dump --json`
        entries = doc["entries"]
        if not isinstance(entries, list):
            raise _bad(path, 1, "`entries` is not a list")
        for i, e in enumerate(entries):
            yield _entry(path, i + 1, e, "entry")
        return
    if isinstance(encode_line, JsonLineEncoder):
        yield from _bulk_lines(path, text, encode_line)
    else:
        yield from _lines(path, enumerate(text.splitlines(), 1), encode_line)


def _bulk_lines(path: str, text: str, enc: JsonLineEncoder) -> Iterator[tuple[Any, Any]]:
    """The entries of JSON lines, every line at once when each is in the encoder's form:
    one regular expression over the text (``enc.findall``) and the packing of its groups
    in one loop (``enc.rows``), yielded as ``(ENCODED_MANY, (keys, values))``; the lines
    it cannot pack (a value of another form, out of range) one by one as :func:`_lines`.
    The groups are taken only when there is one per non-empty line: then the i-th is
    the i-th non-empty line's (a \\n-line holding a line break of str.splitlines, such as
    U+2028 in a string, would count twice as lines and once as a match)."""
    every = text.splitlines()
    groups = enc.findall(text)
    # matches <= non-blank lines <= non-empty lines: equal counts make them the same lines
    if len(groups) != len(every) - every.count(""):
        yield from _lines(path, enumerate(every, 1), enc)
        return
    lines: list[tuple[int, str]] = []  # (number, text) of the non-empty lines, when needed
    at = 0
    while at < len(groups):
        keys, values = enc.rows(groups, at)
        if keys:
            yield ENCODED_MANY, (keys, values)
            at += len(keys)
        if at < len(groups):
            lines = lines or [(n, ln) for n, ln in enumerate(every, 1) if ln]
            yield from _lines(path, lines[at : at + 1], None)
            at += 1


def _lines(
    path: str, lines: Iterable[tuple[int, str]], encode_line: LineEncoder | None
) -> Iterator[tuple[Any, Any]]:
    # json.loads per line, without its wrapper: the C scanner (scan_once) of a decoder
    # made as json.loads makes its own, on lines that are one object and nothing else;
    # any other line (leading or trailing blanks, bad JSON) goes through json.loads
    scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]  # json.scanner
    for n, line in lines:
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


def _csv_entries(path: str, text: str) -> Iterator[tuple[Any, Any]]:
    rows = csv.reader(io.StringIO(text))
    header = next(rows, None)
    names = [h.strip().lower() for h in header or []]
    if "key" not in names or "value" not in names:
        raise _bad(path, 1, "the first line must name the columns key and value")
    ki, vi = names.index("key"), names.index("value")
    for n, row in enumerate(rows, 2):
        if not row or not any(c.strip() for c in row):
            continue
        if len(row) <= max(ki, vi):
            raise _bad(path, n, f"{len(row)} field(s), the header names {len(names)}")
        yield row[ki].strip(), row[vi].strip()
