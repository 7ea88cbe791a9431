"""The kernel verifier log, made readable: summary line, failing path, source lines.

Takes the log text of a rejected BPF_PROG_LOAD (log level 1) and the ProgramSpec; gives
a cilium-style one-line summary (the kernel's last error line, as cilium/ebpf's
``VerifierError`` does), the instruction that failed and its source line (from the log's
``; text @ file:line`` annotations or from BTF line info), and the log trimmed to the path
that failed (from the last ``from A to B:`` branch, or the start).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bpfdsl.diagnostics import Span
from bpfdsl.obj.spec import ProgramSpec

_INSN_RE = re.compile(r"^(\d+): \([0-9a-f]{2}\)")
_SRC_RE = re.compile(r"^; (.*) @ (.+):(\d+)$")
_PATH_RE = re.compile(r"^from \d+ to \d+: ")
_NOISE = (
    "processed ",
    "verification time",
    "stack depth",
    "mark_precise",
    "Func#",
    "func#",
    "number of ",
    "max_states_per_insn",
    "last_idx",
    "regs=",
    "parent ",
    "- call",
    "...",
    "Validating ",
)
MAX_DETAIL_LINES = 60
# Limits do_check hits before it ends the line of the instruction it was at (kernel
# verifier.c: "BPF program is too large. Processed %d insn", "The sequence of %d jumps is
# too complex."): a jump is printed without its newline, the message follows on that line.
_AFTER_INSN_RE = re.compile(
    r"(BPF program is too large\. Processed \d+ insn|The sequence of \d+ jumps is too complex\.)"
)


@dataclass(frozen=True, slots=True)
class LogSummary:
    """``message``: the one-line reason; ``insn``: failing slot (None if unknown);
    ``span``: source position of that insn; ``details``: the failing path, trimmed."""

    message: str
    insn: int | None
    span: Span | None
    details: str


def summarize(log: str, prog: ProgramSpec | None = None) -> LogSummary:
    """Summary of a rejection log (empty log -> empty message)."""
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    msg = ""
    for ln in reversed(lines):
        m = _AFTER_INSN_RE.search(ln)  # on an insn line or a line of its own
        if m is not None:
            msg = m.group(1)
            break
        if ln.startswith(_NOISE) or _INSN_RE.match(ln) or _SRC_RE.match(ln):
            continue
        msg = ln
        break
    insn = None
    span = None
    for ln in reversed(lines):
        m = _INSN_RE.match(ln)
        if m:
            insn = int(m.group(1))
            break
    start = 0
    for i in range(len(lines) - 1, -1, -1):
        if _PATH_RE.match(lines[i]):
            start = i
            break
    path = lines[start:]
    if insn is not None and prog is not None:
        li = prog.line_at(insn)
        if li is not None:
            span = Span(li.file, li.line, max(li.col, 1))
    if insn is not None and span is None:
        idx = max((i for i, ln in enumerate(path) if _INSN_RE.match(ln)), default=0)
        for ln in reversed(path[:idx]):
            m = _SRC_RE.match(ln)
            if m:
                span = Span(m.group(2), int(m.group(3)), 1)
                break
    if len(path) > MAX_DETAIL_LINES:
        path = (
            path[:10]
            + [f"... ({len(path) - MAX_DETAIL_LINES} lines; --log shows all)"]
            + path[-(MAX_DETAIL_LINES - 10) :]
        )
    if prog is not None and not any(_SRC_RE.match(ln) for ln in path):
        path = _annotate(path, prog)
    return LogSummary(msg, insn, span, "\n".join(path))


def _annotate(path: list[str], prog: ProgramSpec) -> list[str]:
    """Put ``; source @ file:line`` above instructions when the kernel did not."""
    out, last = [], None
    for ln in path:
        m = _INSN_RE.match(ln)
        if m:
            li = prog.line_at(int(m.group(1)))
            if li is not None and (li.file, li.line) != last:
                out.append(f"; {li.text.strip()} @ {li.file}:{li.line}")
                last = (li.file, li.line)
        out.append(ln)
    return out
