"""The compiled checker (mypyc, ``BPFDSL_COMPILE=1`` at install time) and its pure-Python
fallback (bpfdsl/checker/native.py):

- ``BPFDSL_PURE_PYTHON=1`` makes a process import every checker module from its ``.py``;
  without it an up-to-date build imports every compiled module (never a mix);
- a build whose sources changed since (an edited ``.py`` next to its ``.so``), or extension
  modules without the build stamp, fall back to the ``.py`` modules and say why;
- both give the same results (status, processed instructions, states, each error's code,
  message, instruction, register and state dump) on every progs/ program, its mutants (one
  fault each: tests/checker/mutations.py) and an ACL ladder.

Each mode runs in a subprocess (a process imports the checker once).  Where the install was
built with ``BPFDSL_COMPILE=1`` in the environment (scripts/test.sh on a machine with a C
compiler, as in CI) the compiled checker must be there; elsewhere the tests that need it
skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.checker import native

CHECKER_DIR = ROOT / "bpfdsl" / "checker"


def _compiled() -> bool:
    """Whether this tree has a usable build now (whatever this process uses)."""
    return native.decide(CHECKER_DIR, {})[0]


# Prints which checker the process uses: NATIVE, the reason, and each checker module's
# origin file (the module files a compiled build made must all be extension modules).
PROBE = """
import json, sys
import bpfdsl.checker as C
from bpfdsl.abi import insn as I
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import native
mods = {m: sys.modules[f"bpfdsl.checker.{m}"].__spec__.origin for m in native.compiled_modules()
        if f"bpfdsl.checker.{m}" in sys.modules}
r = C.check_insns([I.mov64_imm(0, 2), I.exit_()], ProgramType.XDP)
print(json.dumps({"native": C.NATIVE, "reason": C.NATIVE_REASON, "origins": mods,
                  "status": r.status, "processed": r.insns_processed}))
"""

# Checks progs/*.bpfd (compiled without the checker), one mutant per fault kind of each of
# their programs, and acl_ladder(25); prints name -> result as JSON.
CORPUS = """
import json, random, sys
import bpfdsl.checker as C
from bpfdsl.checker import check_insns, check_object, map_refs_for
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from mutations import Item, mutate
from support import complexity
from support.paths import PROGS

def res(r):
    errs = [[e.code, e.message, e.idx, e.slot, e.severity, {str(k): v for k, v in e.regs.items()},
             e.state, e.path] for e in [*r.errors, *r.warnings]]
    return [r.status, r.insns_processed, r.states, errs]

out = {}
srcs = [(p.stem, p.read_text()) for p in sorted(PROGS.glob("*.bpfd"))]
srcs.append(("acl_ladder_25", complexity.acl_ladder(25)))
for stem, text in srcs:
    spec = read_object(compile_source(text, f"{stem}.bpfd", check=False).obj)
    for r in check_object(spec).programs:
        out[f"{stem}:{r.name}"] = res(r)
    rng = random.Random(12)
    for p in spec.programs.values():
        if p.kind is None:
            continue
        refs = map_refs_for(p, spec.maps, spec.data_sections)
        base = Item("prog", f"{stem}:{p.name}", list(p.insns), p.kind.program_type,
                    p.kind.attach_type, p.kind.prog_flags, refs, p.line_at)
        for k, m in enumerate(mutate(base, rng, 1)):
            r = check_insns(m.insns, m.prog_type, m.attach_type, map_refs=m.refs,
                            line_at=m.line_at)
            out[f"{m.name}#{k}"] = res(r)
print(json.dumps({"native": C.NATIVE, "reason": C.NATIVE_REASON, "results": out}))
"""


def _run(code: str, *, pure: bool, root: Path = ROOT, timeout: float = 600) -> dict:
    """Run ``code`` in a fresh interpreter with ``root`` (a tree holding bpfdsl/) first on
    the path, tests/ and tests/checker after it; ``pure``: with BPFDSL_PURE_PYTHON=1 (else
    without the variable).  Returns the JSON its last line prints."""
    env = {k: v for k, v in os.environ.items() if k != native.PURE_ENV}
    if pure:
        env[native.PURE_ENV] = "1"
    path = [str(root), str(ROOT / "tests"), str(ROOT / "tests" / "checker")]
    env["PYTHONPATH"] = os.pathsep.join(path)
    p = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=root,
        timeout=timeout,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


def _need_compiled() -> None:
    """Skip when this tree has no usable build, unless the install was asked to compile
    (BPFDSL_COMPILE=1, as scripts/test.sh sets where a C compiler is): then fail."""
    compiled, why = native.decide(CHECKER_DIR, {})
    if compiled:
        return
    if os.environ.get("BPFDSL_COMPILE") == "1":
        pytest.fail(f"BPFDSL_COMPILE=1 but the checker in use is not compiled: {why}")
    pytest.skip(f"checker not compiled here ({why})")


def _origins_are(origins: dict[str, str], suffixes: tuple[str, ...]) -> bool:
    return bool(origins) and all(o.endswith(suffixes) for o in origins.values())


EXT = tuple(native.EXTENSION_SUFFIXES)


def test_pure_python_env_imports_every_module_from_source():
    got = _run(PROBE, pure=True)
    assert got["native"] is False and got["reason"] == "BPFDSL_PURE_PYTHON=1"
    assert _origins_are(got["origins"], (".py",)), got["origins"]
    assert "analyzer" in got["origins"] and "domain" in got["origins"]
    assert (got["status"], got["processed"]) == ("ok", 2)


def test_up_to_date_build_imports_every_module_compiled():
    _need_compiled()
    got = _run(PROBE, pure=False)
    assert got["native"] is True and got["reason"] == "compiled by mypyc"
    assert _origins_are(got["origins"], EXT), got["origins"]
    assert (got["status"], got["processed"]) == ("ok", 2)


def _tree_copy(tmp_path: Path) -> Path:
    """A copy of bpfdsl/ (with the checker's build, if any) under ``tmp_path``; where the
    tree has no build, unloadable stand-ins for its extension modules and a stamp of the
    current sources (an import of one of them fails: only the fallback passes)."""
    dst = tmp_path / "tree"
    shutil.copytree(ROOT / "bpfdsl", dst / "bpfdsl", ignore=shutil.ignore_patterns("__pycache__"))
    checker = dst / "bpfdsl" / "checker"
    if not _compiled():
        mods = native.compiled_modules(checker)
        for m in [*mods, native.GROUP.rpartition(".")[2] + "__mypyc"]:
            (checker / f"{m}{native.EXTENSION_SUFFIXES[0]}").write_bytes(b"not an ELF object")
        native.write_stamp(checker, checker, mods)
    assert native.decide(checker, {}) == (True, "compiled by mypyc")
    return dst


def test_edited_source_after_the_build_falls_back_to_python(tmp_path):
    tree = _tree_copy(tmp_path)
    tnum = tree / "bpfdsl" / "checker" / "tnum.py"
    tnum.write_text(tnum.read_text() + "\n# edited after the build\n")
    got = _run(PROBE, pure=False, root=tree)
    assert got["native"] is False
    assert got["reason"].startswith("stale: tnum.py changed since the build"), got["reason"]
    assert _origins_are(got["origins"], (".py",)), got["origins"]
    assert all(o.startswith(str(tree)) for o in got["origins"].values())
    assert (got["status"], got["processed"]) == ("ok", 2)


def test_edited_abi_constant_after_the_build_falls_back_to_python(tmp_path):
    """mypyc builds the Final constants of bpfdsl/abi/opcodes.py into the checker's C code:
    an edit there makes the build stale, like an edit of a checker source."""
    tree = _tree_copy(tmp_path)
    opcodes = tree / "bpfdsl" / "abi" / "opcodes.py"
    opcodes.write_text(opcodes.read_text() + "\n# edited after the build\n")
    got = _run(PROBE, pure=False, root=tree)
    assert got["native"] is False
    assert got["reason"].startswith("stale: ../abi/opcodes.py changed since the build"), got
    assert _origins_are(got["origins"], (".py",)), got["origins"]


def test_extension_modules_without_a_stamp_fall_back_to_python(tmp_path):
    tree = _tree_copy(tmp_path)
    (tree / "bpfdsl" / "checker" / native.STAMP).unlink()
    got = _run(PROBE, pure=False, root=tree)
    assert got["native"] is False and "without a build stamp" in got["reason"]
    assert _origins_are(got["origins"], (".py",)), got["origins"]


def test_copied_build_stays_compiled(tmp_path):
    """The build is not tied to its directory: the same files elsewhere are used (so the
    fallback above is the edit's doing, not the copy's)."""
    _need_compiled()
    got = _run(PROBE, pure=False, root=_tree_copy(tmp_path))
    assert got["native"] is True and _origins_are(got["origins"], EXT), got


def test_decide_reasons(tmp_path):
    d = tmp_path / "checker"
    d.mkdir()
    for m in ("__init__", "native", "domain", "tnum"):
        (d / f"{m}.py").write_text(f"# {m}\n")
    assert native.compiled_modules(d) == ["domain", "tnum"]
    assert native.decide(d, {}) == (False, "not compiled (install with BPFDSL_COMPILE=1)")
    native.write_stamp(d, d, ["domain", "tnum"])
    ext = native.EXTENSION_SUFFIXES[0]
    (d / f"domain{ext}").write_bytes(b"")
    (d / f"tnum{ext}").write_bytes(b"")
    native_, why = native.decide(d, {})
    assert not native_ and why == "compiled modules missing for this Python: _native__mypyc"
    (d / f"_native__mypyc{ext}").write_bytes(b"")
    assert native.decide(d, {}) == (True, "compiled by mypyc")
    assert native.decide(d, {"BPFDSL_PURE_PYTHON": "1"}) == (False, "BPFDSL_PURE_PYTHON=1")
    assert native.decide(d, {"BPFDSL_PURE_PYTHON": "0"})[0] is True
    (d / "domain.py").unlink()
    assert native.decide(d, {})[1].startswith("stale: domain.py changed")
    stamp = json.loads((d / native.STAMP).read_text())
    del stamp["inputs"]  # a stamp from before the inputs were recorded
    (d / native.STAMP).write_text(json.dumps(stamp))
    assert native.decide(d, {})[1] == "unreadable build stamp _native.json: 'inputs'"
    (d / native.STAMP).write_text("{not json")
    assert native.decide(d, {})[1].startswith("unreadable build stamp")


def test_compiled_and_pure_checker_agree():
    _need_compiled()
    pure = _run(CORPUS, pure=True)
    comp = _run(CORPUS, pure=False)
    assert (pure["native"], comp["native"]) == (False, True)
    a, b = pure["results"], comp["results"]
    assert a.keys() == b.keys()
    assert len(a) > 100
    rejected = [k for k, v in a.items() if v[0] != "ok"]
    assert len(rejected) > 50, rejected  # the mutants: errors and register dumps compared too
    assert any(v[1] > 10_000 for v in a.values())  # the ladder: a long walk
    differ = {k: (a[k], b[k]) for k in a if a[k] != b[k]}
    assert not differ, json.dumps(dict(list(differ.items())[:3]), indent=1)
