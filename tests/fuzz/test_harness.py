"""The campaign machinery finds what it must: planted faults give the failure outcome they
are (a campaign that cannot fail would be worth nothing)."""

from __future__ import annotations

import os
import time

import pytest

from . import cli_run, programs, sources
from .harness import Result, Sandbox, ddmin


def _raise(payload) -> Result:
    return {}["missing"]


def _sleep(payload) -> Result:
    time.sleep(60)
    return Result("ok")


def _die(payload) -> Result:
    os._exit(7)


def _leak_map(payload) -> Result:
    from .api import MapType, map_create

    os.dup(int(map_create(MapType.ARRAY, 4, 4, 1)))  # a copy of the fd nobody closes
    return Result("ok")


def _pin(payload) -> Result:
    from .api import MapType, map_create, obj_pin

    with map_create(MapType.ARRAY, 4, 4, 1) as fd:
        obj_pin(int(fd), "/sys/fs/bpf/planted")
    return Result("ok")


def test_traceback_hang_and_crash_are_failures() -> None:
    with Sandbox(_raise, timeout=5) as box:
        r = box.run(None)
        assert (r.outcome, r.detail) == ("traceback", "KeyError in _raise()") and r.failed
    with Sandbox(_sleep, timeout=1) as box:
        r = box.run(None)
        assert r.outcome == "hang" and "_sleep" in r.detail, r
    with Sandbox(_die, timeout=5) as box:
        assert box.run(None).signature == "crash: worker died (exit status 7)"
        assert box.run(None).outcome == "crash"  # a new worker each time


@pytest.mark.kernel
def test_leaked_fd_and_pin_are_failures_and_stay_private() -> None:
    with Sandbox(_leak_map, timeout=10) as box:
        assert box.run(None).signature == "leak: bpf fds"
    with Sandbox(_pin, timeout=10) as box:
        r = box.run(None)
        assert r.signature == "leak: pins" and "/sys/fs/bpf/planted" in r.text
        assert box.run(None).signature == "leak: pins"  # the first one was cleared
    assert not os.path.exists("/sys/fs/bpf/planted")  # it was on the worker's own bpffs


def test_unlocated_and_raw_messages_are_failures() -> None:
    with Sandbox(sources.run_case, timeout=30) as box:
        bad = box.run(('license "GPL"\n// \udcff\nxdp fn f(ctx) { return XDP_PASS }\n', False))
        assert bad.signature == "diagnostic: bad-encoding"  # invalid UTF-8: located
        ok = box.run(('license "GPL"\nxdp fn f(ctx) { return nope }\n', False))
        assert ok.signature == "diagnostic: unknown-name"
    r = cli_run.judge_output(
        ["run", "x.o"], 1, "", "error: [Errno 2] No such file or directory: 'x'\n"
    )
    assert r.outcome == "raw-message"
    r = cli_run.judge_output(["run", "x.o"], 2, "", "error[bad-hex]: not a hex digit\n")
    assert r.signature == "error: bad-hex"
    assert (
        cli_run.judge_output(["run"], 1, "", "").signature
        == "bad-exit: bpfdsl run: exit 1 without a message"
    )
    assert (
        cli_run.judge_output(
            ["x"],
            1,
            'Traceback (most recent call last):\n  File "/a/bpfdsl/b.py", line 1, in f\nKeyError: 1\n',
            "",
        ).signature
        == "traceback: bpfdsl x: KeyError in f()"
    )


def _planted(payload) -> Result:
    """programs.run_case with the interpreter's output bytes changed (in the worker only)."""
    from .api import interp_program as program

    run = program.InterpProgram.run_xdp

    def wrong(self, *a, **kw):
        r = run(self, *a, **kw)
        if r.data_out:
            r.data_out = bytes([r.data_out[0] ^ 1]) + r.data_out[1:]
        return r

    program.InterpProgram.run_xdp = wrong
    return programs.run_case(payload)


@pytest.mark.kernel
def test_engine_comparison_finds_a_planted_difference() -> None:
    case = next(iter(programs.cases(1, 1, True)))
    with Sandbox(programs.run_case, timeout=120) as box:
        assert box.run(case.payload).outcome == "ok"
    with Sandbox(_planted, timeout=120) as box:
        r = box.run(case.payload)
        assert r.signature == "engine-diff: output bytes", r
        assert "first difference at byte 0" in r.text


def test_ddmin_finds_the_two_items() -> None:
    items = list(range(40))
    assert ddmin(items, lambda xs: 7 in xs and 31 in xs) == [7, 31]


def test_known_issues_match_only_their_kind(monkeypatch) -> None:
    """A KnownIssue matches its fuzzer's failures its ``match`` accepts, nothing else; with
    no open issue (tests/fuzz/known.py) every failure is new."""
    from . import known

    kerr = Result("traceback", "KeyError in g_Call()")
    assert known.known_issue("sources", ("fn a()", False), kerr) is None
    issue = known.KnownIssue("key-error", "someone", "a KeyError", "sources",
                             lambda p, r: r.signature == "traceback: KeyError in g_Call()")  # fmt: skip
    monkeypatch.setattr(known, "KNOWN", [issue])
    assert known.known_issue("sources", ("fn a()", False), kerr) is issue
    assert known.known_issue("cli", (["x"], (2,), "root"), kerr) is None  # another fuzzer
    assert known.known_issue("sources", ("", False), Result("traceback", "KeyError in f()")) is None
