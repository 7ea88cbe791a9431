"""Every ```bpfd code block in docs/*.md compiles (and, as root, the kernel verifier accepts
it).  A block fenced ```bpfd error=CODE must instead fail with a diagnostic of that code,
so the documented error messages stay true."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from support.paths import ROOT

DOCS = ROOT / "docs"
FENCE = re.compile(r"^```bpfd(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.M | re.S)


def _blocks() -> list[tuple[str, str, str]]:
    """(id "file:line", info string, source) of every bpfd block."""
    out = []
    for md in sorted(DOCS.glob("*.md")):
        text = md.read_text()
        for m in FENCE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            out.append((f"{md.name}:{line}", m.group("info").strip(), m.group("body")))
    return out


BLOCKS = _blocks()
OK_BLOCKS = [b for b in BLOCKS if not b[1].startswith("error=")]
ERR_BLOCKS = [b for b in BLOCKS if b[1].startswith("error=")]


def _compile(where: str, source: str):
    from bpfdsl.compiler import compile_source

    return compile_source(source, filename=f"docs/{where}")


def test_docs_have_examples() -> None:
    if not (DOCS / "language.md").exists():
        pytest.skip("docs/language.md not written yet")
    assert len(OK_BLOCKS) >= 20


@pytest.mark.parametrize("where,info,source", OK_BLOCKS, ids=[b[0] for b in OK_BLOCKS])
def test_docs_example_compiles(where: str, info: str, source: str) -> None:
    res = _compile(where, source)
    assert res.obj[:4] == b"\x7fELF"
    assert res.programs or "map " in source or "const " in source


@pytest.mark.parametrize("where,info,source", ERR_BLOCKS, ids=[b[0] for b in ERR_BLOCKS])
def test_docs_error_example_fails_as_documented(where: str, info: str, source: str) -> None:
    from bpfdsl.diagnostics import DiagnosticError

    code = info.split("=", 1)[1].strip()
    with pytest.raises(DiagnosticError) as ei:
        _compile(where, source)
    assert code in {d.code for d in ei.value.diagnostics}


@pytest.mark.kernel
@pytest.mark.parametrize("where,info,source", OK_BLOCKS, ids=[b[0] for b in OK_BLOCKS])
def test_docs_example_loads(where: str, info: str, source: str) -> None:
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime import loader

    res = _compile(where, source)
    if not res.programs:
        pytest.skip("declarations only")
    import shutil
    from contextlib import nullcontext

    from support.netns import bpffs_dir, veth_here

    from bpfdsl.runtime.kfuncs import needs_dev_bound

    spec = read_object(res.obj)
    bound = any(needs_dev_bound(p) for p in spec.programs.values())
    root = bpffs_dir("docs_")  # PIN_ROOT of maps pinned by name: the test's own, removed
    os.mkdir(root)
    try:
        with veth_here() if bound else nullcontext(0) as ifindex:  # device-bound: a veth
            with loader.load_collection(spec, pin_dir=root, ifindex=ifindex) as coll:
                assert set(coll.programs) == set(res.programs)
    finally:
        shutil.rmtree(root, ignore_errors=True)


PY_FENCE = re.compile(r"^```python\n(?P<body>.*?)^```", re.M | re.S)
NAMED = re.compile(r"^// (?P<name>[\w-]+\.bpfd)\n", re.M)


def test_docs_python_examples_pass(tmp_path: Path, pytestconfig: pytest.Config) -> None:
    """The pytest examples of the docs pass, next to the ``// NAME.bpfd`` files they name."""
    import os
    import subprocess
    import sys

    tests = []
    for md in sorted(DOCS.glob("*.md")):
        text = md.read_text()
        for _where, _info, body in (b for b in BLOCKS if b[0].startswith(md.name + ":")):
            m = NAMED.match(body)
            if m:
                (tmp_path / m.group("name")).write_text(body)
        for k, m in enumerate(PY_FENCE.finditer(text)):
            if "def test_" in m.group("body"):
                f = tmp_path / f"test_{md.stem}_{k}.py"
                f.write_text(m.group("body"))
                tests.append(f)
    if not tests:
        pytest.skip("no pytest examples in docs/")
    root = str(DOCS.parent)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    if pytestconfig.pluginmanager.get_plugin("bpfdsl") is None:  # not installed: load it
        cmd[3:3] = ["-p", "bpfdsl.testing.pytest_plugin"]
    proc = subprocess.run(
        cmd,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
