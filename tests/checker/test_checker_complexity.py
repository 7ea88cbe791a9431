"""The checker at the kernel verifier's complexity limit (issue 12).

The exploration model (bpfdsl/checker/analyzer.py) is Linux 6.18's, so its processed count
is the kernel's: the reported programs that `bpfdsl check` passed while the kernel refused
them ("BPF program is too large. Processed 1000001 insn") are now refused by both, the
error naming the loop or branch responsible; near the limit the checker says
"complexity-limit", never OK; a time budget stops it with no verdict, never OK; and the
loader's one-line summary of a "too large" log is the reason, not the instruction.
Kernel figures: tests/support/complexity.py (CASES).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from support.complexity import CASES, LOOP_SKIP_EXT_TCP, TCP_OPTIONS_WALK, acl_ladder

from bpfdsl.checker import INSN_LIMIT, CheckOptions, check_object, limit_fraction
from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import VerifierError, load_collection
from bpfdsl.runtime.verifier_log import summarize

DATA = Path(__file__).parent.parent / "data"
REPORTED = {
    # name: (source line of the loop or branch the error names, its text)
    "packet_loops_3": (7, "skip_ext(ip6)"),
    "option_walk_40": (10, "for i in 0..40"),
    "acl_ladder_100": None,  # a branch of one of the rules (the most walked one)
}


def _spec(name: str):
    text = CASES[name][0]
    return read_object(compile_source(text, f"{name}.bpfd", check=False).obj), text


@functools.cache
def _check(name: str, kernel: tuple[int, int] | None = None, timeout: float | None = None):
    spec, _ = _spec(name)
    (prog,) = check_object(
        spec, options=CheckOptions(nr_cpus=2, kernel=kernel, timeout=timeout)
    ).programs
    return prog


def _kernel(spec) -> tuple[str, int, str]:
    """(verdict, processed, log) of BPF_PROG_LOAD with log_level 1|4 (BPF_LOG_STATS)."""
    try:
        with load_collection(spec, log_level=1 | 4, log_size=1 << 20) as coll:
            log, verdict = next(iter(coll.programs.values())).log, "ok"
    except VerifierError as e:
        log, verdict = e.log, "rej"
    m = re.search(r"processed (\d+) insns", log)
    return verdict, int(m.group(1)), log


def test_reported_programs_are_the_reported_sizes():
    assert len(LOOP_SKIP_EXT_TCP.read_text().splitlines()) == 14
    assert "skip_ext" in LOOP_SKIP_EXT_TCP.read_text()
    assert "parse byte" in TCP_OPTIONS_WALK.read_text()
    assert "for i" in TCP_OPTIONS_WALK.read_text()
    assert acl_ladder(100).count("hits[") == 100


@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_false_accept_is_rejected_at_the_loop_or_branch(name):
    """Each reported program: the kernel refuses it at 1,000,001 processed insns; the
    checker now counts the same and refuses it with the kernel's message, at the
    source line of the loop (or rule branch) the walk spent itself on."""
    assert CASES[name][1:] == ("rej", INSN_LIMIT + 1)
    prog = _check(name)
    assert prog.status == "rejected"
    assert prog.insns_processed == INSN_LIMIT + 1
    (err,) = prog.errors
    assert err.code == "too-complex"
    assert err.message == "BPF program is too large. Processed 1000001 insn"
    assert err.source is not None
    where = REPORTED[name]
    if where is None:
        assert "if dport >= " in err.source.text and "the branch at" in err.explain
    else:
        line, text = where
        assert (err.source.line, text in err.source.text) == (line, True), err.source
        assert f"the loop at {name}.bpfd:{line}" in err.explain


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(REPORTED))
def test_reported_programs_kernel_verdict(name):
    spec, _ = _spec(name)
    verdict, processed, log = _kernel(spec)
    assert (verdict, processed) == ("rej", INSN_LIMIT + 1)
    assert "BPF program is too large. Processed 1000001 insn" in log


@pytest.mark.parametrize(
    "name", sorted(n for n, c in CASES.items() if c[1] == "ok" and c[2] < 150_000)
)
def test_processed_count_is_the_kernels(name):
    """Below the limit the walk is the kernel's walk: the same number of instructions."""
    _, verdict, processed = CASES[name]
    prog = _check(name)
    assert prog.status == "ok"
    assert prog.insns_processed == processed


@pytest.mark.kernel
@pytest.mark.parametrize("name", ["packet_loops_1", "option_walk_10", "acl_ladder_25"])
def test_recorded_counts_match_this_kernel(name):
    """The recorded figures are this kernel's (a kernel whose verifier walks differently
    shows up here, not as a silent wrong answer elsewhere)."""
    spec, _ = _spec(name)
    assert _kernel(spec)[:2] == CASES[name][1:]


def test_near_the_limit_is_complexity_limit_not_ok():
    """75 rules walk 588,219 insns (the kernel's count): accepted for the modelled kernel
    (its whole budget).  For an older target kernel, whose verifier walks differently, the
    budget is 50%: the checker answers complexity-limit, located at the rule branch the
    walk spent itself on."""
    assert limit_fraction(None) == 1.0 and limit_fraction((6, 1)) == 0.5
    assert limit_fraction(None, 10) == 0.9 and limit_fraction((6, 1), 10) == 0.5
    prog = _check("acl_ladder_75")
    assert prog.status == "ok" and prog.insns_processed == CASES["acl_ladder_75"][2]
    old = _check("acl_ladder_75", kernel=(6, 1))
    assert old.status == "rejected" and old.insns_processed == prog.insns_processed
    (err,) = old.errors
    assert err.code == "complexity-limit"
    assert err.message == (
        "may exceed the verifier's complexity limit: 588,219 of 1,000,000 instructions processed"
    )
    assert err.source is not None and "if dport >= " in err.source.text
    assert "the branch at acl_ladder_75.bpfd:" in err.explain


def test_check_cli_exits_1_with_complexity_limit(tmp_path, capsys):
    src = tmp_path / "acl75.bpfd"
    src.write_text(CASES["acl_ladder_75"][0])
    assert main(["check", str(src), "--kernel", "6.1"]) == 1
    out = capsys.readouterr().out
    assert "error[complexity-limit]: may exceed the verifier's complexity limit" in out
    assert f"--> {src}:" in out


def test_time_budget_stops_without_a_verdict(tmp_path, capsys):
    """A check stopped by its time budget is CANNOT CHECK (exit 2), never OK; compile
    still writes the object, with a warning saying how far the checker got."""
    prog = _check("option_walk_40", timeout=0.3)
    assert prog.status == "unchecked" and not prog.ok
    (err,) = prog.errors
    assert err.code == "check-timeout"
    assert 0 < prog.insns_processed < INSN_LIMIT
    assert f"after {prog.insns_processed:,} processed instructions" in err.message
    src = tmp_path / "walk.bpfd"
    src.write_text(CASES["option_walk_40"][0])
    assert main(["check", str(src), "--timeout", "0.3"]) == 2
    assert "CANNOT CHECK" in capsys.readouterr().out
    out = tmp_path / "walk.o"
    assert main(["compile", str(src), "-o", str(out), "--check-timeout", "0.3"]) == 0
    assert out.read_bytes()[:4] == b"\x7fELF"
    assert "warning[checker-check-timeout]: not fully checked" in capsys.readouterr().err


def test_too_large_log_summary_is_the_reason():
    """The kernel prints the limit on the line of the jump it stopped at; the summary is
    the reason and the insn (a real log tail: tests/data/verifier_logs/too_large.log)."""
    log = (DATA / "verifier_logs" / "too_large.log").read_text()
    assert re.search(r"^153: \(2d\) .* BPF program is too large", log, re.M)
    s = summarize(log)
    assert s.message == "BPF program is too large. Processed 1000001 insn"
    assert s.insn == 153


@pytest.mark.kernel
def test_loader_error_names_the_reason():
    spec, _ = _spec("packet_loops_3")
    with pytest.raises(VerifierError) as ei:
        load_collection(spec)
    msg = ei.value.diagnostics[0].message
    assert "rejected by the kernel verifier: BPF program is too large. Processed 1000001" in msg


NEAR = "near_limit_84_45"  # the kernel accepts it at 965,384 processed insns (96.5 %)


@pytest.mark.kernel
def test_near_limit_program_is_accepted_by_this_kernel():
    spec, _ = _spec(NEAR)
    verdict, processed, _log = _kernel(spec)
    assert (verdict, processed) == CASES[NEAR][1:]
    assert processed > 0.95 * INSN_LIMIT


def test_near_limit_passes_check_without_margin_and_says_how_close(tmp_path, capsys):
    """What the kernel accepts at ~97 % of its budget passes `check` (no margin), which
    says how close it is; --json gives the same figures."""
    prog = _check(NEAR)
    assert prog.status == "ok", [e.message for e in prog.errors]
    assert prog.insns_processed == CASES[NEAR][2]  # the kernel's count (a global function too)
    assert prog.limit_text() == f"processed {prog.insns_processed:,} of 1,000,000 insns (97 %)"
    doc = prog.to_json()
    assert doc["insns_limit"] == INSN_LIMIT and 96.5 <= doc["limit_percent"] < 97.0


def test_near_limit_is_refused_with_a_margin_naming_the_option(tmp_path, capsys):
    """`check --margin 10`: refused (exit 1) as complexity-limit, saying the margin did it
    and naming the option; the Python API's margin= says the same."""
    src = tmp_path / "near.bpfd"
    src.write_text(CASES[NEAR][0])
    assert main(["check", str(src), "--margin", "10"]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out and "error[complexity-limit]: processed " in out
    assert "(97 %): over the 90% of the verifier's complexity limit that --margin 10" in out
    assert "drop or lower it" in out
    spec, _ = _spec(NEAR)
    (prog,) = check_object(spec, options=CheckOptions(nr_cpus=2, margin=10)).programs
    (err,) = prog.errors
    assert err.code == "complexity-limit" and "--margin 10" in err.message


def test_over_the_limit_is_refused_with_or_without_margin():
    """Over 1,000,000 the kernel's own message, whatever the margin."""
    spec, _ = _spec("acl_ladder_100")
    for margin in (0, 10):
        (prog,) = check_object(spec, options=CheckOptions(nr_cpus=2, margin=margin)).programs
        (err,) = prog.errors
        assert err.message == "BPF program is too large. Processed 1000001 insn"


def test_margin_outside_0_100_is_a_usage_error(tmp_path, capsys):
    src = tmp_path / "a.bpfd"
    src.write_text(CASES["acl_ladder_25"][0])
    with pytest.raises(SystemExit) as e:
        main(["check", str(src), "--margin", "100"])
    assert e.value.code == 2
    with pytest.raises(ValueError):
        limit_fraction(None, -1)
