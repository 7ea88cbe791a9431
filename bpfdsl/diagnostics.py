"""Diagnostics: the one error model of bpfdsl (leaf module).

Every user-facing error is a :class:`Diagnostic` carrying a :class:`Span`
(file, 1-based line and column).  Stages raise :class:`DiagnosticError`
(or a subclass); only ``bpfdsl.cli`` renders them and picks the exit code.

Rendering follows ruff/rustc: a concise one-line form
``file:line:col: error[code]: message`` and a full form with the source
line, a caret under the span, and ``help:``/``note:`` lines.
"""

from __future__ import annotations

from dataclasses import dataclass, field


def universal_newlines(text: str) -> str:
    """``text`` with CR LF and a lone CR turned into LF, as open() in text mode does: the
    lexer and this renderer count "\\n" only, so a lone CR would put a line:col off the
    lines an editor shows."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


@dataclass(frozen=True, slots=True)
class Span:
    """A source range. ``line``/``col`` are 1-based; ``end_*`` inclusive-exclusive like lark.

    Immutable, compared and hashed by value."""

    file: str
    line: int
    col: int
    end_line: int | None = None
    end_col: int | None = None

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


@dataclass(slots=True)
class Diagnostic:
    """One message.

    ``severity`` is ``"error"``, ``"warning"`` or ``"note"``; ``code`` is a stable
    kebab-case name (for example ``unknown-field``); ``hints`` are "what to do" lines
    rendered as ``help:``; ``notes`` are extra facts rendered as ``note:``; ``line_text``
    is the text of the span's line when the file itself may not be readable (the checker
    takes it from an object's line info), shown under the caret if the file cannot be read.
    Compared by value.  :meth:`render` is the one text form and :meth:`to_json` the one
    JSON form of every error bpfdsl reports.
    """

    severity: str
    code: str
    message: str
    span: Span | None = None
    hints: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    line_text: str | None = field(default=None, repr=False, compare=False)

    def concise(self) -> str:
        where = f"{self.span}: " if self.span else ""
        return f"{where}{self.severity}[{self.code}]: {self.message}"

    def render(self, source: str | None = None) -> str:
        """Full form with the source line and a caret; ``source`` is the file text.

        When ``source`` is None and the span names a readable file, the file is read.
        """
        out = [f"{self.severity}[{self.code}]: {self.message}"]
        if self.span is not None:
            out.append(f"  --> {self.span}")
            text = source
            if text is None:
                try:
                    with open(self.span.file, encoding="utf-8") as f:
                        text = f.read()
                except (OSError, UnicodeDecodeError):
                    text = None
            line = None
            if text is not None:
                # lines as the lexer counts them; splitlines() would also break at form
                # feed, U+2028 and other separators and show a wrong line
                lines = universal_newlines(text).split("\n")
                if 1 <= self.span.line <= len(lines):
                    line = lines[self.span.line - 1]
            if line is None:
                line = self.line_text
            if line is not None:
                src = line.rstrip("\r").expandtabs(1)
                num = str(self.span.line)
                pad = " " * len(num)
                width = 1
                if self.span.end_line == self.span.line and self.span.end_col:
                    width = max(1, self.span.end_col - self.span.col)
                out.append(f"{pad} |")
                out.append(f"{num} | {src}")
                out.append(f"{pad} | {' ' * (self.span.col - 1)}{'^' * width}")
        for n in self.notes:
            out.append(f"  = note: {n}")
        for h in self.hints:
            out.append(f"  = help: {h}")
        return "\n".join(out)

    def to_json(self) -> dict:
        """The JSON shape of an error (``bpfdsl ... --json`` on stderr, ``check --json``):
        ``severity``, ``code``, ``message``, ``file``/``line``/``col`` (1-based; null
        without a location), ``end_line``/``end_col``, ``hints`` and ``notes`` (lists)."""
        sp = self.span
        return {
            "severity": self.severity,
            "code": self.code,
            "message": self.message,
            "file": sp.file if sp else None,
            "line": sp.line if sp else None,
            "col": sp.col if sp else None,
            "end_line": sp.end_line if sp else None,
            "end_col": sp.end_col if sp else None,
            "hints": list(self.hints),
            "notes": list(self.notes),
        }


class DiagnosticError(Exception):
    """Raised by any stage with one or more diagnostics; ``str()`` is the concise form."""

    exit_code = 1

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic, source: str | None = None):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = list(diagnostics)
        self.source = source
        super().__init__("\n".join(d.concise() for d in self.diagnostics))

    def render(self) -> str:
        return "\n\n".join(d.render(self.source) for d in self.diagnostics)


class UsageError(DiagnosticError):
    """Unusable input (corrupt ELF, missing file, bad CLI value): exit code 2 where the CLI says so."""

    exit_code = 2


class HostError(DiagnosticError):
    """The machine is not as the command needs it, whatever the input: missing privileges,
    an interface that does not exist in this network namespace, bpffs that cannot be
    mounted.  Exit code 3 (the CLI's table: ``bpfdsl.cli.EXIT_CODES``)."""

    exit_code = 3


def error(
    code: str,
    message: str,
    span: Span | None = None,
    *,
    hint: str | None = None,
    note: str | None = None,
) -> Diagnostic:
    """Shorthand for an error :class:`Diagnostic` with at most one hint and one note."""
    return Diagnostic(
        "error",
        code,
        message,
        span,
        hints=[hint] if hint else [],
        notes=[note] if note else [],
    )
