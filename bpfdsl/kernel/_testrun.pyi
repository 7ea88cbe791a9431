"""Types of bpfdsl/kernel/_testrun.c (the batch BPF_PROG_TEST_RUN loop; see that file)."""

from typing import Any

# an object with the buffer protocol (collections.abc.Buffer from Python 3.12), as
# syscall.Buffer: the attr and the ``skips`` destinations and ``retvals`` writable ones
Buffer = Any

def run_spans(
    nr: int,
    cmd: int,
    attr: Buffer,
    layout: tuple[int, int, int, int],
    data: Buffer,
    offsets: Buffer,
    lengths: Buffer,
    start: int,
    end: int,
    out_cap: int,
    min_len: int,
    skips: tuple[tuple[Buffer, int, Buffer, int, int], ...],
    retvals: Buffer | None,
) -> tuple[int, int, dict[int, int]]: ...
