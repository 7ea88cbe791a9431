"""Parser (front end, first stage): source text -> lark parse tree.

Uses ``grammar/bpfdsl.lark`` (shipped as package ``bpfdsl.grammar``) with lark's LALR
parser and contextual lexer, ``propagate_positions`` for spans.  The Lark object is
built once per process and cached on disk by lark (``cache=True``), so start-up is fast.
Syntax errors become :class:`~bpfdsl.diagnostics.DiagnosticError` with file:line:col.
"""

from __future__ import annotations

from functools import lru_cache

from .diagnostics import DiagnosticError, Span, error

_TOKEN_NAMES = {
    "NAME": "a name",
    "NUMBER": "a number",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "COLON": "':'",
    "COMMA": "','",
    "EQUAL": "'='",
    "STRING": "a string",
    "SEMICOLON": "';'",
    "LSQB": "'['",
    "RSQB": "']'",
    "MORETHAN": "'>'",
    "LESSTHAN": "'<'",
    "ELSE": "'else'",
    "ASSIGN_OP": "'='",
    "DOT": "'.'",
    "__ANON_0": "'->'",
}


# One lexer for the whole grammar ("basic"): the contextual lexer compiles a scanner per
# parser state on first use, which costs more per process than it saves.  Address
# literals win over NAME/NUMBER by terminal priority.
_OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def grammar_text() -> str:
    """The grammar: ``bpfdsl/grammar/bpfdsl.lark`` when installed (package ``bpfdsl.grammar``),
    ``grammar/bpfdsl.lark`` in a source tree.  Plain file reads: importlib.resources costs
    ~10 ms of imports per process; it stays the fallback (zip imports)."""
    from pathlib import Path

    here = Path(__file__).resolve().parent
    for p in (here / "grammar" / "bpfdsl.lark", here.parent / "grammar" / "bpfdsl.lark"):
        if p.is_file():
            return p.read_text()
    from importlib.resources import files

    return files("bpfdsl.grammar").joinpath("bpfdsl.lark").read_text()


def import_lark():
    """Import lark without the third-party ``regex`` module: lark imports it when installed
    (~17 ms) but only uses it with ``regex=True``, which bpfdsl does not set."""
    import sys

    if "lark" in sys.modules or "regex" in sys.modules:
        return
    sys.modules["regex"] = None  # makes `import regex` raise ImportError inside lark.utils
    try:
        import lark  # noqa: F401
    finally:
        del sys.modules["regex"]


@lru_cache(maxsize=1)
def _lark():
    import_lark()
    from lark import Lark

    text = grammar_text()
    try:
        return Lark(text, cache=True, **_OPTIONS)
    except OSError:  # cache dir not writable
        return Lark(text, **_OPTIONS)


def parse_tree(text: str, filename: str = "<input>"):
    """Parse ``text``; returns the lark Tree.  Raises DiagnosticError (code ``syntax``)."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput

    try:
        return _lark().parse(text)
    except UnexpectedInput as e:
        line = getattr(e, "line", None) or 1
        col = getattr(e, "column", None) or 1
        if line < 0:  # UnexpectedEOF has line -1
            lines = text.splitlines() or [""]
            line, col = len(lines), len(lines[-1]) + 1
        span = Span(filename, line, col)
        if isinstance(e, UnexpectedCharacters):
            ch = text[e.pos_in_stream] if e.pos_in_stream < len(text) else "end of input"
            msg = f"unexpected character {ch!r}"
            hint = "check for a typo or a missing operator"
        elif isinstance(e, UnexpectedEOF):
            msg = "unexpected end of input"
            hint = "a '}' or an expression is missing"
        else:
            tok = getattr(e, "token", None)
            shown = "end of input" if tok is None or tok.type == "$END" else repr(str(tok))
            msg = f"unexpected {shown}"
            exp = sorted(getattr(e, "expected", None) or getattr(e, "accepts", None) or [])
            names = [_TOKEN_NAMES[x] for x in exp if x in _TOKEN_NAMES]
            if names and len(exp) <= 6:
                hint = "expected " + " or ".join(names)
            else:
                hint = "check the syntax just before this point"
            if tok is None or tok.type == "$END":  # point just past the last character
                lines = text.rstrip().splitlines() or [""]
                span = Span(filename, len(lines), len(lines[-1]) + 1)
                hint = "the file ends inside a block or an expression: is a '}' missing?"
        raise DiagnosticError(error("syntax", msg, span, hint=hint), text) from None
