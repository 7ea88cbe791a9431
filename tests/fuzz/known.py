"""Failure kinds the campaigns find that other engineers are fixing right now (issue #13).

Each :class:`KnownIssue` matches one specific kind (by the fuzzer, the outcome, where the
exception came from and what the input holds), so that a campaign reports it as known
instead of failing, and nothing else hides behind it.  Add one only with a minimal
reproducer kept as an ``xfail(strict=False)`` test next to the fix's owner, and remove
it when the fix lands (its reproducer then becomes a plain test, as those of
tests/fuzz/test_fuzz_findings.py did).

Open now: the ones in :data:`KNOWN`, each with its reproducer in tests/fuzz/reproducers and
an ``xfail(strict=False)`` test in tests/fuzz/test_subprogram_findings.py.

Not matched by any fuzzer (no oracle for the value): constant folding and signedness
(the same object runs on both engines, so a miscompile agrees with itself; see
tests/fuzz/test_fold_fuzz.py and scripts/fuzz_fold.py), map dump formatting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Result


@dataclass(frozen=True)
class KnownIssue:
    """``name``: short id; ``owner``: who fixes it; ``reason``: the fault in one line;
    ``kind``: the fuzzer; ``match(payload, result)``: True for this fault only."""

    name: str
    owner: str
    reason: str
    kind: str
    match: Callable[[Any, Result], bool]


KNOWN: list[KnownIssue] = [
    # loop0-after-noinline: fixed (a count known to be 0 skips the call; checker dead-subprog)
]


def known_issue(kind: str, payload: Any, res: Result) -> KnownIssue | None:
    """The known issue ``res`` (a failure of fuzzer ``kind`` on ``payload``) is, or None."""
    for k in KNOWN:
        if k.kind == kind and k.match(payload, res):
            return k
    return None
