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


@lru_cache(maxsize=1)
def _lark():
    from importlib.resources import files

    from lark import Lark

    try:
        text = files("bpfdsl.grammar").joinpath("bpfdsl.lark").read_text()
    except ModuleNotFoundError:  # run from a source tree that is not installed
        from pathlib import Path

        text = (Path(__file__).resolve().parents[1] / "grammar" / "bpfdsl.lark").read_text()
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
