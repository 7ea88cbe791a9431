"""The kernel's checkpoint heuristic (is_state_visited: a new state only after 2 jumps
and 8 insns since the last one) runs on counters of the whole load: jmps_processed and
the jumps / insns at the last checkpoint added carry on from the program's walk into the
walks of its global functions.  The checker carries them over the same way
(analyzer.Tables.counters); restarting them at each global function placed the first
checkpoints of gf3 elsewhere and counted 229 where the kernel counts 214 (program t1 of
``scripts/fuzz.py --kind subprograms --seed 30302`` case 55, --mcpu v3, which calls the
global functions gf3 and gf2).
"""

from __future__ import annotations

import functools
import itertools
import re

import pytest

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import load_collection


@functools.cache
def _case():
    from fuzz import subprograms

    case = list(itertools.islice(subprograms.cases(30302, 56, True), 56))[55]
    src, _frames, mcpu = case.payload
    assert mcpu == "v3" and "global fn gf3" in src
    return read_object(compile_source(src, "sub55.bpfd", mcpu=mcpu, check=False).obj)


@pytest.mark.kernel
def test_programs_calling_global_functions_count_as_the_kernel() -> None:
    spec = _case()
    ours = {r.name: (r.ok, r.insns_processed) for r in check_object(spec).programs}
    with load_collection(spec, log_level=1 | 4, log_size=1 << 24) as coll:
        kernel = {
            name: (True, int(re.search(r"processed (\d+) insns", p.log).group(1)))
            for name, p in coll.programs.items()
        }
    assert ours == kernel
