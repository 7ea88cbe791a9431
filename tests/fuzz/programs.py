"""Random valid XDP programs over the language's real features, run on both engines.

The generator (:class:`ProgGen`) writes well-typed programs: parse chains (ethernet,
802.1Q/802.1AD tags in a bounded loop, IPv4/IPv6 with ``skip_ext``, TCP/UDP/ICMP/ICMPv6,
payload bytes), field reads and writes (checksums updated by the compiler), ``swap``,
every data map kind (array, percpu_array, hash, percpu_hash, lru_hash, lpm_trie v4/v6,
struct keys and values, an array field), lookups with ``else``/``if let``, ``+=`` and
``update``/``delete``/``contains``, host and network order arithmetic with casts (signed
too), ``match``, bounded loops with ``break``/``continue``, inlined ``fn`` helpers,
``hash()``, ``adjust_head``/``adjust_tail``/``adjust_meta`` with a new parse, and every
return: actions, ``redirect``, ``redirect_map`` through devmap, devmap_hash, cpumap and
xskmap.  Nothing reads the clock or the random helper (the two engines would disagree by
design); the worker runs pinned to one CPU so per-CPU maps and
``get_smp_processor_id()`` agree.

Each program is compiled (the checker runs), loaded (BPF_PROG_LOAD through the loader)
and run with BPF_PROG_TEST_RUN and the interpreter on the same frames (whole ones and
truncated ones) with the same map contents: verdict, output bytes and every data map
after every frame must be equal (and the records sent through each ring buffer).  A
compile error, a kernel rejection (except the verifier's documented complexity limit) or
a difference is a failure; a checker refusal is loaded without the checker, so that it
counts as ``checker-false-refusal`` when the kernel loads the object and ``both-refused``
when it does not (``stack-limit``, not a failure, when both refuse the 512 bytes of stack
of a call chain).  :mod:`fuzz.subprograms` extends the generator with BPF subprograms.
"""

from __future__ import annotations

import os
import random
import re
import struct

from .harness import Case, Fuzzer, Result, ddmin, exception_result

UINTS = ("u8", "u16", "u32", "u64")
SINTS = ("i32", "i64")
BITS = {"u8": 8, "u16": 16, "u32": 32, "u64": 64, "i32": 32, "i64": 64}
ACTIONS = ("XDP_PASS", "XDP_DROP", "XDP_TX", "XDP_ABORTED")

HEADER = """license "GPL"
struct flow { saddr: be32, daddr: be32, proto: u8, pkts: u64 }
struct stats { pkts: u64, bytes: u64 }
struct pair { a: u32, b: u64 }
struct buckets { n: [u64; 4] }
const PORT: be16 = 53
const LIMIT: u32 = 1000
const MASK: u8 = 0x0f
const GW: be32 = 192.0.2.1
const ROUTER: mac_addr = 02:00:00:00:00:01
config knob: u32 = 3
config port: be16 = 9999
config thresh: u64 = 64
map arr: array<u32, u64>(max_entries: 16)
map st: array<u32, stats>(max_entries: 4)
map pc: percpu_array<u64>(max_entries: 8)
map hist: percpu_array<u32, buckets>(max_entries: 2)
map hs: hash<u32, u64>(max_entries: 64)
map pch: percpu_hash<u32, u64>(max_entries: 32)
map ips: hash<be32, u32>(max_entries: 64)
map pr: hash<u32, pair>(max_entries: 32)
map flows: lru_hash<flow, u64>(max_entries: 256)
map lpm4: lpm_trie<ipv4_prefix, u32>(max_entries: 16)
map lpm6: lpm_trie<ipv6_prefix, u32>(max_entries: 16)
map tx: devmap(max_entries: 8)
map txh: devmap_hash(max_entries: 8)
map cpus: cpumap(max_entries: 2)
map xsks: xskmap(max_entries: 4)
fn mix(a: u32, b: u32) -> u32 {
    return (a ^ (b << 3)) + 1
}
fn dec_ttl(ip: ipv4, by: u8) {
    if ip.ttl > by { ip.ttl -= by }
}
fn is_private(a: be32) -> bool {
    return a in 10.0.0.0/8 || a in 172.16.0.0/12 || a in 192.168.0.0/16
}
fn clamp(x: u64, hi: u64) -> u64 {
    if x > hi { return hi }
    return x
}
"""

# host-order fields per header view kind: (expression, type); be fields read with host()
U8_FIELDS = {
    "ip": ["ttl", "tos", "protocol", "ihl", "version"],
    "ip6": ["hop_limit", "nexthdr", "priority", "version"],
    "tcp": ["doff", "syn", "ack", "fin", "rst"],
    "icmp": ["type", "code"],
    "icmp6": ["icmp6_type", "icmp6_code"],
}
BE16_FIELDS = {
    "eth": ["h_proto"],
    "tag": ["h_vlan_TCI", "h_vlan_encapsulated_proto"],
    "ip": ["tot_len", "id", "frag_off", "check"],
    "ip6": ["payload_len"],
    "udp": ["source", "dest", "len", "check"],
    "tcp": ["source", "dest", "window", "urg_ptr"],
    "icmp": ["id", "sequence"],
    "icmp6": ["icmp6_identifier", "icmp6_sequence"],
}
BE32_FIELDS = {"ip": ["saddr", "daddr"], "tcp": ["seq", "ack_seq"], "icmp": ["gateway"]}
# writable fields and a value for each: (field, type)
WRITES = {
    "eth": [("h_dest", "mac"), ("h_source", "mac"), ("h_proto", "be16")],
    "ip": [("ttl", "u8"), ("tos", "u8"), ("id", "be16"), ("saddr", "be32"), ("daddr", "be32"),
           ("frag_off", "be16"), ("tot_len", "be16")],
    "ip6": [("hop_limit", "u8"), ("saddr", "ip6addr"), ("daddr", "ip6addr"),
            ("payload_len", "be16")],
    "udp": [("source", "be16"), ("dest", "be16"), ("len", "be16"), ("check", "be16")],
    "tcp": [("source", "be16"), ("dest", "be16"), ("window", "be16"), ("seq", "be32")],
    "icmp": [("type", "u8"), ("code", "u8"), ("id", "be16")],
    "icmp6": [("icmp6_type", "u8"), ("icmp6_identifier", "be16")],
    "tag": [("h_vlan_TCI", "be16")],
}  # fmt: skip
# fields of the TCP/UDP pseudo-header: a `fn` may not write them (pseudo-header)
PSEUDO = {("ip", "saddr"), ("ip", "daddr"), ("ip", "tot_len"), ("ip6", "saddr"),
          ("ip6", "daddr"), ("ip6", "payload_len")}  # fmt: skip
SWAPS = {
    "eth": [("h_dest", "h_source")],
    "ip": [("saddr", "daddr")],
    "ip6": [("saddr", "daddr")],
    "udp": [("source", "dest")],
    "tcp": [("source", "dest")],
}


class Scope:
    """What a statement may use: typed locals, header views, map value references,
    whether it is inside a loop (break/continue) and whether the IP header's L4 view is
    parsed in scope (``ip.protocol`` writable)."""

    def __init__(self) -> None:
        self.vars: dict[str, str] = {}
        self.hdrs: set[str] = set()
        self.refs: dict[str, str] = {}
        self.loop = False
        self.l4 = False
        self.ro: set[str] = set()  # locals that may not be assigned (loop counters)
        # None in a program body; in a BPF subprogram (noinline/global fn, loop callback:
        # no context, no parsing) the type it returns ("" for nothing)
        self.sub: str | None = None

    def child(self, loop: bool | None = None) -> Scope:
        s = Scope()
        s.vars, s.hdrs, s.refs = dict(self.vars), set(self.hdrs), dict(self.refs)
        s.loop = self.loop if loop is None else loop
        s.l4 = self.l4
        s.ro = set(self.ro)
        s.sub = self.sub
        return s


class ProgGen:
    """One random program per :meth:`program` call (deterministic for a seed)."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng
        self.n = 0
        self.depth = 0
        self.loops = 0

    def fresh(self, p: str) -> str:
        self.n += 1
        return f"{p}{self.n}"

    def c(self, *xs):
        return self.r.choice(xs)

    # ---- expressions ----

    def lit(self, ty: str) -> str:
        bits = BITS[ty]
        if ty in SINTS:
            return str(self.r.choice([0, 1, 2, 7, 100, 0x7FFF, (1 << (bits - 1)) - 1]))
        top = (1 << bits) - 1
        v = self.r.choice([0, 1, 2, 3, 7, 8, 15, 16, 31, 63, 64, 100, 127, 128, 255, top,
                           top >> 1, self.r.getrandbits(bits)])  # fmt: skip
        v &= top
        return hex(v) if self.r.random() < 0.3 else str(v)

    def tlit(self, ty: str) -> str:
        """A literal of type ``ty`` (typed, so constant folding wraps at its width instead
        of computing an exact untyped value that may not fit)."""
        return f"({self.lit(ty)} as {ty})"

    def runtime(self, ty: str, sc: Scope) -> str:
        """A value of ``ty`` that is not a compile-time constant (configs are never folded)."""
        srcs = [("knob", "u32"), ("thresh", "u64"), ("ctx.len", "u64"), ("host(port)", "u16")]
        if sc.sub is not None:  # no context in a subprogram
            srcs.remove(("ctx.len", "u64"))
        srcs += [(v, t) for v, t in sc.vars.items() if t in BITS]
        e, t = self.r.choice(srcs)
        return e if t == ty else f"({e} as {ty})"

    def leaf(self, ty: str, sc: Scope) -> str:
        """A value of host type ``ty``."""
        r = self.r
        opts: list[str] = [self.tlit(ty), self.tlit(ty)]
        src: list[tuple[str, str]] = []
        if sc.sub is None:  # a subprogram gets no context
            src += [("ctx.len", "u64"), ("ctx.ingress_ifindex", "u32"),
                    ("ctx.rx_queue_index", "u32")]  # fmt: skip
        src += [
            ("knob", "u32"),
            ("thresh", "u64"),
            ("LIMIT", "u32"),
            ("MASK", "u8"),
            ("host(port)", "u16"),
            ("get_smp_processor_id()", "u32"),
        ]
        for h in sorted(sc.hdrs):
            for f in U8_FIELDS.get(h, []):
                src.append((f"{h}.{f}", "u8"))
            for f in BE16_FIELDS.get(h, []):
                src.append((f"host({h}.{f})", "u16"))
            for f in BE32_FIELDS.get(h, []):
                src.append((f"host({h}.{f})", "u32"))
        if "ip" in sc.hdrs:
            src.append(("hash(ip.saddr, ip.daddr, ip.protocol)", "u32"))
        if "ip6" in sc.hdrs:
            src.append(("hash(ip6.saddr, ip6.daddr)", "u32"))
        for v, t in sc.vars.items():
            if t in BITS:
                src += [(v, t)] * 3
        for v, t in sc.refs.items():
            if t == "u64":
                src.append((v, "u64"))
            elif t == "u32":
                src.append((v, "u32"))
            elif t == "stats":
                src += [(f"{v}.pkts", "u64"), (f"{v}.bytes", "u64")]
            elif t == "pair":
                src += [(f"{v}.a", "u32"), (f"{v}.b", "u64")]
            elif t == "lst":
                src += [(f"{v}.n", "u64"), (f"{v}.k", "u32")]
        src += self.extra_leaves(sc)
        e, t = r.choice(src)
        if t == ty:
            opts += [e] * 4
        elif ty in SINTS and t in SINTS or (ty not in SINTS):
            opts += [f"({e} as {ty})"] * 2
        else:
            opts.append(f"({e} as {ty})")
        return r.choice(opts)

    def extra_leaves(self, sc: Scope) -> list[tuple[str, str]]:
        """More (expression, type) leaves a subclass offers (calls of its subprograms)."""
        return []

    def extra_conds(self, sc: Scope) -> list[str]:
        """More conditions a subclass offers."""
        return []

    def leave(self, sc: Scope) -> str:
        """A ``return`` of the function ``sc`` is in: an action in a program, a value of
        the return type in a subprogram."""
        if sc.sub is None:
            return f"return {self.action(sc)}"
        if sc.sub == "":
            return "return"
        if sc.sub == "bool":
            return f"return {self.c('true', 'false', 'false', 'false')}"
        return f"return {self.expr(sc.sub, sc, 2)}"

    def expr(self, ty: str, sc: Scope, d: int = 0) -> str:
        r = self.r
        if d >= 3 or r.random() < 0.35:
            return self.leaf(ty, sc)
        k = r.random()
        bits = BITS[ty]
        if k < 0.08:
            return f"~{self.expr(ty, sc, d + 1)}"
        if k < 0.12 and ty in SINTS:
            return f"-({self.expr(ty, sc, d + 1)})"
        if k < 0.17 and ty == "u32":
            return f"mix({self.expr('u32', sc, d + 1)}, {self.expr('u32', sc, d + 1)})"
        if k < 0.2 and ty == "u64":
            return f"clamp({self.expr('u64', sc, d + 1)}, {self.lit('u64')})"
        if k < 0.26:  # a cast of another width (truncates, zero- or sign-extends)
            other = r.choice([t for t in UINTS + SINTS if t != ty])
            return f"({self.expr(other, sc, d + 1)} as {ty})"
        ops = ["+", "-", "*", "&", "|", "^", "<<", ">>"]
        if ty in UINTS:
            ops += ["/", "%"]
        op = r.choice(ops)
        lhs = self.expr(ty, sc, d + 1)
        if op in ("<<", ">>"):
            if r.random() < 0.6:
                rhs = str(r.randrange(bits))
            else:  # a run-time count, masked below the width
                rhs = f"({self.runtime(ty, sc)} & {bits - 1})"
        elif op in ("/", "%"):
            if r.random() < 0.5:
                rhs = str(r.randint(1, min(1000, (1 << bits) - 1)))
            else:  # may be 0 at run time: BPF's x/0 = 0, x%0 = x
                rhs = f"({self.runtime(ty, sc)} {r.choice(['&', '-', '^'])} {self.expr(ty, sc, d + 1)})"
        else:
            rhs = self.expr(ty, sc, d + 1)
        return f"({lhs} {op} {rhs})"

    def be16(self, sc: Scope) -> str:
        opts = ["53", "80", "9999", "0", "65535", "PORT", "port", "ETH_P_IP", "ETH_P_IPV6"]
        opts += [f"be16({self.expr('u16', sc)})"] * 2
        for h in sorted(sc.hdrs):
            opts += [f"{h}.{f}" for f in BE16_FIELDS.get(h, [])]
        return self.r.choice(opts)

    def be32(self, sc: Scope) -> str:
        opts = ["10.0.0.1", "192.0.2.1", "GW", "0.0.0.0", "255.255.255.255"]
        opts += [f"be32({self.expr('u32', sc)})"]
        for h in sorted(sc.hdrs):
            opts += [f"{h}.{f}" for f in BE32_FIELDS.get(h, [])]
        return self.r.choice(opts)

    def value(self, ty: str, sc: Scope) -> str:
        if ty in BITS:
            return self.expr(ty, sc)
        if ty == "be16":
            return self.be16(sc)
        if ty == "be32":
            return self.be32(sc)
        if ty == "mac":
            opts = ["ROUTER", "ff:ff:ff:ff:ff:ff", "00:00:00:00:00:00"]
            if "eth" in sc.hdrs:
                opts += ["eth.h_source", "eth.h_dest"]
            return self.r.choice(opts)
        if ty == "ip6addr":
            opts = ["2001:db8::1", "::1", "fe80::1"]
            if "ip6" in sc.hdrs:
                opts += ["ip6.saddr", "ip6.daddr"]
            return self.r.choice(opts)
        raise ValueError(ty)

    def cond(self, sc: Scope, d: int = 0) -> str:
        r = self.r
        ty = r.choice(UINTS + SINTS)
        opts = [f"{self.expr(ty, sc, 1)} {r.choice(['<', '>', '==', '!=', '<=', '>='])} "
                f"{self.expr(ty, sc, 1)}"] * 4  # fmt: skip
        opts += [f"hs.contains({self.key32(sc, 16)})", f"ctx.len > {self.lit('u16')}"]
        if sc.sub is not None:
            opts.pop()
        opts += [f"{v}" for v, t in sc.vars.items() if t == "bool"]
        opts += self.extra_conds(sc)
        if "eth" in sc.hdrs:
            opts += ["eth.h_dest == ff:ff:ff:ff:ff:ff", "eth.h_source == ROUTER",
                     "eth.h_proto == ETH_P_ARP"]  # fmt: skip
        if "ip" in sc.hdrs:
            opts += ["ip.saddr in 10.0.0.0/8", "lpm4.contains(ip.daddr)", "ip.daddr == GW",
                     "is_private(ip.saddr)", "ips.contains(ip.saddr)",
                     f"ip.protocol == {self.c('IPPROTO_UDP', 'IPPROTO_TCP', 'IPPROTO_ICMP')}"]  # fmt: skip
        if "ip6" in sc.hdrs:
            opts += ["ip6.daddr in 2001:db8::/32", "lpm6.contains(ip6.saddr)",
                     "ip6.saddr == fe80::1"]  # fmt: skip
        for h in ("udp", "tcp"):
            if h in sc.hdrs:
                opts += [f"{h}.dest == PORT", f"{h}.source == port", f"host({h}.dest) < 1024"]
        c = r.choice(opts)
        if d < 2 and r.random() < 0.25:
            c2 = self.cond(sc, d + 1)
            c = r.choice([f"({c}) && ({c2})", f"({c}) || ({c2})", f"!({c})"])
        return c

    def key32(self, sc: Scope, space: int) -> str:
        """A u32 key in 0..space-1 (mostly) or any u32."""
        e = self.expr("u32", sc, 1)
        if self.r.random() < 0.85:
            return f"({e} % {space})"
        return e

    def action(self, sc: Scope) -> str:
        r = self.r
        k = r.random()
        if k < 0.55:
            return r.choice(ACTIONS)
        if k < 0.7:
            return f"redirect_map(tx, {self.key32(sc, 8)}, {r.choice(ACTIONS)})"
        if k < 0.75:
            return f"redirect_map(txh, {self.key32(sc, 8)}, {r.choice(ACTIONS)})"
        if k < 0.82:
            return f"redirect_map(cpus, {self.key32(sc, 2)}, {r.choice(ACTIONS)})"
        if k < 0.88:
            return f"redirect_map(xsks, ctx.rx_queue_index, {r.choice(ACTIONS)})"
        if k < 0.93:
            # a constant flag is a compile error (bad-flags); a run-time 1 still reaches the
            # kernel's XDP_ABORTED for flags, on both engines
            flags = self.c("0", "0", "((ctx.ingress_ifindex >> 31) | 1)")
            return f"redirect({self.c('1', '2', 'ctx.ingress_ifindex')}, {flags})"
        return self.c(
            "redirect_map(tx, 0, BPF_F_BROADCAST)",
            "redirect_map(tx, 1, BPF_F_BROADCAST | BPF_F_EXCLUDE_INGRESS)",
        )

    # ---- statements ----

    def block(self, sc: Scope, n: int) -> list[str]:
        out: list[str] = []
        for _ in range(n):
            out += self.stmt(sc)
        return out

    def ind(self, lines: list[str]) -> list[str]:
        return ["    " + x for x in lines]

    def stmt(self, sc: Scope) -> list[str]:
        r = self.r
        self.depth += 1
        try:
            kinds = ["let", "let", "assign", "count", "count", "lookup", "iflet", "mapop", "ret"]
            if self.depth < 4:
                kinds += ["if", "if", "match"]
                if self.loops < 2:
                    kinds += ["for"]
            if sc.loop:
                kinds += ["brk"]
            if sc.hdrs - {"eth"}:
                kinds += ["write", "write"]
            if sc.hdrs & set(SWAPS):
                kinds += ["swap"]
            if "ip" in sc.hdrs:
                kinds += ["flow", "dec"]
            if "ip6" in sc.hdrs or "ip" in sc.hdrs:
                kinds += ["lpm"]
            if sc.hdrs & {"udp", "tcp", "icmp", "icmp6"} and not sc.loop and sc.sub is None:
                kinds += ["payload"]
            kinds += self.extra_kinds(sc)
            return getattr(self, "s_" + r.choice(kinds))(sc)
        finally:
            self.depth -= 1

    def extra_kinds(self, sc: Scope) -> list[str]:
        """More statement kinds (``s_KIND`` methods) a subclass offers in ``sc``."""
        return []

    def s_let(self, sc: Scope) -> list[str]:
        ty = self.r.choice(UINTS + SINTS + ("bool",))
        v = self.fresh("v")
        val = self.cond(sc) if ty == "bool" else self.expr(ty, sc)
        sc.vars[v] = ty
        return [f"let {v}: {ty} = {val}"]

    def s_assign(self, sc: Scope) -> list[str]:
        ints = [v for v, t in sc.vars.items() if t in BITS and v not in sc.ro]
        if not ints:
            return self.s_let(sc)
        v = self.r.choice(ints)
        ty = sc.vars[v]
        op = self.r.choice(["=", "+=", "-=", "|=", "&=", "^=", "*="])
        return [f"{v} {op} {self.expr(ty, sc)}"]

    def s_count(self, sc: Scope) -> list[str]:
        r = self.r
        return [
            r.choice(
                [
                    f"arr[{self.key32(sc, 16)}] += {self.expr('u64', sc)}",
                    f"pc[{self.key32(sc, 8)}] += 1",
                    f"hs[{self.key32(sc, 16)}] += {self.expr('u64', sc)}",
                    f"pch[{self.key32(sc, 8)}] += 1",
                    f"hs[{self.key32(sc, 16)}] = {self.expr('u64', sc)}",
                    f"arr[{self.key32(sc, 16)}] = {self.expr('u64', sc)}",
                    f"pr[{self.key32(sc, 8)}] = pair(a: {self.expr('u32', sc)}, "
                    f"b: {self.expr('u64', sc)})",
                ]
            )
        ]

    def s_mapop(self, sc: Scope) -> list[str]:
        r = self.r
        flags = r.choice(["BPF_ANY", "BPF_NOEXIST", "BPF_EXIST"])
        v = self.fresh("rc")
        return [
            r.choice(
                [
                    f"hs.update({self.key32(sc, 16)}, {self.expr('u64', sc)}, {flags})",
                    f"hs.delete({self.key32(sc, 16)})",
                    f"pch.delete({self.key32(sc, 8)})",
                    f"pr.delete({self.key32(sc, 8)})",
                    f"arr.update({self.key32(sc, 20)}, {self.expr('u64', sc)}, {flags})",
                    f"let {v} = hs.update({self.key32(sc, 16)}, 1, {flags})",
                ]
            )
        ]

    def s_lookup(self, sc: Scope) -> list[str]:
        r = self.r
        v = self.fresh("m")
        which = r.choice(["arr", "hs", "st", "pr", "hist", "pc"])
        k = self.key32(sc, {"arr": 16, "hs": 16, "st": 4, "pr": 8, "hist": 2, "pc": 8}[which])
        leave = self.c(*(["break", "continue"] if sc.loop else []), self.leave(sc))
        out = [f"let {v} = {which}.lookup({k}) else {{ {leave} }}"]
        if which in ("arr", "hs", "pc"):
            out.append(f"{v} {self.c('+=', '=', '+=')} {self.expr('u64', sc)}")
            sc.refs[v] = "u64"
        elif which == "st":
            out += [f"{v}.pkts += 1", f"{v}.bytes += {self.expr('u64', sc)}"]
            sc.refs[v] = "stats"
        elif which == "pr":
            out.append(f"{v}.b += {self.expr('u64', sc)}")
            sc.refs[v] = "pair"
        else:
            i = self.fresh("i")
            out += [f"for {i} in 0..4 {{ {v}.n[{i}] += {self.expr('u64', sc)} }}",
                    f"{v}.n[{r.randrange(4)}] = {self.expr('u64', sc)}"]  # fmt: skip
        return out

    def s_iflet(self, sc: Scope) -> list[str]:
        v = self.fresh("m")
        inner = sc.child()
        inner.refs[v] = "u64"
        body = [f"{v} += {self.expr('u64', inner)}"] + self.block(inner, self.r.randint(0, 2))
        out = [f"if let {v} = hs.lookup({self.key32(sc, 16)}) {{", *self.ind(body), "}"]
        if self.r.random() < 0.5:
            out[-1] = "} else {"
            out += self.ind(self.block(sc.child(), self.r.randint(1, 2))) + ["}"]
        return out

    def s_lpm(self, sc: Scope) -> list[str]:
        v = self.fresh("p")
        if "ip" in sc.hdrs and ("ip6" not in sc.hdrs or self.r.random() < 0.5):
            m, a = "lpm4", self.c("ip.saddr", "ip.daddr")
        else:
            m, a = "lpm6", self.c("ip6.saddr", "ip6.daddr")
        inner = sc.child()
        inner.refs[v] = "u32"
        body = self.block(inner, self.r.randint(0, 2))
        if self.r.random() < 0.3:
            body.append(f"if {v} > {self.lit('u32')} {{ {self.leave(sc)} }}")
        return [f"if let {v} = {m}.lookup({a}) {{", *self.ind(body), "}"]

    def s_if(self, sc: Scope) -> list[str]:
        t = self.block(sc.child(), self.r.randint(1, 3))
        out = [f"if {self.cond(sc)} {{", *self.ind(t), "}"]
        k = self.r.random()
        if k < 0.3:
            out[-1] = f"}} else if {self.cond(sc)} {{"
            out += self.ind(self.block(sc.child(), self.r.randint(1, 2))) + ["}"]
        if k < 0.6:
            out[-1] = "} else {"
            out += self.ind(self.block(sc.child(), self.r.randint(1, 2))) + ["}"]
        return out

    def s_match(self, sc: Scope) -> list[str]:
        r = self.r
        if "ip" in sc.hdrs and r.random() < 0.5:
            subj = "ip.protocol"
            pats = ["IPPROTO_UDP", "IPPROTO_TCP", "IPPROTO_ICMP | IPPROTO_GRE", "IPPROTO_IPIP"]
        else:
            ty = r.choice(("u8", "u16", "u32"))
            subj = self.expr(ty, sc, 1)
            pats = [str(x) for x in r.sample(range(0, 20), 3)]
            pats[0] += f" | {r.randrange(20, 40)}"
        out = [f"match {subj} {{"]
        for p in pats[: r.randint(1, len(pats))]:
            if r.random() < 0.5:
                out.append(f"    {p} => {self.simple(sc)},")
            else:
                out += [f"    {p} => {{", *self.ind(self.ind(self.block(sc.child(), 1))), "    }"]
        out += ["    _ => {}", "}"] if r.random() < 0.6 else ["    _ => " + self.simple(sc), "}"]
        return out

    def simple(self, sc: Scope) -> str:
        return self.c(
            self.leave(sc),
            f"arr[{self.key32(sc, 16)}] += 1",
            f"pc[{self.r.randrange(8)}] += 1",
            *(["break", "continue"] if sc.loop else []),
        )

    def s_for(self, sc: Scope) -> list[str]:
        self.loops += 1
        try:
            i = self.fresh("i")
            lo = self.r.randint(0, 2)
            hi = lo + self.r.randint(1, 6)
            inner = sc.child(loop=True)
            inner.vars[i] = "u32"  # the loop counter: a u32, read-only
            inner.ro.add(i)
            body = self.block(inner, self.r.randint(1, 3))
            return [f"for {i} in {lo}..{hi} {{", *self.ind(body), "}"]
        finally:
            self.loops -= 1

    def s_brk(self, sc: Scope) -> list[str]:
        return [f"if {self.cond(sc)} {{ {self.c('break', 'continue')} }}"]

    def s_ret(self, sc: Scope) -> list[str]:
        return [f"if {self.cond(sc)} {{ {self.leave(sc)} }}"]

    def s_write(self, sc: Scope) -> list[str]:
        h = self.r.choice(sorted(sc.hdrs & set(WRITES)))
        fields = WRITES[h]
        if sc.sub is not None:  # a fn cannot find the L4 header of a pseudo-header field
            fields = [(f, t) for f, t in fields if (h, f) not in PSEUDO]
        f, ty = self.r.choice(fields)
        if ty in BITS and self.r.random() < 0.3:
            return [f"{h}.{f} {self.c('+=', '-=', '^=')} {self.expr(ty, sc)}"]
        if h == "ip" and sc.l4 and self.r.random() < 0.2:
            return ["ip.protocol = ip.protocol"]
        return [f"{h}.{f} = {self.value(ty, sc)}"]

    def s_swap(self, sc: Scope) -> list[str]:
        hs = sc.hdrs & set(SWAPS)
        if sc.sub is not None:  # addresses: pseudo-header fields
            hs -= {"ip", "ip6"}
        if not hs:
            return self.s_let(sc)
        h = self.r.choice(sorted(hs))
        a, b = self.r.choice(SWAPS[h])
        return [f"swap({h}.{a}, {h}.{b})"]

    def s_flow(self, sc: Scope) -> list[str]:
        return ["flows[flow(saddr: ip.saddr, daddr: ip.daddr, proto: ip.protocol)] += 1"]

    def s_dec(self, sc: Scope) -> list[str]:
        return [f"dec_ttl(ip, {self.r.randint(0, 3)})"]

    def s_payload(self, sc: Scope) -> list[str]:
        b, i = self.fresh("b"), self.fresh("i")
        inner = sc.child(loop=True)
        val = self.expr("u8", inner, 1)
        out = [f"for {i} in 0..{self.r.randint(1, 12)} {{",
               f"    let {b} = parse byte else {{ break }}"]  # fmt: skip
        if self.r.random() < 0.6:
            out.append(f"    {b}.value = {val}")
        else:
            out.append(f"    arr[({b}.value % 16) as u32] += 1")
        out.append("}")
        if "udp" in sc.hdrs and "ip" in sc.hdrs:
            out.append("udp.check = 0")
        return out

    # ---- the program ----

    def l4(self, sc: Scope, proto_expr: str, v6: bool) -> list[str]:
        """``if PROTO == X { parse L4; statements }`` for one of UDP/TCP/ICMP(v6)."""
        kinds = ["udp", "tcp", "icmp6" if v6 else "icmp"]
        k = self.r.choice(kinds)
        hdr = {"udp": "udp", "tcp": "tcp", "icmp": "icmp", "icmp6": "icmpv6"}[k]
        num = {"udp": "IPPROTO_UDP", "tcp": "IPPROTO_TCP", "icmp": "IPPROTO_ICMP",
               "icmp6": "IPPROTO_ICMPV6"}[k]  # fmt: skip
        inner = sc.child()
        inner.hdrs.add(k)
        inner.l4 = not v6
        body = [f"let {k} = parse {hdr} else {{ return {self.action(sc)} }}"]
        body += self.block(inner, self.r.randint(1, 4))
        return [f"if {proto_expr} == {num} {{", *self.ind(body), "}"]

    def program(self) -> str:
        r = self.r
        top = Scope()
        body: list[str] = []
        body += self.block(top, r.randint(0, 2))
        body.append(f"let eth = parse ethernet else {{ return {self.action(top)} }}")
        top.hdrs.add("eth")
        proto = "eth.h_proto"
        if r.random() < 0.35:
            body += [
                "let proto = eth.h_proto",
                f"for t in 0..{r.randint(1, 2)} {{",
                "    if proto != ETH_P_8021Q && proto != ETH_P_8021AD { break }",
                "    let tag = parse vlan else { return XDP_PASS }",
                "    proto = tag.h_vlan_encapsulated_proto",
                "}",
            ]
            proto = "proto"
        body += self.block(top, r.randint(0, 2))
        s4 = top.child()
        s4.hdrs.add("ip")
        v4 = [f"let ip = parse ipv4 else {{ return {self.action(top)} }}"]
        v4 += self.block(s4, r.randint(0, 3))
        v4 += self.l4(s4, "ip.protocol", False)
        v4 += self.block(s4, r.randint(0, 2))
        s6 = top.child()
        s6.hdrs.add("ip6")
        v6 = [f"let ip6 = parse ipv6 else {{ return {self.action(top)} }}"]
        if r.random() < 0.5:
            v6.append(f"let nh = skip_ext(ip6) else {{ return {self.action(top)} }}")
            s6.vars["nh"] = "u8"
            s6.ro.add("nh")
            v6 += self.l4(s6, "nh", True)
        else:
            v6 += self.l4(s6, "ip6.nexthdr", True)
        v6 += self.block(s6, r.randint(0, 2))
        body += [f"if {proto} == ETH_P_IP {{", *self.ind(v4),
                 f"}} else if {proto} == ETH_P_IPV6 {{", *self.ind(v6), "}"]  # fmt: skip
        if r.random() < 0.3:
            body += self.block(top, r.randint(1, 2))
        if r.random() < 0.3:  # resize, then parse again: every earlier view is stale
            call = r.choice(
                [f"adjust_tail(-{r.randint(0, 16)})", f"adjust_tail({r.randint(1, 64)})",
                 f"adjust_head({r.choice([-8, -4, 4, 14])})", f"adjust_meta(-{r.choice([4, 8])})"]
            )  # fmt: skip
            top.hdrs.clear()  # the kernel drops packet pointers at the call, success or not
            body.append(f"if {call} != 0 {{ return {self.action(top)} }}")
            body.append(f"let e2 = parse ethernet else {{ return {self.action(top)} }}")
            top.hdrs.add("eth")
            body.append(r.choice(["swap(e2.h_dest, e2.h_source)", "e2.h_proto = ETH_P_IP",
                                  "arr[0] += host(e2.h_proto) as u64"]))  # fmt: skip
            top.hdrs.discard("eth")
        body += self.block(top, r.randint(0, 2))
        body.append(f"return {self.action(top)}")
        return HEADER + "xdp fn fuzz(ctx) {\n" + "\n".join(self.ind(body)) + "\n}\n"


# ---- frames --------------------------------------------------------------------------


def frames(seed: int) -> list[bytes]:
    """Ethernet frames (>= 14 bytes: BPF_PROG_TEST_RUN refuses shorter ones): IPv4/IPv6
    with UDP/TCP/ICMP(v6), options, extension headers (hop-by-hop, SRH with segments left,
    fragment), 802.1Q/802.1AD tags, ARP, other ethertypes, broadcast, a 1500-byte frame,
    bad ihl/doff, and truncated copies cut at and around every header boundary."""
    from scapy.layers.inet import ICMP, IP, TCP, UDP
    from scapy.layers.inet6 import (
        ICMPv6EchoRequest,
        IPv6,
        IPv6ExtHdrFragment,
        IPv6ExtHdrHopByHop,
        IPv6ExtHdrSegmentRouting,
    )
    from scapy.layers.l2 import ARP, Dot1AD, Dot1Q, Ether

    rng = random.Random(seed)
    e = Ether(src="02:00:00:00:00:0a", dst="02:00:00:00:00:0b")
    bc = Ether(src="02:00:00:00:00:01", dst="ff:ff:ff:ff:ff:ff")
    pkts = [
        e / IP(src="10.1.1.1", dst="192.0.2.1") / UDP(sport=1234, dport=53) / (b"q" * 20),
        e
        / IP(src="192.168.1.2", dst="10.0.0.1", ttl=1)
        / UDP(sport=9999, dport=9999)
        / (b"x" * 40),
        e
        / IP(src="172.16.0.9", dst="192.0.2.77", options=b"\x01\x01\x01\x00")
        / TCP(sport=4000, dport=80, flags="S", options=[("MSS", 1460), ("NOP", None)])
        / b"GET /",
        e / IP(src="203.0.113.5", dst="10.9.9.9") / ICMP(type=8, id=7, seq=1) / (b"p" * 8),
        e / IP(src="10.1.1.1", dst="10.2.2.2", frag=100, proto=17) / (b"f" * 16),
        e / IP(src="10.1.1.1", dst="10.2.2.2", proto=47) / (b"g" * 24),
        bc / IP(src="10.3.3.3", dst="255.255.255.255") / UDP(dport=67, chksum=0) / (b"d" * 12),
        e / IPv6(src="2001:db8::1", dst="2001:db8::2") / UDP(sport=53, dport=5353) / b"six",
        e
        / IPv6(src="fc00::5", dst="fe80::1", hlim=1)
        / TCP(sport=22, dport=443, flags="PA")
        / b"t",
        e
        / IPv6(src="2001:db8::9", dst="2001:db8::a")
        / IPv6ExtHdrHopByHop()
        / IPv6ExtHdrSegmentRouting(addresses=["2001:db8::b", "2001:db8::c"], segleft=1)
        / UDP(sport=7, dport=53)
        / b"srh",
        e
        / IPv6(src="2001:db8::9", dst="2001:db8::a")
        / IPv6ExtHdrFragment(offset=0, m=1)
        / TCP(dport=80)
        / b"frag",
        e / IPv6(src="fe80::2", dst="ff02::1") / ICMPv6EchoRequest(id=3, seq=4) / b"ping",
        e / Dot1Q(vlan=5) / IP(src="10.5.5.5", dst="10.6.6.6") / UDP(dport=53) / b"vlan",
        e / Dot1AD(vlan=7) / Dot1Q(vlan=8) / IP(src="10.7.7.7", dst="192.0.2.1") / TCP(dport=9999),
        e / Dot1Q(vlan=9) / IPv6(src="2001:db8::7", dst="2001:db8::8") / UDP(dport=4789),
        e / ARP(psrc="10.0.0.1", pdst="10.0.0.2"),
        Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:0b", type=0x88B5) / (b"\x00" * 46),
        e / IP(src="10.1.1.1", dst="192.0.2.1") / UDP(dport=53) / (b"J" * 1458),
    ]
    out = [bytes(p) for p in pkts]
    bad_ihl = bytearray(out[0])
    bad_ihl[14] = 0x44  # ihl 4 (< 5): parse ipv4 must refuse it
    bad_doff = bytearray(out[2])
    bad_doff[14 + 24 + 12] = 0x30  # doff 3
    out += [bytes(bad_ihl), bytes(bad_doff), bytes(14), b"\xff" * 60]
    cuts = (14, 15, 17, 18, 22, 33, 34, 35, 37, 41, 42, 43, 53, 54, 55, 61, 62, 66, 74, 75)
    for f in out[:16]:
        for n in rng.sample(cuts, 3):
            if n < len(f):
                out.append(f[:n])
    for _ in range(6):  # random bytes behind a real ethertype
        et = rng.choice((b"\x08\x00", b"\x86\xdd", b"\x81\x00"))
        out.append(rng.randbytes(12) + et + rng.randbytes(rng.randrange(0, 80)))
    return out


MCPUS = ("v3", "v3", "v3", "v4", "v4", "v2", "v1")  # BPF ISA levels, v3 the default


def cases(seed: int, count: int, kernel: bool):
    """``count`` programs from ``seed``; payload (source, frames, ISA level): each program
    is compiled for one of v1..v4 (v4: sign extension, bswap, sdiv; v1: no jmp32)."""
    rng = random.Random(seed)
    fr = frames(seed)
    for i in range(count):
        src = ProgGen(random.Random(rng.getrandbits(64))).program()
        mcpu = rng.choice(MCPUS)
        yield Case((src, fr, mcpu), f"program {i} (--mcpu {mcpu})")


# ---- running one ---------------------------------------------------------------------

MAP_FILL = {  # name -> [(key, value)] put into both engines before the first frame
    "arr": [(1, 100), (2, 0xFFFFFFFFFFFFFFFF)],
    "hs": [(3, 7), (5, 1 << 40)],
    "pch": [(2, 9)],
    "ips": [(bytes([10, 1, 1, 1]), 4)],
    "st": [(0, bytes(16))],
    "lpm4": [
        (struct.pack("<I", 8) + bytes([10, 0, 0, 0]), 1),
        (struct.pack("<I", 24) + bytes([192, 0, 2, 0]), 2),
        (struct.pack("<I", 16) + bytes([10, 1, 0, 0]), 3),
    ],
    "lpm6": [
        (struct.pack("<I", 32) + bytes.fromhex("20010db8") + bytes(12), 1),
        (struct.pack("<I", 7) + b"\xfc" + bytes(15), 2),
    ],
}


def _fill(maps: dict, ncpus: int) -> None:
    from .api import MapType

    for name, m in maps.items():
        for k, v in MAP_FILL.get(name, []):
            m.set(k, v)
        if m.map_type in (MapType.DEVMAP, MapType.DEVMAP_HASH):
            for k in (0, 1):  # egress ifindex 1: the worker's own loopback
                m.set(k, (1).to_bytes(4, "little") + (b"\xff" * 4 if m.value_size == 8 else b""))
        elif m.map_type == MapType.CPUMAP:
            m.set(0, (192).to_bytes(4, "little") + (b"\xff" * 4 if m.value_size == 8 else b""))


DATA_MAPS = ("ARRAY", "PERCPU_ARRAY", "HASH", "PERCPU_HASH", "LRU_HASH", "LRU_PERCPU_HASH",
             "LPM_TRIE")  # fmt: skip


def _dump(maps: dict) -> dict:
    from .api import MapType

    return {n: m.items() for n, m in maps.items() if MapType(m.map_type).name in DATA_MAPS}


def compare(obj: bytes, pkts: list[bytes]) -> Result:
    """Load ``obj`` on the kernel and the interpreter, fill maps alike, run every frame on
    both: ``ok`` or the first difference (``engine-diff``) / ``kernel-rejected``."""
    from .api import BpfProgram, DiagnosticError, InterpError, MapType, read_object
    from .sources import load_result

    spec = read_object(obj)
    try:
        kern = BpfProgram("kernel", spec, "fuzz", None)
    except DiagnosticError:
        return load_result(obj) or Result("kernel-rejected", "only on the second load")
    try:
        interp = BpfProgram("interp", spec, "fuzz", None)
        interp.interp.env.cpu = _pin_cpu()
        _fill(kern.maps, len(os.sched_getaffinity(0)))
        _fill(interp.maps, 0)
        rings = [n for n, m in spec.maps.items() if m.map_type == MapType.RINGBUF]
        for n, pkt in enumerate(pkts):
            k = kern.run(pkt)
            try:
                i = interp.run(pkt)
            except InterpError as e:
                return Result("engine-diff", "interpreter fault", f"frame #{n} ({pkt.hex()}): {e}")
            where = f"frame #{n} ({len(pkt)} B): {pkt.hex()}"
            if k.retval != i.retval:
                return Result("engine-diff", "verdict",
                              f"{where}\nkernel {k.verdict} ({k.retval}), interp {i.verdict} ({i.retval})")  # fmt: skip
            if k.data_out != i.data_out:
                at = next((j for j, (a, b) in enumerate(zip(k.data_out, i.data_out, strict=False)) if a != b),
                          min(len(k.data_out), len(i.data_out)))  # fmt: skip
                return Result("engine-diff", "output bytes",
                              f"{where}\nverdict {k.verdict}; first difference at byte {at}:\n"
                              f"kernel {k.data_out.hex()}\ninterp {i.data_out.hex()}")  # fmt: skip
            for ring in rings:  # the records both sent through a ring buffer, in order
                ke = [e.data for e in kern.events(ring)]
                ie = [e.data for e in interp.events(ring)]
                if ke != ie:
                    return Result("engine-diff", "ring buffer records",
                                  f"after {where}\nmap {ring}:\nkernel {[x.hex() for x in ke][:8]}\n"
                                  f"interp {[x.hex() for x in ie][:8]}")  # fmt: skip
            kd, idd = _dump(kern.maps), _dump(interp.maps)
            if kd != idd:
                name = next(m for m in kd if kd[m] != idd.get(m))
                return Result("engine-diff", "map contents",
                              f"after {where}\nmap {name}:\nkernel {_short(kd[name])}\n"
                              f"interp {_short(idd.get(name))}")  # fmt: skip
    finally:
        kern.close()
    return Result("ok")


def _short(d) -> str:
    if d is None:
        return "None"
    return (
        "{"
        + ", ".join(
            f"{k.hex()}: {v.hex() if isinstance(v, bytes) else [x.hex() for x in v]}"
            for k, v in sorted(d.items())[:8]
        )
        + (", ..." if len(d) > 8 else "")
        + "}"
    )


def _pin_cpu() -> int:
    """Pin the worker to one CPU (the kernel's test run uses the caller's CPU)."""
    cpus = os.sched_getaffinity(0)
    cpu = min(cpus)
    if len(cpus) != 1:
        os.sched_setaffinity(0, {cpu})
    return cpu


def run_case(payload: tuple[str, list[bytes], str]) -> Result:
    from .api import DiagnosticError, compile_source
    from .sources import load_result

    src, pkts, mcpu = payload
    try:
        obj = compile_source(src, "gen.bpfd", mcpu=mcpu).obj
    except DiagnosticError as e:
        d = e.diagnostics[0]
        # the documented budget (docs/language.md): over it, or near it (complexity-limit)
        if d.code in ("checker-too-complex", "checker-complexity-limit"):
            obj = compile_source(src, "gen.bpfd", mcpu=mcpu, check=False).obj
            if load_result(obj) is None:  # the kernel's own walk fits: say so, not a failure
                return Result("complexity-limit-checker-only", "", e.render())
            return Result("complexity-limit", "", e.render())
        if d.code.startswith("checker-") and d.code != "checker-check-timeout":
            # the checker refused: does the kernel load the same object?
            obj = compile_source(src, "gen.bpfd", mcpu=mcpu, check=False).obj
            kres = load_result(obj)
            why = re.sub(r"\d+", "N", d.message)[:80]
            if kres is None:
                return Result("checker-false-refusal", f"{d.code}: {why}", e.render())
            if d.code == "checker-stack-depth" and "combined stack size" in kres.text:
                # 512 bytes over a call chain (docs/language.md "Functions"): LLVM decides
                # each frame's size, the generator cannot keep under it; both refuse
                return Result("stack-limit", "", e.render() + "\nkernel: " + kres.text[-1500:])
            return Result("both-refused", f"{d.code}: {why}",
                          e.render() + "\nkernel: " + kres.text[-3000:])  # fmt: skip
        if d.code == "stack-limit":  # LLVM's frame over 512 bytes (docs: "Functions")
            return Result("stack-limit", "", e.render())
        if d.code == "internal-compiler-error":
            return Result("internal-compiler-error", d.message[:80], e.render())
        return Result("compile-rejected", d.code, e.render())
    try:
        return compare(obj, pkts)
    except DiagnosticError as e:
        return exception_result(e)


def reproducer(payload: tuple[str, list[bytes], str]) -> str:
    src, pkts, mcpu = payload
    frames_txt = "\n".join(f"frame {p.hex()}" for p in pkts[:4])
    more = f"\n(+ {len(pkts) - 4} more frames)" if len(pkts) > 4 else ""
    return (f"bpfdsl compile gen.bpfd --mcpu {mcpu}; run each frame on both engines "
            f"(maps filled as programs.MAP_FILL)\ngen.bpfd:\n{src}\n{frames_txt}{more}")  # fmt: skip


def shrink(payload, fails, deadline: float):
    """Fewer frames, then fewer body lines."""
    src, pkts, mcpu = payload
    pkts = ddmin(pkts, lambda ps: fails((src, ps, mcpu)), deadline=deadline)
    head, _, body = src.partition("xdp fn fuzz(ctx) {\n")
    lines = body.rstrip().removesuffix("}").rstrip("\n").split("\n")

    def program(ls: list[str]) -> str:
        return head + "xdp fn fuzz(ctx) {\n" + "\n".join(ls) + "\n}\n"

    lines = ddmin(lines, lambda ls: fails((program(ls), pkts, mcpu)), deadline=deadline)
    return (program(lines), pkts, mcpu)


FUZZER = Fuzzer("programs", cases, run_case, reproducer, shrink, timeout=120.0)
