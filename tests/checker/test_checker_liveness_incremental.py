"""Stack liveness in a function without a cycle is updated incrementally (only what changed
since the last path end, checker/liveness.py): the result is the one solution of the data
flow equations, so the walk is the one the kernel's full round-robin update gives -- the
same processed count and states -- at a cost in the changed part.  A 2,000-rule ACL (2,000
path ends over 22,000 insns) is checked in seconds instead of timing out, and its count is
the kernel's."""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path

import pytest

from bpfdsl.checker import CheckOptions, check_object
from bpfdsl.checker.liveness import StackLiveness, _Instance, _Order
from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.obj.collection import read_object

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "backend"))
from test_jump_tables import acl_source, match_source  # noqa: E402

PROGS = sorted((ROOT / "progs").glob("*.bpfd"))[:12]


def _rounds(self: StackLiveness, inst: _Instance, shape: _Order) -> None:
    self._update_rounds(inst, shape.order)  # the kernel's way, for every function


def _walk(spec) -> list[tuple[str, str, int, int]]:
    return [
        (p.name, p.status, p.insns_processed, p.states)
        for p in check_object(spec, options=CheckOptions(nr_cpus=2)).programs
    ]


@functools.cache
def _acl():
    return read_object(compile_source(acl_source(), "acl.bpfd", mcpu="v4", check=False).obj)


@pytest.mark.parametrize("kind", ["match", "acl", *[p.stem for p in PROGS]])
def test_incremental_update_walks_as_the_full_update(kind: str, monkeypatch) -> None:
    if kind == "match":
        spec = read_object(compile_source(match_source(), "m.bpfd", check=False).obj)
    elif kind == "acl":
        spec = _acl()
    else:
        spec = read_object(compile_file(ROOT / "progs" / f"{kind}.bpfd", check=False).obj)
    fast = _walk(spec)
    monkeypatch.setattr(StackLiveness, "_update_acyclic", _rounds)
    assert _walk(spec) == fast


@pytest.mark.kernel
def test_acl_count_is_the_kernels() -> None:
    from bpfdsl.runtime.loader import load_collection

    spec = _acl()
    ((_, status, processed, _),) = _walk(spec)
    with load_collection(spec, log_level=1 | 4, log_size=1 << 22) as coll:
        log = coll.programs["acl"].log
    assert status == "ok"
    assert processed == int(re.search(r"processed (\d+) insns", log).group(1))
