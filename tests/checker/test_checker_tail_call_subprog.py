"""``bpf_tail_call`` in a static subprogram, as Linux 6.18 walks it (kernel/bpf/verifier.c
check_helper_call, BPF_FUNC_tail_call with ``cur_state->curframe``): the path where the
tail call succeeds leaves the subprogram at the call -- every packet pointer cleared
(clear_all_pkt_pointers), r0 an unknown scalar, prepare_func_exit -- and the path where it
fails is pushed to go on after the call.  Before, the checker only walked the second one and
its processed counts were off (24 vs the kernel's 21, 20 vs 23 on the two first programs).

tests/data/checker/tail_call_subprog.c, built with clang-19, is checked by bpfdsl and loaded
into the kernel with BTF (a tail call in a subprogram needs it): the same verdict, message
and processed-instruction count."""

from __future__ import annotations

import re

import pytest
from support.objbuild import compile_c
from support.paths import DATA

from bpfdsl.checker import check_object
from bpfdsl.obj.collection import read_object

SOURCE = DATA / "checker" / "tail_call_subprog.c"
# program -> kernel 6.18's verdict: None (loads) or its message; processed insns, from its log
KERNEL = {
    "ok_read_after": (None, 23),
    "ok_read_before": (None, 23),
    "ok_nested": (None, 34),
    "bad_stale_pointer": ("R6 invalid mem access 'scalar'", 11),
}


@pytest.fixture(scope="module")
def obj(tmp_path_factory):
    return compile_c(SOURCE, tmp_path_factory.mktemp("tc") / "tail_call_subprog.o").read_bytes()


@pytest.fixture(scope="module")
def ours(obj):
    res = check_object(read_object(obj))
    return {p.name: p for p in res.programs}


@pytest.mark.parametrize("name", list(KERNEL))
def test_checker_verdict_message_and_count(ours, name):
    msg, processed = KERNEL[name]
    p = ours[name]
    assert [e.message for e in p.errors][:1] == ([msg] if msg else [])
    assert p.insns_processed == processed


@pytest.mark.kernel
@pytest.mark.parametrize("name", list(KERNEL))
def test_kernel_agrees(obj, ours, name):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    spec = read_object(obj)
    for other in [n for n in spec.programs if n != name]:
        del spec.programs[other]
    try:
        coll = load_collection(spec, log_level=1 | 4, pinning=False)
        log, msg = coll.programs[name].log, None
        coll.close()
    except VerifierError as e:
        log = e.log
        lines = [ln for ln in log.splitlines() if ln.strip()]
        msg = next(
            ln for ln in reversed(lines) if not ln.startswith(("processed ", "verif", "stack d"))
        )
    m = re.search(r"processed (\d+) insns", log)
    assert m is not None, log
    assert (msg, int(m.group(1))) == KERNEL[name]
    p = ours[name]
    assert [e.message for e in p.errors][:1] == ([msg] if msg else [])
    assert p.insns_processed == int(m.group(1))
