"""Known failure kinds that other engineers are fixing right now (issue #13)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .harness import Result


@dataclass(frozen=True)
class KnownIssue:
    name: str
    owner: str
    reason: str
    kind: str
    match: Callable[[Any, Result], bool]


KNOWN: list[KnownIssue] = []


def known_issue(kind: str, payload: Any, res: Result) -> KnownIssue | None:
    for k in KNOWN:
        if k.kind == kind and k.match(payload, res):
            return k
    return None
