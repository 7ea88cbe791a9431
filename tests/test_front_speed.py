"""The front end stays cheap by design (issue 2, compile time): the parser runs tables that
``bpfdsl.lang.parser_gen`` generated from the grammar (no lark at run time), and they must say
exactly what lark says; importing the front end or checking a program loads neither lark,
llvmlite nor ``dataclasses`` (whose class creation exec()s code at import)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang import ast, parser_tables
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.parser import grammar_text, parse_tree
from bpfdsl.lang.parser_gen import grammar_sha256

ROOT = Path(__file__).resolve().parent.parent
PROGS = sorted((ROOT / "progs").glob("*.bpfd"))


def test_parser_tables_match_the_grammar():
    assert parser_tables.GRAMMAR_SHA256 == grammar_sha256(grammar_text()), (
        "grammar/bpfdsl.lark changed: run `python3 -m bpfdsl.lang.parser_gen` and commit "
        "bpfdsl/lang/parser_tables.py"
    )


def _corpus() -> list[str]:
    """The reference programs, and each cut and spliced at random (bounded, fixed seed)."""
    rnd = random.Random(2)
    texts = [p.read_text() for p in PROGS]
    pieces = ["{", "}", "(", ")", ";", "=", "->", "let", "else", "10.0.0.1/8", "::1", "/*", "@"]
    out = list(texts)
    for t in texts:
        toks = re.findall(r"\w+|[^\w\s]+|\s+", t)
        for _ in range(12):
            tt = list(toks)
            i = rnd.randrange(len(tt))
            r = rnd.random()
            if r < 0.4:
                del tt[i]
            elif r < 0.8:
                tt.insert(i, rnd.choice(pieces))
            else:
                tt = tt[:i]
            out.append("".join(tt))
    return out + ["", "// only a comment\n", "xdp fn f(ctx) {", "/* open"]


def _outcome_lark(text: str):
    try:
        tree = parse_tree(text, "t.bpfd")
    except DiagnosticError as e:
        return "error", e.render()
    spans = set()
    for sub in tree.iter_subtrees():
        if not sub.meta.empty:
            m = sub.meta
            spans.add((m.line, m.column, m.end_line, m.end_column))
    return "ok", spans


def _outcome_ours(text: str):
    try:
        prog = parse_program(text, "t.bpfd")
    except DiagnosticError as e:
        if e.diagnostics[0].code != "syntax":
            return "ok", None  # a literal error after a clean parse (lark parsed it too)
        return "error", e.render()
    spans, todo = set(), list(prog.items)
    while todo:
        n = todo.pop()
        if isinstance(n, ast.Node):
            s = n.span
            spans.add((s.line, s.col, s.end_line, s.end_col))
            todo.extend(v for k, v in vars(n).items() if k != "span")
        elif isinstance(n, (list, tuple)):
            todo.extend(n)
        elif isinstance(n, dict):
            todo.extend(n.values())
    return "ok", spans


def test_generated_parser_agrees_with_lark():
    """Same accept/reject, the same syntax error text (line, column, caret, hint), and
    every AST node's span is the position lark gives the rule it came from."""
    pytest.importorskip("lark")
    corpus = _corpus()
    assert len(corpus) > 150
    n_err = 0
    for text in corpus:
        lk, ours = _outcome_lark(text), _outcome_ours(text)
        assert lk[0] == ours[0], text
        if lk[0] == "error":
            n_err += 1
            assert lk[1] == ours[1], text
        elif ours[1] is not None:
            assert ours[1] <= lk[1], (text, sorted(ours[1] - lk[1])[:5])
    assert n_err > 50  # the corpus does exercise syntax errors


# Modules loaded by the front end, beyond what the interpreter had at start (site hooks of
# an editable install load typing/ipaddress themselves).  ipaddress is the front end's own
# import (IPv6 literals, lang/build.py), so it is not in the list.
PROBE = """
import json, sys
before = set(sys.modules)
import bpfdsl.lang.build, bpfdsl.lang.sema.analyzer, bpfdsl.lang.types, bpfdsl.lang.headers, bpfdsl.diagnostics
new = set(sys.modules) - before
after_import = sorted(m for m in ("lark", "llvmlite", "dataclasses", "typing") if m in new)
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.sema.analyzer import check
text = open(sys.argv[1]).read()
check(parse_program(text, sys.argv[1]), sys.argv[1])
new = set(sys.modules) - before
after_check = sorted(m for m in ("lark", "llvmlite") if m in new)
print(json.dumps([after_import, after_check]))
"""


def test_front_end_imports_no_parser_generator_backend_or_dataclasses():
    prog = ROOT / "progs" / "xdp_udp_filter.bpfd"
    out = subprocess.run(
        [sys.executable, "-c", PROBE, str(prog)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    after_import, after_check = json.loads(out)
    assert after_import == [], f"importing the front end loaded {after_import}"
    assert after_check == [], f"parsing and checking a program loaded {after_check}"


def test_front_end_modules_define_no_dataclasses():
    import importlib

    names = ["lang.ast", "lang.types", "lang.headers", "diagnostics", "lang.parser", "lang.build"]
    names += ["lang.sema.analyzer", "lang.sema.decls", "lang.sema.stmt", "lang.sema.expr"]
    names += ["lang.sema.ops"]
    made = []
    for n in names:
        mod = importlib.import_module(f"bpfdsl.{n}")
        for v in vars(mod).values():
            if isinstance(v, type) and v.__module__ == mod.__name__:
                if "__dataclass_fields__" in vars(v):
                    made.append(f"{n}.{v.__name__}")
    assert made == []


def test_lexer_regexps_are_what_re_compile_makes():
    """The lexer's regexps built from the sre code in the tables equal ``re.compile``'s
    (``Pattern.__eq__`` compares pattern, flags and code); on the Python that generated
    the tables the stored code is exactly what its ``re`` makes."""
    from bpfdsl.lang.parser import _compile_patterns
    from bpfdsl.lang.parser_gen import _sre_programs

    pats = parser_tables.PATTERNS
    assert _compile_patterns(parser_tables) == [re.compile(p) for p in pats]
    if parser_tables.SRE[0] == tuple(sys.version_info[:2]):
        assert _sre_programs(pats) == parser_tables.SRE
