"""Parser generator (development tool, not shipped): ``grammar/bpfdsl.lark`` ->
``bpfdsl/lang/parser_tables.py``.

Runs lark (LALR(1), basic lexer, ``propagate_positions``, ``maybe_placeholders`` -- the
options bpfdsl has always parsed with) once and writes what lark computed as plain Python
literals: the lexer's terminal regexps as one alternation in lark's matching order (what
lark's ``Scanner`` compiles; the first alternative that matches wins), lark's keyword table
(``_create_unless``: a NAME that spells a keyword gets the keyword's type), the LALR action
and goto table, and per rule lark's parse-tree shaping (``parse_tree_builder``: which children
are kept, which inlined ``_rule`` children are spliced, where ``[x]`` placeholders go, which
``?rule`` returns its single child).  :mod:`bpfdsl.lang.parser` runs these tables, so lark
is a development dependency only (the ``test`` extra of pyproject.toml).

Regenerate after editing the grammar (tests/lang/test_parser_tables.py fails until you do)::

    python3 tools/gen_parser_tables.py

lark numbers the LALR states differently from run to run (set iteration order), so a
regenerated file differs from the committed one in state numbers even for the same grammar;
the parser is the same (the tests compare it with lark itself).
"""

from __future__ import annotations

import hashlib
import pprint
import sys
from pathlib import Path

import lark
from lark import Lark
from lark.parse_tree_builder import maybe_create_child_filter
from lark.parsers.lalr_analysis import Shift

ROOT = Path(__file__).resolve().parent.parent
GRAMMAR = ROOT / "grammar" / "bpfdsl.lark"
TABLES = ROOT / "bpfdsl" / "lang" / "parser_tables.py"

# The lark options the tables are made with (lark.Lark keyword arguments).
LARK_OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)


def grammar_sha256(text: str) -> str:
    """Hex SHA-256 of the grammar text (UTF-8): the key the tables carry."""
    return hashlib.sha256(text.encode()).hexdigest()


def lark_parser(grammar: str) -> Lark:
    """lark's own parser of ``grammar`` with the options the tables are made with (the
    reference the tests compare :func:`bpfdsl.lang.parser.parse` with)."""
    return Lark(grammar, **LARK_OPTIONS)


def _rule_shape(rule, filter_fn) -> tuple:
    """(origin, size, kind, callback, include, append_none) for one lark rule.

    ``kind``: 0 = pass the single child through (``?rule`` with one child, nothing filtered),
    1 = call ``callback``, 2 = inline (``_rule``: the filtered children are spliced into the
    parent), 3 = ``?rule`` returning its one kept child (others filtered out).
    ``include``: tuple of (index, splice, nones_before) as lark's ChildFilterLALR, or None.
    """
    origin = str(rule.origin.name)
    size = len(rule.expansion)
    callback = str(rule.alias or rule.options.template_source or origin)
    empty = rule.options.empty_indices or None
    part = filter_fn(rule.expansion, rule.options.keep_all_tokens, False, empty)
    include = append_none = None
    if part is not None:
        args = part.args
        if len(args) == 2:  # ChildFilterLALR(to_include, nones_to_add)
            include, append_none = tuple(tuple(x) for x in args[0]), args[1]
        else:  # ChildFilterLALR_NoPlaceholders([(i, splice)])
            include, append_none = tuple((i, s, 0) for i, s in args[0]), 0
    if origin.startswith("_"):
        if rule.options.expand1:
            raise ValueError(f"unsupported grammar construct: inlined ?rule {origin}")
        return (origin, size, 2, None, include, append_none)
    if rule.options.expand1 and not rule.alias:
        kept = size if include is None else len(include)
        splices = include is not None and any(s for _, s, _ in include)
        if kept != 1 or splices or append_none or (include and include[0][2]):
            raise ValueError(f"unsupported grammar construct: ?{origin} with {kept} children")
        if include is None:
            return (origin, size, 0, None, None, 0)
        return (origin, size, 3, None, include, 0)
    return (origin, size, 1, callback, include, append_none or 0)


def generate(grammar: str) -> str:
    """The text of ``parser_tables.py`` for ``grammar``."""
    lk = lark_parser(grammar)
    front = lk.parser
    lexer = front.lexer
    if lexer.g_regex_flags:
        raise ValueError("unsupported grammar: global regexp flags")
    scanner = lexer.scanner  # builds lark's _create_unless keyword callbacks too
    # the alternation lark's Scanner compiles (it splits it only past Python's old limit of
    # 100 groups; one pattern tried alternative by alternative matches the same)
    pattern = "|".join(f"(?P<{t.name}>{t.pattern.to_regexp()})" for t in scanner.terminals)
    keywords = {}
    for name, cb in lexer.callback.items():
        table = {}
        for t in cb.scanner.terminals:
            if t.pattern.type != "str":
                raise ValueError(f"unsupported keyword terminal {t.name}")
            table[str(t.pattern.value)] = str(t.name)
        keywords[str(name)] = table
    token_types = sorted(str(t.name) for t in lk.terminals if t.pattern.type == "re")
    pt = front.parser.parser.parse_table
    rules = list(lk.rules)
    rule_index = {r: i for i, r in enumerate(rules)}
    states = {}
    for st, actions in sorted(pt.states.items()):
        row = {}
        for sym, (action, arg) in sorted(actions.items()):
            row[str(sym)] = arg if action is Shift else -1 - rule_index[arg]
        states[st] = row
    shapes = [_rule_shape(r, maybe_create_child_filter) for r in rules]
    start = "start"
    out = [
        '"""Generated by ``python3 tools/gen_parser_tables.py`` from grammar/bpfdsl.lark: do not edit.',
        "",
        "LALR(1) tables and lexer of the bpfdsl grammar as lark computes them (see the tool).",
        '"""',
        "",
        "# fmt: off",
        f"GRAMMAR_SHA256 = {grammar_sha256(grammar)!r}",
        f"LARK_VERSION = {lark.__version__!r}",
        f"START_STATE = {pt.start_states[start]!r}",
        f"END_STATE = {pt.end_states[start]!r}",
        "# lexer: one alternation of named groups (terminal names), tried in order, first",
        "# match wins (lark's Scanner)",
        f"PATTERN = {pprint.pformat(pattern, width=100)}",
        f"IGNORE = frozenset({sorted(map(str, lexer.ignore_types))!r})",
        f"NEWLINE_TYPES = frozenset({sorted(map(str, lexer.newline_types))!r})",
        f"KEYWORDS = {pprint.pformat(keywords, width=100)}",
        "# terminals the builder gets as Token objects (the others: their text)",
        f"TOKEN_TYPES = frozenset({token_types!r})",
        "# rules: (origin, size, kind, callback, include, append_none); see the tool's _rule_shape",
        "RULES = (",
        *(f"    {shape!r}," for shape in shapes),
        ")",
        "# state -> {symbol: n}: terminal n >= 0 shift to state n, n < 0 reduce rule -1-n;",
        "# nonterminal n: goto state n",
        "STATES = {",
        *(f"    {st}: {row!r}," for st, row in states.items()),
        "}",
        "",
    ]
    return "\n".join(out)


def main() -> int:
    """Write ``bpfdsl/lang/parser_tables.py`` from ``grammar/bpfdsl.lark``."""
    TABLES.write_text(generate(GRAMMAR.read_text()))
    print(f"wrote {TABLES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
