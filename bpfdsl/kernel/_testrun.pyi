"""Types of bpfdsl/kernel/_testrun.c (the batch BPF_PROG_TEST_RUN loop; see that file)."""

from typing import Any

def run_spans(
    nr: int,
    cmd: int,
    attr: Any,
    layout: tuple[int, int, int, int],
    data: Any,
    offsets: Any,
    lengths: Any,
    start: int,
    end: int,
    out_cap: int,
    min_len: int,
    skips: tuple[tuple[Any, int, Any, int, int], ...],
    retvals: Any,
) -> tuple[int, int, dict[int, int]]: ...
