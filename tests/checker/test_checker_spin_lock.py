"""bpf_spin_lock / bpf_spin_unlock as the Linux 6.18 verifier rules on them (issue #23;
kernel/bpf/verifier.c process_spin_lock, check_resource_leak, check_map_access, the
"function calls are not allowed while holding a lock" rule of do_check_insn):
tests/data/checker/spin_lock.c, built with clang-19, holds programs the kernel accepts
(``ok_*``) and refuses (``bad_*``).  Before, `bpfdsl check` said "cannot check" (exit 2)
for every lock, and accepted a direct load of the lock field, which the kernel refuses.

Each program is checked by bpfdsl and loaded alone with the loader (its maps created with
their BTF, which the kernel needs to find the lock): the verdicts and messages agree and
both walk the same number of instructions.
"""

from __future__ import annotations

import dataclasses
import re

import pytest
from support.objbuild import compile_c
from support.paths import DATA

from bpfdsl.checker import check_object
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import VerifierError, load_collection

SOURCE = DATA / "checker" / "spin_lock.c"

# program -> the checker's message; the kernel's last log line is the same, but for the
# two-line message of a global call (the kernel's last line is its second half)
REFUSED = {
    "bad_exit_locked": "BPF_EXIT instruction in main prog cannot be used inside "
    "bpf_spin_lock-ed region",
    "bad_call_locked": "function calls are not allowed while holding a lock",
    "bad_double_lock": "function calls are not allowed while holding a lock",
    "bad_loop_locked": "function calls are not allowed while holding a lock",
    "bad_global_call_locked": "global function calls are not allowed while holding a lock, "
    "use static function instead",
    "bad_unlock_unlocked": "bpf_spin_unlock without taking a lock",
    "bad_unlock_other": "bpf_spin_unlock of different lock",
    "bad_lock_field_read": "bpf_spin_lock cannot be accessed directly by load/store",
    "bad_value_to_helper": "bpf_spin_lock cannot be accessed directly by load/store",
    "bad_lock_wrong_offset": "off 16 doesn't point to 'struct bpf_spin_lock' that is at 8",
    "bad_no_lock_in_value": "map 'unlocked' has no valid bpf_spin_lock",
    "bad_lock_maybe_null": "R1 type=map_value_or_null expected=map_value, ptr_",
    "bad_lock_stack": "R1 type=fp expected=map_value, ptr_",
    "bad_lock_in_union": "map 'nested_union' has no valid bpf_spin_lock",
    "bad_nested_lock_field_read": "bpf_spin_lock cannot be accessed directly by load/store",
}
ACCEPTED = [
    "ok_count",
    "ok_const_key_array",
    "ok_two_in_turn",
    "ok_loop_locked",
    "ok_unlock_in_subprog",
    "ok_nested_lock",
    "ok_deep_lock",
    "ok_lock_in_array_of_one",
    "ok_either_map_locked",
]


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    obj = compile_c(SOURCE, tmp_path_factory.mktemp("lock") / "spin_lock.o")
    s = read_object(obj)
    assert sorted(p.name for p in s.programs.values()) == sorted([*REFUSED, *ACCEPTED])
    return s


@pytest.fixture(scope="module")
def results(spec):
    return {p.name: p for p in check_object(spec).programs}


def test_lock_offset_read_from_btf(spec):
    assert spec.maps["counters"].spin_lock_off == 8  # struct counter { u64; lock; u64 }
    assert spec.maps["slots"].spin_lock_off == 8
    assert spec.maps["unlocked"].spin_lock_off == -1
    assert spec.maps["nested"].spin_lock_off == 16  # outer { u64; inner { u64; lock } }
    assert spec.maps["nested_deep"].spin_lock_off == 24  # deep { u32; outer }
    assert spec.maps["nested_array"].spin_lock_off == 16
    assert spec.maps["nested_union"].spin_lock_off == -1


@pytest.mark.parametrize("name", ACCEPTED)
def test_checker_accepts(results, name):
    r = results[name]
    assert r.ok, r.errors


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_checker_rejects_with_the_kernels_message(results, name):
    r = results[name]
    assert not r.ok and not r.unchecked, r.errors  # a rejection (exit 1), not "cannot check"
    assert r.errors[0].message == REFUSED[name]


def _kernel(spec, name: str) -> tuple[str, str, int | None]:
    """Load program ``name`` of ``spec`` alone: (verdict, last log line, processed)."""
    key = next(k for k, p in spec.programs.items() if p.name == name)
    one = dataclasses.replace(spec, programs={key: spec.programs[key]})
    try:
        coll = load_collection(one, log_level=1 | 4, pinning=False)
    except VerifierError as e:
        log, verdict = e.log, "rej"
    else:
        log, verdict = next(iter(coll.programs.values())).log, "ok"
        coll.close()
    lines = [
        ln
        for ln in log.splitlines()
        if ln.strip() and not ln.startswith(("processed ", "verification time", "stack depth"))
    ]
    m = re.search(r"processed (\d+) insns", log)
    return verdict, lines[-1] if verdict == "rej" else "", int(m.group(1)) if m else None


@pytest.mark.kernel
@pytest.mark.parametrize("name", ACCEPTED + sorted(REFUSED))
def test_kernel_agrees(spec, results, name):
    verdict, last, processed = _kernel(spec, name)
    r = results[name]
    if name in ACCEPTED:
        assert verdict == "ok"
        assert r.ok
    else:
        assert verdict == "rej"
        assert REFUSED[name].endswith(last), last
    assert r.insns_processed == processed


def test_the_held_locks_map_is_part_of_state_equality():
    """kernel refsafe: the held lock's id (mapped) and its map (active_lock_ptr) must be the
    same for a state to cover another; the lock entry of refs pairs with a lock entry."""
    from bpfdsl.checker import domain as D
    from bpfdsl.checker.state import RANGE_WITHIN, Frame, State, states_equal

    def held(lock_id: int, m: object, refs: tuple[int, ...]) -> State:
        st = State([Frame([D.NOT_INIT_REG] * 10 + [D.ptr(D.STACK, map=0)], {}, -1, 0, 0)])
        st.refs, st.lock_id, st.lock_ptr = refs, lock_id, m
        return st

    def covers(old: State, cur: State) -> bool:
        return states_equal(old, [0], [0], cur, [0], RANGE_WITHIN, False)

    a, b = object(), object()
    assert covers(held(5, a, (5,)), held(9, a, (9,)))  # ids mapped
    assert not covers(held(5, a, (5,)), held(9, b, (9,)))  # another map's lock
    assert not covers(held(5, a, (5,)), held(0, None, (9,)))  # a reference, not a lock
    assert not covers(held(5, a, (3, 5)), held(9, a, (9, 4)))  # kinds pairwise, in order


@pytest.mark.parametrize("name", ["bad_exit_locked", "bad_unlock_other"])
def test_the_lock_is_named_by_its_source_line(results, name):
    """The explanation of an exit or unlock while another lock is held says where that
    lock was taken: its insn and its source line."""
    e = results[name].errors[0]
    want = "bpf_spin_lock(&c->lock);" if name == "bad_exit_locked" else "bpf_spin_lock(&a->lock);"
    assert re.search(r"at insn \d+ \(spin_lock\.c:\d+: " + re.escape(want) + r"\)", e.explain), (
        e.explain
    )
