#!/usr/bin/env python3
"""Compare the objects the compiler makes for every ``progs/*.bpfd`` at ``--mcpu v1..v4``
between two trees: this checkout (with its uncommitted changes) and a git revision
(``--ref REV``, default ``HEAD``).

Each tree is compiled in its own process (``python -m bpfdsl compile``) with the tree first on
``sys.path``, so the two never share a module.  Prints one line per differing object and a
summary; exit status 0 when every object is byte-identical, 1 otherwise, 2 on usage errors.

Usage: ``python3 scripts/compare_objects.py [--ref REV] [--progs DIR]``
(as used for the stage-package move: ``--ref cfb84d5``, the tree before it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MCPUS = ("v1", "v2", "v3", "v4")

COMPILE_ALL = r"""
import hashlib, json, sys
from bpfdsl.compiler import compile_source
out = {}
for path in sys.argv[2:]:
    text = open(path, encoding="utf-8").read()
    for mcpu in sys.argv[1].split(","):
        res = compile_source(text, filename=path.rsplit("/", 1)[-1], mcpu=mcpu, check=False)
        out[f"{path.rsplit('/', 1)[-1]}@{mcpu}"] = hashlib.sha256(res.obj).hexdigest()
print(json.dumps(out))
"""


def digests(tree: Path, progs: list[Path]) -> dict[str, str]:
    """SHA-256 of each object compiled by the bpfdsl package found in ``tree``."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    proc = subprocess.run(
        [sys.executable, "-c", COMPILE_ALL, ",".join(MCPUS), *map(str, progs)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tree,
        check=False,
    )
    if proc.returncode:
        sys.exit(f"compiling in {tree} failed:\n{proc.stderr}")
    return json.loads(proc.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ref", default="HEAD", help="git revision to compare with (default HEAD)")
    ap.add_argument("--progs", type=Path, default=ROOT / "progs", help="directory of .bpfd")
    args = ap.parse_args(argv)
    progs = sorted(args.progs.resolve().glob("*.bpfd"))
    if not progs:
        print(f"no .bpfd files in {args.progs}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="bpfdsl-cmp-") as tmp:
        ref = Path(tmp) / "ref"
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", "--format=tar", args.ref],
            capture_output=True,
            check=False,
        )
        if archive.returncode:
            print(archive.stderr.decode(errors="replace"), file=sys.stderr)
            return 2
        ref.mkdir()
        subprocess.run(["tar", "-x", "-C", str(ref)], input=archive.stdout, check=True)
        old = digests(ref, progs)
    new = digests(ROOT, progs)
    differ = sorted(k for k in new if old.get(k) != new[k])
    for k in differ:
        print(f"DIFFERS {k}: {old.get(k, '-')[:12]} -> {new[k][:12]}")
    print(
        f"{len(new) - len(differ)}/{len(new)} objects byte-identical "
        f"({len(progs)} programs x {len(MCPUS)} ISA levels) against {args.ref}"
    )
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
