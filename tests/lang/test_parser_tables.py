"""The parser runs LALR tables that ``tools/gen_parser_tables.py`` generated from the grammar
with lark: the tables belong to the grammar as shipped, they say exactly what lark says
(accept/reject, error text, spans), and compiling needs no lark (a development dependency)."""

from __future__ import annotations

import hashlib
import importlib.util
import random
import re
import subprocess
import sys

import pytest
from support.paths import ROOT

from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang import ast, parser_tables
from bpfdsl.lang.build import parse_program
from bpfdsl.lang.parser import Token, grammar_text, syntax_error

PROGS = sorted((ROOT / "progs").glob("*.bpfd"))
TOOL = ROOT / "tools" / "gen_parser_tables.py"


def load_tool():
    """tools/gen_parser_tables.py as a module (it is not part of the package; needs lark)."""
    pytest.importorskip("lark")
    spec = importlib.util.spec_from_file_location("gen_parser_tables", TOOL)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_parser_tables_match_the_grammar():
    """The tables carry the SHA-256 of the UTF-8 grammar text they were made from."""
    digest = hashlib.sha256(grammar_text().encode()).hexdigest()
    assert parser_tables.GRAMMAR_SHA256 == digest, (
        "grammar/bpfdsl.lark changed: run `python3 tools/gen_parser_tables.py` and commit "
        "bpfdsl/lang/parser_tables.py"
    )


def test_tool_keys_tables_by_the_same_hash_and_writes_the_same_lexer():
    tool = load_tool()
    assert tool.grammar_sha256(grammar_text()) == parser_tables.GRAMMAR_SHA256
    assert tool.GRAMMAR.read_text() == grammar_text()
    assert tool.TABLES.samefile(parser_tables.__file__)
    # everything but lark's LALR state numbering (which varies between runs) is reproduced
    ns: dict = {}
    exec(compile(tool.generate(grammar_text()), "parser_tables", "exec"), ns)
    for name in ("PATTERN", "IGNORE", "NEWLINE_TYPES", "KEYWORDS", "TOKEN_TYPES", "RULES"):
        assert ns[name] == getattr(parser_tables, name), name
    assert len(ns["STATES"]) == len(parser_tables.STATES)


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


def _lark_parse(parser, text: str, filename: str):
    """lark's parse tree of ``text``; its syntax errors as the parser's DiagnosticError."""
    from lark.exceptions import UnexpectedCharacters, UnexpectedInput

    try:
        return parser.parse(text)
    except UnexpectedCharacters as e:
        raise syntax_error(text, filename, e.line, e.column, char_pos=e.pos_in_stream) from None
    except UnexpectedInput as e:
        tok = getattr(e, "token", None)
        if tok is not None and tok.type != "$END":
            tok = Token(tok.type, str(tok), tok.line, tok.column, None, None, tok.start_pos)
        expected = set(getattr(e, "expected", None) or ())
        raise syntax_error(text, filename, 0, 0, token=tok, expected=expected) from None


def _outcome_lark(parser, text: str):
    try:
        tree = _lark_parse(parser, text, "t.bpfd")
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
            # a literal error: lark parsed it too, or (a number run into letters, `1else`)
            # lexed it as two tokens and rejected those
            return "literal", None
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
    parser = load_tool().lark_parser(grammar_text())
    corpus = _corpus()
    assert len(corpus) > 150
    n_err = 0
    for text in corpus:
        lk, ours = _outcome_lark(parser, text), _outcome_ours(text)
        if ours[0] == "literal":
            continue
        assert lk[0] == ours[0], text
        if lk[0] == "error":
            n_err += 1
            assert lk[1] == ours[1], text
        elif ours[1] is not None:
            assert ours[1] <= lk[1], (text, sorted(ours[1] - lk[1])[:5])
    assert n_err > 50  # the corpus does exercise syntax errors


# lark made unimportable: compiling a program and reporting a syntax error still work
WITHOUT_LARK = """
import sys
sys.modules["lark"] = None
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
src = open(sys.argv[1]).read()
obj = compile_source(src, sys.argv[1]).obj
try:
    compile_source("xdp fn f(ctx) { return XDP_PASS", "bad.bpfd")
except DiagnosticError as e:
    print(e.diagnostics[0].code, e.diagnostics[0].span.line)
sys.stdout.buffer.write(obj)
"""


def test_compiling_needs_no_lark():
    src = ROOT / "progs" / "xdp_udp_filter.bpfd"
    proc = subprocess.run(
        [sys.executable, "-c", WITHOUT_LARK, str(src)],
        capture_output=True,
        timeout=120,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    head, obj = proc.stdout.split(b"\n", 1)
    assert head == b"syntax 1"
    from bpfdsl.compiler import compile_source

    assert obj == compile_source(src.read_text(), str(src)).obj
