"""Which checker runs: the modules of bpfdsl/checker compiled by mypyc, or their Python source.

``BPFDSL_COMPILE=1 pip install ...`` (setup.py) compiles every module of this package except
``__init__`` and this one into C extensions (``NAME.cpython-*.so`` next to ``NAME.py``, and
one shared library of the mypyc group, ``_native__mypyc.*.so``) and writes the build stamp
:data:`STAMP` beside them: the SHA-256 of each compiled module's source.  Python would import
an extension module before the ``.py`` of the same name, also when the ``.py`` was edited after
the build (an editable install keeps both in the work tree); so ``bpfdsl/checker/__init__.py``
imports this module before any other checker module and it puts a finder on
``sys.meta_path``, scoped to ``bpfdsl.checker.*``, that loads either every compiled module
(all of them present, each source unchanged since the build) or every ``.py`` (otherwise, or
with ``BPFDSL_PURE_PYTHON=1`` in the environment) -- never a mix: the compiled modules of
one group call each other's C functions directly, past ``sys.modules``.

Only the public importlib API is used (``importlib.abc.MetaPathFinder``,
``importlib.machinery`` loaders, ``importlib.util.spec_from_file_location``).  This module
imports only the standard library: setup.py loads it from its file to list the modules
and write the stamp.

Why a finder: mypyc projects (mypy, black) choose at install time -- a platform wheel or
the pure one -- and have no fallback at import time; here one install serves both
(``BPFDSL_PURE_PYTHON=1`` per process, as tests/checker runs each mode) and an edited
source must not run stale compiled code.  The default path finder cannot make that choice:
in one directory it tries the extension suffixes before ``.py``, always.  Building the
extensions into a directory of their own that ``__init__`` puts on the package's
``__path__`` only when up to date would drop the finder but move setuptools' outputs
(build_ext, editable installs), and a ``.so`` left next to its ``.py`` by an older build
would again win unseen.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Sequence
from importlib.abc import MetaPathFinder
from importlib.machinery import (
    EXTENSION_SUFFIXES,
    ExtensionFileLoader,
    ModuleSpec,
    SourceFileLoader,
)
from importlib.util import spec_from_file_location
from pathlib import Path
from types import ModuleType

PACKAGE = "bpfdsl.checker"
HERE = Path(__file__).resolve().parent
# The build stamp setup.py writes next to the compiled modules (JSON: "modules": name ->
# SHA-256 of NAME.py as compiled, "inputs": path under bpfdsl/ -> SHA-256 of each of
# :data:`INPUTS`, "group": the mypyc group's shared-library module).
STAMP = "_native.json"
# Sources outside this package that a compiled build holds values of: mypyc builds the
# ``Final`` constants of the modules the checker imports (bpfdsl/abi/opcodes.py's instruction
# encoding, the helper and kfunc tables' constants) into its C code, so an edit of one of
# them makes the build stale too.  Globs relative to the bpfdsl package directory.
INPUTS = ("abi/*.py", "abi/*/*.py", "diagnostics.py")
# mypycify(group_name=...): the shared library is the module GROUP + "__mypyc", inside this
# package (an editable install does not put the repository root on sys.path).
GROUP = "bpfdsl.checker._native"
PURE_ENV = "BPFDSL_PURE_PYTHON"
# Always run as Python: the package __init__ (it installs the finder before importing the
# rest) and this module.
NOT_COMPILED = frozenset({"__init__", "native"})


def compiled_modules(src_dir: Path = HERE) -> list[str]:
    """Names (without the package) of the modules of ``src_dir`` that a compiled build
    compiles, sorted: every ``*.py`` but :data:`NOT_COMPILED`."""
    return sorted(p.stem for p in src_dir.glob("*.py") if p.stem not in NOT_COMPILED)


def source_digest(path: Path) -> str:
    """SHA-256 (hex) of the file's bytes; "" when it does not exist."""
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except FileNotFoundError:
        return ""


def input_digests(src_dir: Path) -> dict[str, str]:
    """Path (relative to ``src_dir``'s parent, the bpfdsl package) -> SHA-256 of each file
    of :data:`INPUTS` there."""
    root = src_dir.parent
    return {
        p.relative_to(root).as_posix(): source_digest(p)
        for pattern in INPUTS
        for p in sorted(root.glob(pattern))
    }


def write_stamp(out_dir: Path, src_dir: Path, modules: Sequence[str]) -> Path:
    """Write :data:`STAMP` into ``out_dir`` (where the build put the extension modules)
    for ``modules`` compiled from ``src_dir``, with the digests of :data:`INPUTS`; returns
    its path.  Called by setup.py."""
    stamp = {
        "group": GROUP + "__mypyc",
        "modules": {m: source_digest(src_dir / f"{m}.py") for m in modules},
        "inputs": input_digests(src_dir),
    }
    path = out_dir / STAMP
    path.write_text(json.dumps(stamp, indent=1, sort_keys=True) + "\n")
    return path


def _extension(name: str, where: Path = HERE) -> Path | None:
    """The extension-module file of ``name`` (last part of the module name) in ``where``
    that this interpreter can load (importlib.machinery.EXTENSION_SUFFIXES, in the order
    the path finder tries them), or None."""
    for suffix in EXTENSION_SUFFIXES:
        p = where / f"{name}{suffix}"
        if p.is_file():
            return p
    return None


def decide(where: Path = HERE, environ: dict[str, str] | None = None) -> tuple[bool, str]:
    """(native, why): whether the compiled modules in ``where`` are to be imported, and a
    short reason for the choice ("compiled by mypyc", "BPFDSL_PURE_PYTHON=1",
    "not compiled", "stale: ...")."""
    env = os.environ if environ is None else environ
    if env.get(PURE_ENV, "") not in ("", "0"):
        return False, f"{PURE_ENV}={env[PURE_ENV]}"
    try:
        stamp = json.loads((where / STAMP).read_text())
        modules: dict[str, str] = dict(stamp["modules"])
        inputs: dict[str, str] = dict(stamp["inputs"])
        group = str(stamp["group"]).rpartition(".")[2]
    except FileNotFoundError:
        if any(_extension(m, where) for m in compiled_modules(where)):
            return False, f"compiled modules without a build stamp ({STAMP}): not setup.py's"
        return False, "not compiled (install with BPFDSL_COMPILE=1)"
    except (ValueError, KeyError, TypeError) as bad:
        return False, f"unreadable build stamp {STAMP}: {bad}"
    missing = [m for m in [*modules, group] if _extension(m, where) is None]
    if missing:
        return False, f"compiled modules missing for this Python: {', '.join(missing)}"
    changed = [m for m, h in modules.items() if source_digest(where / f"{m}.py") != h]
    changed += [
        f"../{name[:-3]}" for name, h in inputs.items() if source_digest(where.parent / name) != h
    ]
    if changed:
        files = ", ".join(f"{m}.py" for m in changed)
        return False, f"stale: {files} changed since the build (rebuild with BPFDSL_COMPILE=1)"
    return True, "compiled by mypyc"


class CheckerFinder(MetaPathFinder):
    """Finds ``bpfdsl.checker.NAME`` for each NAME of ``modules`` in ``where``: the
    extension module when ``native``, else ``NAME.py``.  Other names: None (the next
    finder)."""

    def __init__(self, native: bool, modules: Sequence[str], where: Path = HERE) -> None:
        self.native = native
        self.modules = frozenset(modules)
        self.where = where

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: ModuleType | None = None,
    ) -> ModuleSpec | None:
        pkg, _, name = fullname.rpartition(".")
        if pkg != PACKAGE or name not in self.modules:
            return None
        if self.native:
            ext = _extension(name, self.where)
            if ext is None:
                return None
            return spec_from_file_location(
                fullname, ext, loader=ExtensionFileLoader(fullname, str(ext))
            )
        src = self.where / f"{name}.py"
        return spec_from_file_location(fullname, src, loader=SourceFileLoader(fullname, str(src)))


def install() -> tuple[bool, str]:
    """Decide (:func:`decide`) and put the finder first on ``sys.meta_path`` (replacing
    one installed before); returns the decision."""
    native, why = decide()
    stale = [f for f in sys.meta_path if isinstance(f, CheckerFinder)]
    for f in stale:
        sys.meta_path.remove(f)
    modules = (
        compiled_modules() if not native else json.loads((HERE / STAMP).read_text())["modules"]
    )
    sys.meta_path.insert(0, CheckerFinder(native, list(modules)))
    return native, why


# On import as part of the package (setup.py loads this file under another name: no finder)
NATIVE, REASON = install() if __name__ == f"{PACKAGE}.native" else (False, "not installed")
