"""Every file, directory and module a document names exists (README.md, docs/*.md,
benchmarks/README.md, the module docstrings of bpfdsl/, benchmarks/, scripts/ and tools/, and the
header comment of the grammar; CHANGELOG.md is history and may name what is gone).

Checked: repository paths (``tests/...``, ``bpfdsl/...``, ``benchmarks/...``, ``progs/...``,
``scripts/...``, ``docs/...``, ``tools/...``, ``grammar/...``; a part in capitals such as
``NAME`` or with ``*`` is a pattern, not checked); paths inside the package written from
its top (``lang/sema/refs.py``); file names written alone (```alu.py```: some file of the
repository has it); dotted names ``bpfdsl.x.y`` (a module, or a name one defines); and
in docs/ARCHITECTURE.md's package table, the modules each row names and its "may import"
column.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

from support.paths import ROOT

PACKAGE = ROOT / "bpfdsl"
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "benchmarks" / "README.md",
]
TOP = ("tests", "bpfdsl", "benchmarks", "progs", "scripts", "docs", "tools", "grammar")
SUBPACKAGES = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
# packages of the distribution whose source is not under bpfdsl/ (pyproject.toml's
# [tool.setuptools.package-dir]): grammar/ and progs/ ship as bpfdsl.grammar, bpfdsl.progs
PACKAGE_DIRS = {"bpfdsl.grammar": ROOT / "grammar", "bpfdsl.progs": ROOT / "progs"}
MODULE_DOCS = sorted(
    p for top in ("bpfdsl", "benchmarks", "scripts", "tools") for p in (ROOT / top).rglob("*.py")
)
GRAMMARS = sorted((ROOT / "grammar").glob("*.lark"))

_PATH = re.compile(rf"(?<![\w./-])((?:{'|'.join(TOP)})/[\w./*<>{{}}-]*[\w/*>}}])")
_IN_PACKAGE = re.compile(rf"(?<![\w./-])((?:{'|'.join(SUBPACKAGES)})/[\w./-]*\w\.py)\b")
_FILE = re.compile(r"`(\w+\.py)`")
_MODULE = re.compile(r"(?<![\w./-])(bpfdsl(?:\.[A-Za-z_]\w*)+)")
_PLACEHOLDER = re.compile(r"(?:^|/)[A-Z][A-Z_]{2,}(?:[./]|$)|[*<>{}]")

FILE_NAMES = {
    p.name
    for top in ("bpfdsl", "tests", "benchmarks", "scripts", "tools")
    for p in (ROOT / top).rglob("*")
    if p.is_file()
}


def _line(text: str, at: int) -> int:
    return text.count("\n", 0, at) + 1


def dotted_exists(name: str) -> bool:
    """``bpfdsl.a.b``: a module, or a module and names defined in it (``bpfdsl.compile_file``,
    ``bpfdsl.runtime.testrun.InterpEngine``)."""
    parts = name.split(".")
    if ".".join(parts[:2]) in PACKAGE_DIRS:
        return len(parts) == 2 and (PACKAGE_DIRS[".".join(parts)] / "__init__.py").exists()
    for k in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:k])
        if base.with_suffix(".py").exists() or (base / "__init__.py").exists():
            break
    else:
        return False
    obj: object = importlib.import_module(".".join(parts[:k]))
    for attr in parts[k:]:
        if not hasattr(obj, attr):
            return False
        obj = getattr(obj, attr)
    return True


def missing_in(doc: Path, text: str) -> list[str]:
    """``doc:line: what`` for every path and module of ``text`` that does not exist."""
    rel = doc.relative_to(ROOT)
    bad = []
    for m in _PATH.finditer(text):
        p = m.group(1).rstrip(".")
        if not _PLACEHOLDER.search(p) and not (ROOT / p).exists():
            bad.append(f"{rel}:{_line(text, m.start())}: {p}")
    for m in _IN_PACKAGE.finditer(text):
        p = m.group(1)
        if not (PACKAGE / p).exists() and not (ROOT / p).exists():
            bad.append(f"{rel}:{_line(text, m.start())}: {p} (under bpfdsl/)")
    for m in _FILE.finditer(text):
        if m.group(1) not in FILE_NAMES and not _PLACEHOLDER.search(m.group(1)):
            bad.append(f"{rel}:{_line(text, m.start())}: {m.group(1)} (no such file)")
    for m in _MODULE.finditer(text):
        name = m.group(1).rstrip(".")
        if not dotted_exists(name):
            bad.append(f"{rel}:{_line(text, m.start())}: {name}")
    return bad


_ROW = re.compile(r"^\| `([\w.]+/?)` \| (.*) \| (.*) \|$", re.M)
_NAME = re.compile(r"`([a-z_][a-z0-9_]*)`")


def architecture_table(text: str) -> list[str]:
    """The package table of docs/ARCHITECTURE.md: each ``may import`` entry is a package or
    top module of bpfdsl; each lower-case name a ``pkg/`` row's role gives in backquotes is
    a module under it or a word of its source (a function, a field, a marker)."""
    tops = {p.stem for p in PACKAGE.glob("*.py")} | set(SUBPACKAGES)
    bad = []
    for m in _ROW.finditer(text):
        where, role, may = m.groups()
        line = _line(text, m.start())
        if not may.startswith(("nothing", "everything")):
            bad += [
                f"ARCHITECTURE.md:{line}: {where} may import {x}, no package of bpfdsl"
                for x in (s.strip() for s in may.split(","))
                if x not in tops
            ]
        if not where.endswith("/"):
            continue
        pkg = PACKAGE / where.rstrip("/")
        stems = {p.stem for p in pkg.rglob("*.py")} | {p.name for p in pkg.rglob("*") if p.is_dir()}
        source = " ".join(p.read_text() for p in pkg.rglob("*.py"))
        for n in dict.fromkeys(_NAME.findall(role)):
            if n not in stems and not re.search(rf"\b{n}\b", source):
                bad.append(f"ARCHITECTURE.md:{line}: {where} has no module or name {n}")
    return bad


def test_docs_are_read() -> None:
    names = {d.name for d in DOCS}
    assert {"README.md", "ARCHITECTURE.md", "language.md"} <= names
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    assert len(_ROW.findall(text)) >= 10  # the package table


def test_every_path_and_module_a_doc_names_exists() -> None:
    bad = []
    for doc in DOCS:
        bad += missing_in(doc, doc.read_text())
    assert bad == []


def module_docstring(path: Path) -> str:
    """The docstring of the module at ``path`` (``""`` when it has none)."""
    return ast.get_docstring(ast.parse(path.read_text(), str(path)), clean=False) or ""


def grammar_header(path: Path) -> str:
    """The ``//`` comment lines at the top of a lark grammar, without the ``//``."""
    lines = []
    for line in path.read_text().splitlines():
        if not line.startswith("//"):
            break
        lines.append(line[2:])
    return "\n".join(lines)


def test_every_path_and_module_a_module_docstring_names_exists() -> None:
    assert len(MODULE_DOCS) > 100 and GRAMMARS  # the package's modules are read
    bad = []
    for path in MODULE_DOCS:
        bad += missing_in(path, module_docstring(path))
    for path in GRAMMARS:
        bad += missing_in(path, grammar_header(path))
    assert bad == []


def test_architecture_names_the_modules_there_are() -> None:
    assert architecture_table((ROOT / "docs" / "ARCHITECTURE.md").read_text()) == []


def test_a_name_that_is_gone_is_found(tmp_path: Path) -> None:
    doc = ROOT / "docs" / "x.md"
    text = (
        "See tests/lang/test_gone.py and tests/lang/ (NAME: tests/lang/NAME.bpfd),\n"
        "`lang/sema/gone.py`, `lang/sema/refs.py`, `sema_gone.py`, `alu.py`,\n"
        "bpfdsl.lang.sema.refs, bpfdsl.compile_file, bpfdsl.gone, bpfdsl.compiler.no_such.\n"
        "bpfdsl.grammar, bpfdsl.progs, bpfdsl.grammar.gone, bpfdsl.parser_gen\n"
    )
    assert missing_in(doc, text) == [
        "docs/x.md:1: tests/lang/test_gone.py",
        "docs/x.md:2: lang/sema/gone.py (under bpfdsl/)",
        "docs/x.md:2: sema_gone.py (no such file)",
        "docs/x.md:3: bpfdsl.gone",
        "docs/x.md:3: bpfdsl.compiler.no_such",
        "docs/x.md:4: bpfdsl.grammar.gone",
        "docs/x.md:4: bpfdsl.parser_gen",
    ]
    table = (
        "| `abi/` | `uapi`, `helpers` + `helper_names` | record, diagnostics |\n"
        "| `lang/` | `parser` | abi, diagnostics |\n"
    )
    assert architecture_table(table) == [
        "ARCHITECTURE.md:1: abi/ may import record, no package of bpfdsl",
        "ARCHITECTURE.md:1: abi/ has no module or name helper_names",
    ]
