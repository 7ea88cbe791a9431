"""progs/xdp_acl_rules.bpfd: a 200-rule ACL written as code, one global fn per rule.  It is
what benchmarks/acl_gen.py generates, it compiles and passes the checker, the kernel verifies it
with work that grows linearly with the rules (each global function once), and on test-run
frames both engines give the verdict of the first matching rule."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from scapy.layers.inet import ICMP, IP, TCP, UDP
from scapy.layers.l2 import Ether
from support.paths import ROOT

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.obj.collection import read_object

PROG = ROOT / "progs" / "xdp_acl_rules.bpfd"


def _gen():
    spec = importlib.util.spec_from_file_location("acl_gen", ROOT / "benchmarks" / "acl_gen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


GEN = _gen()
RULES = GEN.rules(200)


def test_the_program_is_what_the_generator_makes():
    assert PROG.read_text() == GEN.bpfd_source(200)


def test_compiles_and_passes_the_checker():
    res = compile_file(PROG)  # the checker runs as part of compiling
    assert res.programs == ["acl_rules"]
    spec = read_object(res.obj)
    assert len(spec.programs["acl_rules"].subprograms) == 200  # one global fn per rule
    assert check_object(spec).ok


@pytest.mark.kernel
def test_kernel_work_grows_linearly_with_the_rules():
    """Each rule is verified once, on its own: 4x the rules is at most ~4x the work, and
    200 rules stay below the 9,869 instructions issue 11 reports for clang's C with
    __noinline global functions."""
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    work = {}
    for n in (50, 200):
        spec = read_object(compile_source(GEN.bpfd_source(n), f"acl{n}.bpfd").obj)
        with load_collection(spec) as coll:
            work[n] = syscall.prog_info(coll.programs["acl_rules"].fd).verified_insns
    assert work[200] <= 4.5 * work[50], work
    assert work[200] < 9869, work


def _frame(src: str, dst: str, proto: int, dport: int) -> bytes:
    l4 = {6: TCP(sport=40000, dport=dport), 17: UDP(sport=40000, dport=dport)}.get(proto)
    ip = IP(src=src, dst=dst)
    return bytes(Ether() / ip / (l4 if l4 is not None else ICMP()) / b"payload")


def _cases() -> list[tuple[str, str, int, int]]:
    """Packets that hit rules (first, ranges, an allow rule, the last one) and that just
    miss them (port, protocol, destination), plus ICMP (no rule)."""
    out = []
    for r in (RULES[0], RULES[1], RULES[5], RULES[6], RULES[150], RULES[199]):
        src = r.src[0].rsplit(".", 1)[0] + ".9"
        dst = r.dst[0].rsplit(".", 2)[0] + f".{r.dst[0].split('.')[2]}.7"
        lo, hi = r.ports
        out.append((src, dst, r.proto, lo))
        out.append((src, dst, r.proto, hi))
        out.append((src, dst, r.proto, hi + 1))  # one past the port range
        out.append((src, dst, 23 - r.proto, lo))  # the other protocol (6 <-> 17)
        out.append((src, "172.16.0.1", r.proto, lo))  # another destination
    out.append(("10.0.5.9", "192.168.5.7", 1, 0))  # ICMP: no rule matches
    return out


CASES = _cases()


def test_the_cases_exercise_both_verdicts():
    verdicts = {GEN.verdict_of(RULES, *c) for c in CASES}
    assert verdicts == {GEN.XDP_DROP, GEN.XDP_PASS}


def test_verdict_is_the_first_matching_rule_on_both_engines(bpf_program):
    prog = bpf_program(PROG)  # loaded once: the kernel verifies 200 global functions
    names = {GEN.XDP_DROP: "XDP_DROP", GEN.XDP_PASS: "XDP_PASS"}
    for case in CASES:
        assert prog.run(_frame(*case)).verdict == names[GEN.verdict_of(RULES, *case)], case


def test_non_ipv4_and_short_frames_pass(bpf_program):
    prog = bpf_program(PROG)
    frame = _frame("10.0.1.9", "192.168.1.7", 6, 2001)  # rule 1: dropped
    assert prog.run(frame).verdict == "XDP_DROP"
    assert prog.run(frame[: 14 + 20 + 10]).verdict == "XDP_PASS"  # TCP header cut short
    assert prog.run(bytes(Ether(type=0x86DD) / (b"x" * 60))).verdict == "XDP_PASS"


@pytest.mark.kernel
def test_interpreter_agrees_with_the_kernel_on_every_case_and_its_truncations():
    from bpfdsl.interp import InterpCollection
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(compile_file(PROG).obj)
    interp = InterpCollection(spec)["acl_rules"]
    frames = [_frame(*c) for c in CASES]
    frames += [f[:n] for f in frames[:6] for n in range(14, len(f), 7)]
    with load_collection(spec) as coll:
        fd = coll.programs["acl_rules"].fd
        for f in frames:
            k, i = syscall.prog_test_run(fd, f), interp.run(f)
            assert (i.retval, i.data_out) == (k.retval, k.data_out), f.hex()
