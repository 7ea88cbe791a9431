"""Big programs (issue #23, item c): ACLs of 1,000-3,000 `if` rules and `match` with
16-256 arms, at every ``--mcpu`` the compiler accepts (bpfdsl.backend.target.MCPUS).

Each case is compiled with the checker on; an object the checker accepts must load in the
kernel, and the kernel and the interpreter must give the same verdicts, output bytes and
map contents on every frame (:func:`fuzz.programs.compare`).  The frames hit rules and arms
chosen from the program (first, last and random ones), the values between and past them,
and random ones, so the verdict of each rule is exercised, not just the default.

Program shapes (``fuzz`` is the XDP function, as in fuzz.programs, so its reproducer and
shrinker apply):

* ``acl``: after Ethernet / IPv4 / UDP, rule k tests the destination port (host order)
  for equality, a range, or equality together with the TTL or the source port; its body
  returns a verdict, or adds to a counter ``hits[k % 64]`` and returns (0.2 % only count:
  each such rule makes the verifier walk the later ones again, so a few keep the walk
  near, not over, its budget);
* ``match``: ``match`` on the TTL (u8), the protocol, or the destination port (dense or
  sparse values, some arms with ``|`` alternatives), each arm a verdict, a counter or both.

An `if` ladder on one value is what LLVM makes a ``switch`` of, and a dense switch a jump
table at ``-mcpu v4`` (issue 23, item a); a sparse one a binary search.
"""

from __future__ import annotations

import random
import struct

from . import programs
from .harness import Case, Fuzzer, Result
from .programs import reproducer, shrink

MCPUS = ("v1", "v2", "v3", "v4", "generic", "probe")  # bpfdsl.backend.target.MCPUS
VERDICTS = ("XDP_PASS", "XDP_DROP", "XDP_TX")
HEAD = """license "GPL"
map hits: array<u64>(max_entries: 64)

xdp fn fuzz(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    let dport = host(udp.dest)
    let sport = host(udp.source)
    let ttl = ip.ttl
"""


def _body(rng: random.Random, k: int, count_only: float) -> str:
    """A rule's or arm's action: a verdict, a counter and a verdict, or (with probability
    ``count_only``) a counter only: control goes on to the next rule with the port known,
    which the verifier walks again through every later rule (quadratic in the rules)."""
    v = rng.choice(VERDICTS)
    if rng.random() < count_only:
        return f"hits[{k % 64}] += {k + 1}"
    if rng.random() < 0.5:
        return f"return {v}"
    return f"hits[{k % 64}] += {k + 1}; return {v}"


def acl(rng: random.Random, n: int) -> tuple[str, list[tuple[int, int, int]]]:
    """An ACL of ``n`` rules; returns the source and (dport, sport, ttl) probes that hit
    rules (the first, the last and random ones) or fall between them."""
    base = rng.choice((1, 1000, 20000))
    step = rng.choice((1, 1, 2, 7))
    lines, probes = [], []
    for k in range(n):
        port = base + k * step
        # equality mostly: the false side of a range or of a compound test leaves a path
        # that the verifier walks through every later rule again (quadratic), so a few
        shape = rng.randrange(100)
        if shape < 96:
            cond = f"dport == {port}"
        elif shape < 98:
            cond = (
                f"dport >= {port} && dport <= {port + step - 1}" if step > 1 else f"dport == {port}"
            )
        elif shape < 99:
            cond = f"dport == {port} && ttl > {k % 200}"
        else:
            cond = f"dport == {port} && sport != {k}"
        lines.append(f"    if {cond} {{ {_body(rng, k, 0.002)} }}")
    last = base + (n - 1) * step
    for k in {0, 1, n // 2, n - 1, *(rng.randrange(n) for _ in range(12))}:
        probes.append((base + k * step, rng.randrange(65536), rng.randrange(256)))
    probes += [(base - 1, 9, 64), (last + step, 9, 64), (base + step // 2, 9, 1)]
    return HEAD + "\n".join(lines) + "\n    return XDP_PASS\n}\n", probes


def match(rng: random.Random, arms: int) -> tuple[str, list[tuple[int, int, int]]]:
    """A ``match`` of ``arms`` arms on ttl (u8, at most 256 values), or on dport."""
    on = rng.choice(("ttl", "dport", "dport"))
    if on == "ttl":
        values = sorted(rng.sample(range(256), min(arms, 256)))
    else:
        step = rng.choice((1, 1, 3, 97))
        start = rng.randrange(1, 60000 - arms * step)
        values = [start + i * step for i in range(arms)]
    lines, used, probes = [], set(), []
    i = 0
    while i < len(values):
        alts = [values[i]]
        if rng.random() < 0.15 and i + 1 < len(values):
            alts.append(values[i + 1])
            i += 1
        used.update(alts)
        lines.append(f"        {' | '.join(map(str, alts))} => {{ {_body(rng, i, 0.3)} }},")
        i += 1
    default = rng.choice(("_ => {}", "_ => return XDP_DROP,", "_ => hits[63] += 1,"))
    src = HEAD + f"    match {on} {{\n" + "\n".join(lines) + f"\n        {default}\n    }}\n"
    src += "    return XDP_PASS\n}\n"
    picks = {values[0], values[-1], *(rng.choice(values) for _ in range(14))}
    misses = [v for v in (values[0] - 1, values[-1] + 1, values[0] + 1) if v not in used]
    for v in [*picks, *misses]:
        v &= 0xFF if on == "ttl" else 0xFFFF
        dport, ttl = (53, v) if on == "ttl" else (v, 64)
        probes.append((dport, rng.randrange(65536), ttl))
    return src, probes


def frame(dport: int, sport: int, ttl: int) -> bytes:
    """Ethernet / IPv4 (``ttl``) / UDP ``sport`` -> ``dport`` (host order) with 8 bytes."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 36, 1, 0, ttl, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))  # fmt: skip
    udp = struct.pack("!HHHH", sport, dport, 16, 0) + bytes(8)
    return b"\x02\x00\x00\x00\x00\x0b\x02\x00\x00\x00\x00\x0a\x08\x00" + ip + udp


def program(seed: int, rules: tuple[int, int] = (1000, 3000), arms: tuple[int, int] = (16, 256)):
    """The payload (source, frames, mcpu) of one program from ``seed``."""
    rng = random.Random(seed)
    if rng.random() < 0.5:
        src, probes = acl(rng, rng.randint(*rules))
    else:
        src, probes = match(rng, rng.randint(*arms))
    pkts = [frame(*p) for p in probes]
    pkts.append(frame(53, 53, 64)[:30])  # cut inside IPv4: the parse fails
    return src, pkts, rng.choice(MCPUS)


def cases(seed: int, count: int, kernel: bool, rules: tuple[int, int] = (1000, 3000)):
    """``count`` big programs from ``seed`` (``rules``: the ACL sizes)."""
    rng = random.Random(seed)
    for i in range(count):
        payload = program(rng.getrandbits(64), rules=rules)
        kind = "acl" if "    if dport" in payload[0] else "match"
        lines = payload[0].count("\n")
        yield Case(payload, f"big program {i} ({kind}, {lines} lines, --mcpu {payload[2]})")


def run_case(payload: tuple[str, list[bytes], str]) -> Result:
    """:func:`fuzz.programs.run_case`; below v4 a program whose jumps do not fit 16 bits is
    the documented ``program-too-large`` error (docs/language.md), a fine outcome."""
    res = programs.run_case(payload)
    if res.outcome == "compile-rejected" and res.detail.endswith("program-too-large"):
        return Result("too-large", res.detail)
    return res


def ci_cases(seed: int, count: int, kernel: bool):
    """The bounded CI campaign's cases: ACLs of 1,000-1,300 rules (compile and check take
    ~5-10 s each on the CI machine), matches of 16-256 arms."""
    return cases(seed, count, kernel, rules=(1000, 1300))


FUZZER = Fuzzer("bigprogs", cases, run_case, reproducer, shrink, timeout=300.0)
CI_FUZZER = Fuzzer("bigprogs", ci_cases, run_case, reproducer, shrink, timeout=120.0)
