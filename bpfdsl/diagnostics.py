"""Diagnostics: the one error model of bpfdsl (leaf module; imports only bpfdsl.record).

Every user-facing error is a :class:`Diagnostic` carrying a :class:`Span`
(file, 1-based line and column).  Stages raise :class:`DiagnosticError`
(or a subclass); only ``bpfdsl.cli`` renders them and picks the exit code.

Rendering follows ruff/rustc: a concise one-line form
``file:line:col: error[code]: message`` and a full form with the source
line, a caret under the span, and ``help:``/``note:`` lines.
"""

from __future__ import annotations

from .record import FrozenRecord, Record


class Span(FrozenRecord):
    """A source range. ``line``/``col`` are 1-based; ``end_*`` inclusive-exclusive like lark.

    Immutable by convention, compared and hashed by value (:class:`~bpfdsl.record.
    FrozenRecord`, not a dataclass: the parser makes one per AST node)."""

    __slots__ = ("file", "line", "col", "end_line", "end_col")

    def __init__(
        self,
        file: str,
        line: int,
        col: int,
        end_line: int | None = None,
        end_col: int | None = None,
    ) -> None:
        self.file = file
        self.line = line
        self.col = col
        self.end_line = end_line
        self.end_col = end_col

    def __str__(self) -> str:
        return f"{self.file}:{self.line}:{self.col}"


class Diagnostic(Record):
    """One message.

    ``severity`` is ``"error"``, ``"warning"`` or ``"note"``; ``code`` is a stable
    kebab-case name (for example ``unknown-field``); ``hints`` are "what to do" lines
    rendered as ``help:``; ``notes`` are extra facts rendered as ``note:``.  Compared by
    value, repr like a dataclass.
    """

    __slots__ = ("severity", "code", "message", "span", "hints", "notes")

    def __init__(
        self,
        severity: str,
        code: str,
        message: str,
        span: Span | None = None,
        hints: list[str] | None = None,
        notes: list[str] | None = None,
    ) -> None:
        self.severity = severity
        self.code = code
        self.message = message
        self.span = span
        self.hints = [] if hints is None else hints
        self.notes = [] if notes is None else notes

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
            if text is not None:
                # lines as the lexer counts them: "\n" only (splitlines() would also break
                # at form feed, U+2028 and other separators and show a wrong line)
                lines = text.split("\n")
                if 1 <= self.span.line <= len(lines):
                    src = lines[self.span.line - 1].rstrip("\r").expandtabs(1)
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
