"""Programs near the kernel verifier's complexity limit (issue 12), as .bpfd source text.

Three families, each at the size a user reported plus smaller and larger ones:

- ``packet_loops(k)``: ``for i in 0..k`` around ``parse ipv6`` + ``skip_ext`` + ``parse tcp``
  (tests/data/complexity/loop_skip_ext_tcp.bpfd is k = 3): a loop over a loop over packet
  data, whose cost the verifier multiplies;
- ``option_walk(n)``: a flat ``parse byte`` walk over n bytes of TCP options
  (tcp_options_walk.bpfd is n = 40);
- ``acl_ladder(n)``: n rules, each a destination port range and a source port threshold
  that count a hit; every rule's outcome survives into the next, so the paths multiply.

The kernel's verdicts and processed counts at these sizes are asserted by
tests/checker/test_checker_complexity.py; scripts/difftest_checker.py adds all of them to its
corpus.
"""

from __future__ import annotations

from pathlib import Path

DATA = Path(__file__).resolve().parent.parent / "data" / "complexity"
LOOP_SKIP_EXT_TCP = DATA / "loop_skip_ext_tcp.bpfd"
TCP_OPTIONS_WALK = DATA / "tcp_options_walk.bpfd"


def packet_loops(k: int) -> str:
    """The reported 14-line program with its loop bound ``0..3`` made ``0..k``."""
    text = LOOP_SKIP_EXT_TCP.read_text()
    assert "for i in 0..3 {" in text
    return text.replace("for i in 0..3 {", f"for i in 0..{k} {{")


def option_walk(n: int) -> str:
    """The reported TCP options walk over ``n`` bytes instead of 40."""
    text = TCP_OPTIONS_WALK.read_text()
    assert "for i in 0..40 {" in text
    return text.replace("for i in 0..40 {", f"for i in 0..{n} {{")


def acl_ladder(n: int) -> str:
    """An XDP ACL of ``n`` rules over TCP ports: rule k counts packets whose destination
    port is in [1000 + 10k, 1008 + 10k) and whose source port is above 2000 + 7k."""
    lines = [
        'license "GPL"',
        f"map hits: percpu_array<u32, u64>(max_entries: {n})",
        "xdp fn acl(ctx) {",
        "    let eth = parse ethernet else { return XDP_PASS }",
        "    if eth.h_proto != ETH_P_IP { return XDP_PASS }",
        "    let ip = parse ipv4 else { return XDP_PASS }",
        "    if ip.protocol != IPPROTO_TCP { return XDP_PASS }",
        "    let tcp = parse tcp else { return XDP_PASS }",
        "    let dport = host(tcp.dest)",
        "    let sport = host(tcp.source)",
    ]
    for k in range(n):
        lo, s = 1000 + 10 * k, 2000 + 7 * k
        lines.append(
            f"    if dport >= {lo} && dport < {lo + 8} && sport > {s} {{ hits[{k}] += 1 }}"
        )
    lines += ["    return XDP_PASS", "}"]
    return "\n".join(lines) + "\n"


def near_limit(n_main: int, n_fn: int) -> str:
    """``acl_ladder(n_main)`` whose program then calls a global function holding a ladder
    of ``n_fn`` more rules (map ``hits2``): the kernel verifies the global function on its
    own and adds its count to the program's, which tunes the total near the limit
    (84 + 45: 965,384 of 1,000,000 on 6.18)."""
    rules = "\n".join(
        f"    if dport >= {1000 + 10 * k} && dport < {1008 + 10 * k} && sport > {2000 + 7 * k} "
        f"{{ hits2[{k}] += 1 }}"
        for k in range(n_fn)
    )
    fn = (
        f"map hits2: percpu_array<u32, u64>(max_entries: {n_fn})\n"
        f"global fn more(dport: u16, sport: u16) -> i32 {{\n{rules}\n    return 0\n}}\n"
    )
    text = acl_ladder(n_main).replace("xdp fn acl(ctx) {", fn + "xdp fn acl(ctx) {")
    return text.replace(
        "    return XDP_PASS\n}\n",
        "    if more(dport, sport) != 0 { return XDP_DROP }\n    return XDP_PASS\n}\n",
    )


# name -> (source, kernel verdict on Linux 6.18, kernel's "processed N insns"); measured on
# this project's test VM (6.18, 2 CPUs) with BPF_PROG_LOAD log_level 4, the objects from
# bpfdsl compile --mcpu v3.  A rejected program's count is 1,000,001 (the limit + 1).
CASES: dict[str, tuple] = {}


def _case(name: str, text: str, verdict: str, processed: int) -> None:
    CASES[name] = (text, verdict, processed)


# kernel 6.18 figures of the code bpfdsl emits now (parse checks a header's whole length; in a
# loop, a header whose length is read from the packet shares one hoisted data_end)
_case("packet_loops_1", packet_loops(1), "ok", 2066)
_case("packet_loops_2", packet_loops(2), "ok", 117881)
_case("packet_loops_3", packet_loops(3), "rej", 1000001)  # reported (14 lines)
_case("option_walk_10", option_walk(10), "ok", 9257)
_case("option_walk_14", option_walk(14), "ok", 45489)
_case("option_walk_18", option_walk(18), "ok", 274872)
_case("option_walk_40", option_walk(40), "rej", 1000001)  # reported (flat, 21 lines)
_case("acl_ladder_25", acl_ladder(25), "ok", 13411)
_case("acl_ladder_50", acl_ladder(50), "ok", 139675)
_case("acl_ladder_75", acl_ladder(75), "ok", 588219)
_case("acl_ladder_100", acl_ladder(100), "rej", 1000001)  # reported (100 rules)
_case("near_limit_84_45", near_limit(84, 45), "ok", 965384)  # 96.5 % (the checker's too)
