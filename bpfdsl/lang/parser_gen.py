"""Parser generator (build time only): ``grammar/bpfdsl.lark`` -> ``bpfdsl/lang/parser_tables.py``.

Runs lark (LALR(1), basic lexer, ``propagate_positions``, ``maybe_placeholders`` -- the
options bpfdsl has always parsed with) once and writes what lark computed as plain Python
literals: the lexer's terminal regexps in lark's matching order, lark's keyword table
(``_create_unless``: a NAME that spells a keyword gets the keyword's type), the LALR action
and goto table, and per rule lark's parse-tree shaping (``parse_tree_builder``: which children
are kept, which inlined ``_rule`` children are spliced, where ``[x]`` placeholders go, which
``?rule`` returns its single child).  :mod:`bpfdsl.lang.parser` runs these tables without
importing lark, so ``bpfdsl compile`` does not pay lark's import and grammar load.

Regenerate after editing the grammar (tests/test_front_speed.py fails until you do)::

    python3 -m bpfdsl.lang.parser_gen
"""

from __future__ import annotations

import hashlib
import pprint
import sys
from pathlib import Path

# The lark options the tables are made with (lark.Lark keyword arguments).
LARK_OPTIONS = dict(parser="lalr", lexer="basic", propagate_positions=True, maybe_placeholders=True)

TABLES = Path(__file__).resolve().parent / "parser_tables.py"


def grammar_sha256(text: str) -> str:
    """Hex SHA-256 of the grammar text (UTF-8): the key the tables carry."""
    return hashlib.sha256(text.encode()).hexdigest()


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


def _sre_programs(patterns: list[str]) -> tuple:
    """((major, minor), _sre.MAGIC, _sre.CODESIZE, [(flags, code, groups, groupindex,
    indexgroup)] per pattern): what ``re._compiler.compile`` hands to ``_sre.compile``
    (CPython 3.10-3.13 Lib/re/_compiler.py), so a process of the same Python skips
    compiling the lexer's regexps (~1-2 ms)."""
    import _sre

    try:
        from re import _compiler, _parser
    except ImportError:  # Python 3.10
        import sre_compile as _compiler
        import sre_parse as _parser

    progs = []
    for pat in patterns:
        p = _parser.parse(pat, 0)
        code = tuple(int(x) for x in _compiler._code(p, 0))
        groupindex = dict(p.state.groupdict)
        indexgroup = [None] * p.state.groups
        for k, i in groupindex.items():
            indexgroup[i] = k
        progs.append((int(p.state.flags), code, p.state.groups - 1, groupindex, tuple(indexgroup)))
    return (tuple(sys.version_info[:2]), _sre.MAGIC, _sre.CODESIZE, progs)


def generate(grammar: str) -> str:
    """The text of ``parser_tables.py`` for ``grammar`` (needs lark)."""
    import lark
    from lark import Lark
    from lark.parse_tree_builder import maybe_create_child_filter
    from lark.parsers.lalr_analysis import Shift

    lk = Lark(grammar, **LARK_OPTIONS)
    front = lk.parser
    lexer = front.lexer
    scanner = lexer.scanner  # builds lark's _create_unless keyword callbacks too
    patterns = [m.pattern for m in scanner._mres]
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
        '"""Generated by ``python3 -m bpfdsl.lang.parser_gen`` from grammar/bpfdsl.lark: do not edit.',
        "",
        "LALR(1) tables and lexer of the bpfdsl grammar as lark computes them (see parser_gen).",
        '"""',
        "",
        "# fmt: off",
        f"GRAMMAR_SHA256 = {grammar_sha256(grammar)!r}",
        f"LARK_VERSION = {lark.__version__!r}",
        f"START_STATE = {pt.start_states[start]!r}",
        f"END_STATE = {pt.end_states[start]!r}",
        "# lexer: alternations tried in order, first match wins (lark's Scanner)",
        f"PATTERNS = {pprint.pformat(patterns, width=100)}",
        "# the PATTERNS as compiled by this Python's re (sre code), for _sre.compile; used",
        "# only by the same Python version and sre engine (parser._compile_patterns)",
        f"SRE = {_sre_programs(patterns)!r}",
        f"IGNORE = frozenset({sorted(map(str, lexer.ignore_types))!r})",
        f"NEWLINE_TYPES = frozenset({sorted(map(str, lexer.newline_types))!r})",
        f"KEYWORDS = {pprint.pformat(keywords, width=100)}",
        "# terminals the builder gets as Token objects (the others: their text)",
        f"TOKEN_TYPES = frozenset({token_types!r})",
        "# rules: (origin, size, kind, callback, include, append_none); see parser_gen._rule_shape",
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
    """Write ``bpfdsl/lang/parser_tables.py`` from the grammar next to the package."""
    from bpfdsl.lang.parser import grammar_text

    TABLES.write_text(generate(grammar_text()))
    print(f"wrote {TABLES}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
