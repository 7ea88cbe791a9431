"""Run the ``bpfdsl`` command line in-process (``bpfdsl.cli.main``) and judge what it did.

A user-facing failure must be a diagnostic: exit 1, 2 or 3 and, on stderr, an
``error[code]: ...`` line (``--json``: an ``{"error": [{"code": ...}]}`` document).  An
exception escaping :func:`bpfdsl.cli.main` is a traceback; ``error: <text>`` without a
code is the CLI's safety net printing a raw Python message (``cli.main`` catches OSError
and ValueError for that).
"""

from __future__ import annotations

import contextlib
import io
import json
import re

from .harness import Result, exception_result

DIAG = re.compile(r"^(?:error|warning)\[[a-z0-9]+(?:-[a-z0-9]+)*\]: ", re.M)
RAW = re.compile(r"^error: (?!no packet was run)(.*)$", re.M)  # run_cmds' own summary line


class _Out(io.TextIOWrapper):
    """A text stream with a ``.buffer`` (``compile -o -`` writes bytes there)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "replace")


def run_cli(argv: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    """(exit code, stdout, stderr, escaped exception) of ``bpfdsl ARGV`` in this process."""
    from bpfdsl.cli import main

    out, err = _Out(), _Out()
    rc, exc = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse: usage errors exit 2 with a message
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except Exception as e:  # noqa: BLE001 - judged below (CaseTimeout passes)
            exc = e
    return rc, out.text(), err.text(), exc


def normalize(msg: str) -> str:
    """A message without its variable parts (numbers, quoted names, paths): a signature."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
    msg = re.sub(r"/[^\s:]+", "PATH", msg)
    return re.sub(r"0x[0-9a-f]+|\d+", "N", msg)[:90]


def judge(argv: list[str], *, ok_codes=(0, 1, 2, 3)) -> Result:
    """Run ``bpfdsl ARGV`` and say whether it behaved: ``ok`` (exit 0), ``error`` (a
    diagnostic, detail = its code), or the failure (``traceback``, ``raw-message``,
    ``bad-exit``)."""
    rc, out, err, exc = run_cli(argv)
    cmd = next((a for a in argv if not a.startswith("-")), "?")
    if exc is not None:
        r = exception_result(exc)
        return Result(
            "traceback", f"bpfdsl {cmd}: {r.detail}", f"$ bpfdsl {' '.join(argv)}\n{r.text}"
        )
    both = out + err
    shown = f"$ bpfdsl {' '.join(argv)}   (exit {rc})\n{err[-3000:]}"
    if "Traceback (most recent call last)" in both:
        return Result("traceback", f"bpfdsl {cmd}: printed a traceback", shown)
    if rc not in ok_codes:
        return Result("bad-exit", f"bpfdsl {cmd}: exit {rc}", shown)
    if rc == 0:
        return Result("ok")
    codes = _codes(err)
    if codes:
        return Result("error", codes[0])
    m = RAW.search(err)
    raw = m.group(1) if m else _json_raw(err)
    if raw is not None:
        return Result("raw-message", f"bpfdsl {cmd}: {normalize(raw)}", shown)
    if rc == 2 and "usage:" in err:  # argparse
        return Result("error", "usage")
    if rc == 1 and "no packet was run" in err:
        return Result("error", "no-packet-run")
    if rc == 1 and cmd == "check" and ("REJECTED" in out or '"rejected"' in out):
        return Result("error", "rejected")
    if rc == 2 and cmd == "check" and ("CANNOT CHECK" in out or '"unchecked"' in out):
        return Result("error", "unchecked")
    return Result("bad-exit", f"bpfdsl {cmd}: exit {rc} without a message", shown)


def _codes(err: str) -> list[str]:
    found = [m.group(0).split("[", 1)[1].split("]", 1)[0] for m in DIAG.finditer(err)]
    if found:
        return found
    for line in err.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            errs = doc.get("error") if isinstance(doc, dict) else None
            if (
                isinstance(errs, list)
                and errs
                and all(isinstance(e, dict) and e.get("code") for e in errs)
            ):
                return [e["code"] for e in errs]
    return []


def _json_raw(err: str) -> str | None:
    """The message of a ``--json`` safety-net error (``{"error": "text"}``), else None."""
    for line in err.splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and isinstance(doc.get("error"), str):
                return doc["error"]
    return None
