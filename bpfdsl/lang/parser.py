"""Parser (front end, first stage): source text -> AST.

The grammar is ``grammar/bpfdsl.lark`` (shipped as package ``bpfdsl.grammar``), LALR(1)
with lark's basic lexer, ``propagate_positions`` and ``maybe_placeholders``.  lark computes
the lexer and the LALR tables at development time (``tools/gen_parser_tables.py`` writes
:mod:`bpfdsl.lang.parser_tables`; lark is not a run-time dependency); :func:`parse` runs
those tables and calls the AST builder's method for each reduced rule
(:mod:`bpfdsl.lang.build`), so no parse tree is made.  It lexes, shapes children and
propagates positions exactly as lark does, so spans and error messages are lark's
(tests/lang/test_parser_tables.py compares the two).  Syntax errors become
:class:`~bpfdsl.diagnostics.DiagnosticError` with file:line:col.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from bpfdsl.diagnostics import Diagnostic, DiagnosticError, Span, error
from bpfdsl.lang import c_names
from bpfdsl.lang import parser_tables as tables

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

# The longest name: names become BTF names (maps, programs, structs, fields, configs), and
# the kernel refuses BTF names longer than KSYM_NAME_LEN, 512 (kernel/bpf/btf.c
# __btf_name_valid); LLVM also truncates local value names past 1024 characters.
MAX_NAME_LEN = 512


@dataclass(eq=False, slots=True)
class Token:
    """A lexed token: ``type`` (lark terminal name), ``value`` (its text); ``line``/``column``
    1-based start, ``end_line``/``end_column`` one past its end (lark's convention);
    ``start_pos`` the character offset.  ``str(token)`` is the text."""

    type: str
    value: str
    line: int
    column: int
    end_line: int | None
    end_column: int | None
    start_pos: int

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Token({self.type!r}, {self.value!r})"


# The lexer: the terminals' regexps as one alternation of named groups in lark's order.
_LEXER = re.compile(tables.PATTERN)


def _rules() -> tuple:
    """``tables.RULES`` with an ``include`` that only selects children (no splice, no
    placeholder) turned into a list of their indexes."""
    rules = []
    for origin, size, kind, cb, include, append_none in tables.RULES:
        sel: tuple | list[int] | None = include
        if include is not None and not append_none and not any(s or k for _, s, k in include):
            sel = [i for i, _, _ in include]
        rules.append((origin, size, kind, cb, sel, append_none))
    return tuple(rules)


_RULES = _rules()


# (state below, top state, lookahead) -> top state after the run of single-child ?rule
# reductions that lookahead causes there (expr -> or_expr -> ... -> atom: a dozen per
# operand); filled as the parser meets them, once per process.
_chains: dict[tuple[int, int, str], int] = {}


def _chain(states: dict, rules: tuple, key: tuple[int, int, str]) -> int:
    below, top, typ = key
    while True:
        act = states[top].get(typ)
        if act is None or act >= 0 or rules[-1 - act][2] != 0:
            return top
        top = states[below][rules[-1 - act][0]]


def parse(text: str, filename: str, actions: object) -> object:
    """Parse ``text`` and return what ``actions`` builds for the start rule.

    ``actions`` has one method per grammar rule (alias or rule name) taking ``(pos,
    children)``: ``pos`` is ``(line, col, end_line, end_col)`` of the text the rule covered
    (lark's propagate_positions, 1-based, end exclusive) or None when it covered none.
    Raises DiagnosticError (code ``syntax``) for text outside the grammar; a DiagnosticError
    raised by an action is re-raised after the whole text parsed (syntax errors first).
    """
    mre = _LEXER
    rules = _RULES
    states = tables.STATES
    keywords = tables.KEYWORDS
    ignore = tables.IGNORE
    newline_types = tables.NEWLINE_TYPES
    end_state = tables.END_STATE
    token_types = tables.TOKEN_TYPES
    cbs: dict[str, Callable] = {}  # rule callback name -> the bound action
    chains = _chains
    state_stack = [tables.START_STATE]
    vals: list = []
    poss: list = []
    failed: DiagnosticError | None = None
    n = len(text)
    pos = 0
    line = 1
    line_start = 0
    while True:
        # ---- next token (lark BasicLexer.next_token) ----
        if pos < n:
            m = mre.match(text, pos)
            if m is None:
                raise syntax_error(text, filename, line, pos - line_start + 1, char_pos=pos)
            typ = m.lastgroup
            assert typ is not None  # every alternative of the pattern is a named group
            val = m.group()
            start, sline, scol = pos, line, pos - line_start + 1
            if (
                typ == "NUMBER"
                and m.end() < n
                and (text[m.end()].isalnum() or text[m.end()] == "_")
            ):
                raise _bad_number(text, filename, sline, scol, pos)
            if typ in newline_types:
                nl = val.count("\n")
                if nl:
                    line += nl
                    line_start = pos + val.rindex("\n") + 1
            pos = m.end()
            if pos - start > MAX_NAME_LEN and typ == "NAME":
                raise _long_name(text, filename, sline, scol, pos - start)
            if typ in ignore:
                continue
            kw = keywords.get(typ)
            if kw is not None:
                typ = kw.get(val, typ)
            ecol = pos - line_start + 1
            tpos = (sline, scol, line, ecol)
            # the builder gets regexp terminals (names, literals) as Tokens, the fixed
            # strings (keywords, operators) as their text
            tok = Token(typ, val, sline, scol, line, ecol, start) if typ in token_types else val
        else:
            typ = "$END"
            tok = None
        # ---- feed it (lark ParserState.feed_token) ----
        while True:
            row = states[state_stack[-1]]
            act = row.get(typ)
            if act is None:
                expected = {s for s in row if s.isupper()}
                if tok is not None and not isinstance(tok, Token):
                    tok = Token(typ, tok, *tpos, start)
                raise syntax_error(text, filename, 0, 0, token=tok, expected=expected)
            if act >= 0:
                state_stack.append(act)
                vals.append(tok)
                poss.append(tpos)
                break
            origin, size, kind, cb, include, append_none = rules[-1 - act]
            if kind == 0:  # ?rule passing its single child through: the value stays
                key = (state_stack[-2], state_stack[-1], typ)
                top = chains.get(key)
                if top is None:
                    top = chains[key] = _chain(states, rules, key)
                state_stack[-1] = top
                continue
            if size:
                children = vals[-size:]
                cpos = poss[-size:]
                del vals[-size:], poss[-size:], state_stack[-size:]
                first, last = cpos[0], cpos[-1]
                if first is None or last is None:  # rare: an empty x* at an end
                    ps = [p for p in cpos if p is not None]
                    first, last = (ps[0], ps[-1]) if ps else (None, None)
                rpos = None if first is None else (first[0], first[1], last[2], last[3])
            else:
                children, rpos = [], None
            if type(include) is list:  # plain selection of children
                filtered = [children[i] for i in include]
            elif include is not None:
                filtered = []
                for i, splice, nones in include:
                    if nones:
                        filtered += [None] * nones
                    if splice:
                        if filtered:
                            filtered += children[i]
                        else:  # left recursion (x*): reuse the list, like lark
                            filtered = children[i]
                    else:
                        filtered.append(children[i])
                if append_none:
                    filtered += [None] * append_none
            else:
                filtered = children
            if kind == 1:
                value = None
                if failed is None:
                    f = cbs.get(cb)
                    if f is None:
                        f = cbs[cb] = getattr(actions, cb)
                    try:
                        value = f(rpos, filtered)
                    except DiagnosticError as e:
                        failed = e  # report after the syntax check of the rest, like lark
            elif kind == 2:  # _rule: spliced into the parent
                value = filtered
            else:  # ?rule keeping one of its children
                value = filtered[0]
            state_stack.append(states[state_stack[-1]][origin])
            vals.append(value)
            poss.append(rpos)
            if tok is None and state_stack[-1] == end_state:
                if failed is not None:
                    raise failed
                return vals[-1]


def syntax_error(
    text: str,
    filename: str,
    line: int,
    col: int,
    *,
    char_pos: int | None = None,
    token: Token | None = None,
    expected: set[str] | None = None,
) -> DiagnosticError:
    """The error for a lexer failure at character offset ``char_pos`` (``line``/``col``
    there, 1-based) or for an unexpected ``token`` (None or end of input: past the last
    character); ``expected`` names the terminals the grammar allowed there."""
    return DiagnosticError(_syntax_diag(text, filename, line, col, char_pos, token, expected), text)


def _bad_number(text: str, filename: str, line: int, col: int, pos: int) -> DiagnosticError:
    """A number run into letters (``0x``, ``12ab``, ``0b2``): one error at its start, not
    a number followed by a name."""
    end = pos
    while end < len(text) and (text[end].isalnum() or text[end] == "_"):
        end += 1
    d = error(
        "bad-literal",
        f"malformed number {text[pos:end]!r}",
        Span(filename, line, col),
        hint="write decimal (1500), hex with digits (0x5dc) or binary (0b101); "
        "a name cannot start with a digit",
    )
    return DiagnosticError(d, text)


def _long_name(text: str, filename: str, line: int, col: int, length: int) -> DiagnosticError:
    """A name longer than MAX_NAME_LEN characters."""
    d = error(
        "name-too-long",
        f"this name is {length} characters long; names have at most {MAX_NAME_LEN}",
        Span(filename, line, col),
        hint=f"shorten it (the kernel's BTF refuses longer names: KSYM_NAME_LEN {MAX_NAME_LEN})",
    )
    return DiagnosticError(d, text)


def _unterminated_comment(span: Span) -> Diagnostic:
    return error("syntax", "unterminated comment: `/*` without `*/`", span,
                 hint="close the comment with `*/`")  # fmt: skip


def _syntax_diag(
    text: str,
    filename: str,
    line: int,
    col: int,
    char_pos: int | None,
    token: Token | None,
    expected: set[str] | None,
) -> Diagnostic:
    if char_pos is not None:
        span = Span(filename, line or 1, col or 1)
        if text.startswith('"', char_pos):
            hint = 'close it with `"` before the end of the line (use \\" for a quote inside)'
            return error("syntax", "unterminated string", span, hint=hint)
        if text.startswith("/*", char_pos):
            return _unterminated_comment(span)
        ch = text[char_pos] if char_pos < len(text) else "end of input"
        return error(
            "syntax",
            f"unexpected character {ch!r}",
            span,
            hint=c_names.syntax_hint(text, char_pos, None, set())
            or "check for a typo or a missing operator",
        )
    if token is None or token.type == "$END":
        lines = text.rstrip().split("\n")  # "\n" only, as the lexer counts lines
        span = Span(filename, len(lines), len(lines[-1]) + 1)
        hint = "the file ends inside a block or an expression: is a '}' missing?"
        return error("syntax", "unexpected end of input", span, hint=hint)
    span = Span(filename, token.line or 1, token.column or 1)
    start = getattr(token, "start_pos", -1)
    if start is not None and start >= 0 and text.startswith("/*", start):
        return _unterminated_comment(span)
    exp = sorted(expected or [])
    names = [_TOKEN_NAMES[x] for x in exp if x in _TOKEN_NAMES]
    if names and len(exp) <= 6:
        hint = "expected " + " or ".join(names)
    else:
        hint = "check the syntax just before this point"
    word = str(token.value)
    if word.isidentifier() and token.type == word.upper() and "NAME" in exp:
        hint = f"`{word}` is a keyword of the language: pick another name"
    if start is not None and start >= 0:  # C syntax: name the bpfdsl form (lang.c_names)
        hint = c_names.syntax_hint(text, start, word, set(exp)) or hint
        typo = _misspelt_keyword(text, start)
        if typo is not None:  # `lett x = ...`, `licence "GPL"`: the line's first word
            at, first, kw = typo
            span = Span(filename, token.line or 1, at + 1)
            return error("syntax", f"unexpected {first!r}", span, hint=f"did you mean `{kw}`?")
    return error("syntax", f"unexpected {str(token.value)!r}", span, hint=hint)


# the words that begin a statement or a declaration (grammar/bpfdsl.lark)
_LEADING_KEYWORDS = ("let", "return", "if", "for", "while", "match", "break", "continue",
                     "license", "map", "config", "const", "fn", "struct", "header", "global")  # fmt: skip


def _misspelt_keyword(text: str, pos: int) -> tuple[int, str, str] | None:
    """(column, word, keyword) when the line holding ``pos`` starts with a word that is not
    a keyword but is close to a leading one (`lett`, `licence`), followed by a name or a
    string (which no expression is): the error is there, not where the parser stopped."""
    line_start = text.rfind("\n", 0, pos) + 1
    line_end = text.find("\n", pos)
    line = text[line_start : line_end if line_end >= 0 else len(text)]
    stripped = line.lstrip()
    words = stripped.split(None, 1)
    first = words[0] if words else ""
    if not first.isidentifier() or first in _LEADING_KEYWORDS or len(words) < 2:
        return None
    nxt = words[1][0]
    if not (nxt.isalpha() or nxt in '_"'):  # `WORD NAME`, `WORD "..."`: no expression
        return None
    close = difflib.get_close_matches(first, _LEADING_KEYWORDS, n=1, cutoff=0.7)
    if not close:
        return None
    return len(line) - len(stripped), first, close[0]


def grammar_text() -> str:
    """The grammar: ``grammar/bpfdsl.lark`` when this package runs from a source tree (a
    ``pyproject.toml`` next to ``bpfdsl/``), else the copy installed as package data
    (``bpfdsl.grammar``)."""
    root = Path(__file__).resolve().parents[2]
    if (root / "pyproject.toml").is_file() and (root / "grammar" / "bpfdsl.lark").is_file():
        return (root / "grammar" / "bpfdsl.lark").read_text()
    return files("bpfdsl.grammar").joinpath("bpfdsl.lark").read_text()
