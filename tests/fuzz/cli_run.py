"""Run the ``bpfdsl`` command line in-process (``bpfdsl.cli.main``) and judge what it did.

A user-facing failure must be a diagnostic: exit 1, 2 or 3 and, on stderr, an
``error[code]: ...`` line (``--json``: an ``{"error": [{"code": ...}]}`` document on stdout).  An
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
RAW = re.compile(r"^error: (.*)$", re.M)
# what Python's own exception messages look like (the CLI's safety net prints str(e))
PYTHONIC = re.compile(
    r"\[Errno \d+\]|invalid literal for|has no attribute|codec can't|values to unpack"
    r"|index out of range|not subscriptable|unsupported operand|must be (?:str|int|bytes|real)"
    r"|object is not|NoneType|unhashable|not JSON serializable|^Expecting |argument of type"
    r"|out of range for|embedded null|^'[^']*'$|^\d+$|^[A-Z][a-z]+Error\b"
)


class _Out(io.TextIOWrapper):
    """A text stream with a ``.buffer`` (``compile -o -`` writes bytes there)."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="replace", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", "replace")


def run_cli(argv: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    """(exit code, stdout, stderr, escaped exception) of ``bpfdsl ARGV`` in this process."""
    from .api import cli_main as main

    out, err = _Out(), _Out()
    rc, exc = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as e:  # argparse: usage errors exit 2 with a message
            rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
        except Exception as e:
            exc = e
    return rc, out.text(), err.text(), exc


def normalize(msg: str) -> str:
    """A message without its variable parts (numbers, quoted names, paths): a signature."""
    msg = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", msg)
    msg = re.sub(r"/[^\s:]+", "PATH", msg)
    return re.sub(r"0x[0-9a-f]+|\d+", "N", msg)[:90]


def judge(argv: list[str], *, ok_codes=(0, 1, 2, 3)) -> Result:
    """Run ``bpfdsl ARGV`` in this process and say whether it behaved: ``ok`` (exit 0),
    ``error`` (a diagnostic, detail = its code), or the failure (``traceback``,
    ``raw-message``, ``bad-exit``)."""
    rc, out, err, exc = run_cli(argv)
    if exc is not None:
        r = exception_result(exc)
        return Result(
            "traceback", f"bpfdsl {_cmd(argv)}: {r.detail}", f"$ bpfdsl {' '.join(argv)}\n{r.text}"
        )
    return judge_output(argv, rc, out, err, ok_codes=ok_codes)


def _cmd(argv: list[str]) -> str:
    return next((a for a in argv if not a.startswith("-")), "?")


def judge_output(
    argv: list[str], rc: int | None, out: str, err: str, *, ok_codes=(0, 1, 2, 3)
) -> Result:
    """Judge a finished ``bpfdsl ARGV`` (exit code ``rc``, its stdout and stderr)."""
    cmd = _cmd(argv)
    both = out + err
    shown = f"$ bpfdsl {' '.join(argv)}   (exit {rc})\n{err[-3000:]}"
    if "Traceback (most recent call last)" in both:
        tb = both[both.index("Traceback (most recent call last)") :]
        last = [ln for ln in tb.strip().splitlines() if ln and not ln.startswith(" ")][-1:]
        what = last[0].split(":", 1)[0] if last else "?"
        frames = re.findall(r'File "[^"]*/bpfdsl/[^"]*", line \d+, in (\w+)', tb)
        where = f" in {frames[-1]}()" if frames else ""
        return Result(
            "traceback",
            f"bpfdsl {cmd}: {what}{where}",
            f"$ bpfdsl {' '.join(argv)}   (exit {rc})\n{tb[-4000:]}",
        )
    if rc not in ok_codes:
        return Result("bad-exit", f"bpfdsl {cmd}: exit {rc}", shown)
    if rc == 0:
        return Result("ok")
    codes = _codes(err) or _codes(out)  # --json: the error document is on stdout
    if codes:
        return Result("error", codes[0])
    m = RAW.search(err)
    raw = m.group(1) if m else (_json_raw(err) or _json_raw(out))
    if raw is not None and PYTHONIC.search(raw):
        return Result("raw-message", f"bpfdsl {cmd}: {normalize(raw)}", shown)
    if raw is not None:  # a sentence of the command's own (no packet was run, needs root)
        return Result("error", "message")
    if rc == 2 and "usage:" in both:  # argparse, or the help text of a bare `bpfdsl`
        return Result("error", "usage")
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
