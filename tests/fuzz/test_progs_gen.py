"""Random well-typed programs (a deterministic generator): every one compiles, the kernel
verifier accepts it (safe by construction: no 32-bit ALU on pointers, no data_end arithmetic,
no partial pointer spills -- each of which this generator once found), and it runs on a few
packets.  Loops are not nested, so verifier state explosion stays out of the picture."""

from __future__ import annotations

import random

import pytest

from bpfdsl.compiler import compile_source

HEAD = """license "GPL"
struct fk { s: be32, d: be32, p: u8, n: u64 }
map h: hash<u32, u64>(max_entries: 16)
map a: array<u32, u64>(max_entries: 8)
map pc: percpu_array<u64>(max_entries: 4)
map lpm4: lpm_trie<ipv4_prefix, u8>(max_entries: 16)
map lpm6: lpm_trie<ipv6_prefix, u8>(max_entries: 16)
map fh: lru_hash<fk, u64>(max_entries: 64)
map tx: devmap(max_entries: 8)
map arr: array<u32, [u64; 8]>(max_entries: 2)
config knob: u32 = 3
fn dec(ip: ipv4, by: u8) {
    if ip.ttl > by { ip.ttl -= by }
}
fn mix(a: u64, b: u64) -> u64 {
    return (a ^ (b << 3)) + 1
}
"""


class G:
    def __init__(self, rnd):
        self.r = rnd
        self.n = 0
        self.depth = 0

    def name(self, p):
        self.n += 1
        return f"{p}{self.n}"

    def c(self, *xs):
        return self.r.choice(xs)

    def u64(self, H, d=0):
        r = self.r
        leaves = [
            "ctx.len",
            "(7 as u64)",
            "(knob as u64)",
            "ktime_get_ns()",
            "(get_prandom_u32() as u64)",
        ]
        if "ip" in H:
            leaves += [
                f"({H['ip']}.ttl as u64)",
                f"(host({H['ip']}.tot_len) as u64)",
                f"(hash({H['ip']}.saddr, {H['ip']}.daddr) as u64)",
            ]
        if "l4" in H and H["l4kind"] in ("udp", "tcp"):
            leaves += [f"(host({H['l4']}.dest) as u64)"]
        if "ip6" in H:
            leaves += [f"({H['ip6']}.hop_limit as u64)"]
        if d > 2 or r.random() < 0.4:
            return r.choice(leaves)
        op = r.choice(["+", "-", "*", "&", "|", "^", ">>", "<<", "/", "%"])
        rhs = self.u64(H, d + 1)
        if op in ("/", "%"):
            rhs = str(r.randint(1, 9))
        if op in ("<<", ">>"):
            rhs = str(r.randint(0, 63))
        return f"({self.u64(H, d + 1)} {op} {rhs})"

    def cond(self, H):
        r = self.r
        opts = [
            f"{self.u64(H)} {r.choice(['<', '>', '==', '!=', '<=', '>='])} {self.u64(H)}",
            "h.contains(3)",
        ]
        if "ip" in H:
            ip = H["ip"]
            opts += [
                f"{ip}.saddr in 10.0.0.0/8",
                f"lpm4.contains({ip}.daddr)",
                f"{ip}.protocol == IPPROTO_UDP",
                f"{ip}.daddr == 192.0.2.2",
            ]
        if "ip6" in H:
            opts += [f"lpm6.contains({H['ip6']}.saddr)", f"{H['ip6']}.daddr in 2001:db8::/32"]
        if "eth" in H:
            opts += [f"{H['eth']}.h_dest == 02:00:00:00:00:0b"]
        c = r.choice(opts)
        if r.random() < 0.2:
            c = f"{c} && {self.cond(H)}" if r.random() < 0.5 else f"!({c}) || {self.cond(H)}"
        return c

    def action(self):
        return self.c(
            "XDP_PASS", "XDP_DROP", "XDP_TX", "XDP_ABORTED", "redirect_map(tx, 1, XDP_PASS)"
        )

    def stmts(self, H, k, loop=False):
        out = []
        for _ in range(k):
            out += self.stmt(H, loop)
        return out

    def block(self, lines, ind):
        return "\n".join(" " * ind + s for s in lines)

    def stmt(self, H, loop):
        r = self.r
        self.depth += 1
        try:
            kinds = ["count", "count", "let", "if", "lookup", "iflet"]
            if self.depth < 3 and not loop:
                kinds += ["for", "if"]
            elif self.depth < 3:
                kinds += ["if"]
            kinds += ["arr", "mixf"]
            if "ip" in H:
                kinds += ["ipw", "ipw", "flow", "match", "decf"]
            if "ip6" in H:
                kinds += ["ip6w"]
            if "l4" in H:
                kinds += ["l4w"] + ([] if loop else ["payload"])
            if loop:
                kinds += ["brk"]
            kinds += ["ret"]
            k = r.choice(kinds)
            if k == "count":
                return [
                    self.c(
                        f"h[({self.u64(H)} % 16) as u32] += 1",
                        f"a[3] += {self.u64(H)}",
                        f"pc[({self.u64(H)} % 4) as u32] += 1",
                    )
                ]
            if k == "let":
                v = self.name("v")
                H.setdefault("vars", []).append(v)
                return [f"let {v} = {self.u64(H)}"]
            if k == "if":
                t = self.stmts(dict(H), r.randint(1, 2), loop)
                e = self.stmts(dict(H), r.randint(0, 2), loop)
                s = [f"if {self.cond(H)} {{", *["    " + x for x in t], "}"]
                if e:
                    s[-1] = "} else {"
                    s += ["    " + x for x in e] + ["}"]
                return s
            if k == "lookup":
                v = self.name("m")
                return [
                    f"let {v} = a.lookup(({self.u64(H)} % 8) as u32) else {{ return {self.action()} }}",
                    f"{v} += {self.u64(H)}",
                ]
            if k == "iflet":
                v = self.name("m")
                return [
                    f"if let {v} = h.lookup(5) {{",
                    f"    {v} += 2",
                    "} else {",
                    "    h[5] = 1",
                    "}",
                ]
            if k == "for":
                i = self.name("i")
                body = self.stmts(dict(H), r.randint(1, 2), True)
                return [f"for {i} in 0..{r.randint(1, 6)} {{", *["    " + x for x in body], "}"]
            if k == "brk":
                return [f"if {self.cond(H)} {{ {self.c('break', 'continue')} }}"]
            if k == "ret":
                return [f"if {self.cond(H)} {{ return {self.action()} }}"]
            if k == "ipw":
                ip = H["ip"]
                return [
                    self.c(
                        f"{ip}.ttl = ({self.u64(H)} % 255) as u8",
                        f"{ip}.ttl -= 1",
                        f"{ip}.daddr = 10.9.9.9",
                        f"swap({ip}.saddr, {ip}.daddr)",
                        f"{ip}.tos = 4",
                        f"{ip}.id = be16(({self.u64(H)} % 65535) as u16)",
                    )
                ]
            if k == "ip6w":
                ip6 = H["ip6"]
                return [
                    self.c(
                        f"{ip6}.hop_limit = 9",
                        f"swap({ip6}.saddr, {ip6}.daddr)",
                        f"{ip6}.daddr = 2001:db8::7",
                    )
                ]
            if k == "flow":
                ip = H["ip"]
                return [f"fh[fk(s: {ip}.saddr, d: {ip}.daddr, p: {ip}.protocol)] += 1"]
            if k == "match":
                ip = H["ip"]
                return [
                    f"match {ip}.protocol {{",
                    "    IPPROTO_UDP => a[1] += 1,",
                    f"    IPPROTO_TCP | IPPROTO_ICMP => {{ return {self.action()} }}",
                    "    _ => {}",
                    "}",
                ]
            if k == "l4w":
                l4, kind = H["l4"], H["l4kind"]
                if kind == "icmp":
                    return [f"{l4}.type = ICMP_ECHOREPLY"]
                return [
                    self.c(
                        f"{l4}.dest = 8080",
                        f"swap({l4}.source, {l4}.dest)",
                        f"{l4}.source = be16(({self.u64(H)} % 65535) as u16)",
                    )
                ]
            if k == "arr":
                i, v = self.name("i"), self.name("w")
                return [
                    f"let {v} = arr.lookup(1) else {{ return XDP_PASS }}",
                    f"for {i} in 0..{r.randint(1, 8)} {{ {v}[{i}] += {self.u64(H)} }}",
                    f"{v}[{r.randint(0, 7)}] = {self.u64(H)}",
                ]
            if k == "mixf":
                return [f"a[2] = mix({self.u64(H)}, {self.u64(H)})"]
            if k == "decf":
                return [f"dec({H['ip']}, {r.randint(0, 9)})"]
            if k == "payload":
                b, i = self.name("b"), self.name("i")
                return [
                    f"for {i} in 0..{r.randint(1, 12)} {{",
                    f"    let {b} = parse byte else {{ break }}",
                    f"    {b}.value = ({self.u64(H)} % 256) as u8",
                    "}",
                ]
        finally:
            self.depth -= 1

    def program(self):
        r = self.r
        H = {}
        body = ["let eth = parse ethernet else { return XDP_PASS }"]
        H["eth"] = "eth"
        proto = "eth.h_proto"
        if r.random() < 0.4:
            body += [
                "let proto = eth.h_proto",
                f"for t in 0..{r.randint(1, 2)} {{",
                "    if proto != ETH_P_8021Q && proto != ETH_P_8021AD { break }",
                "    let tag = parse vlan else { return XDP_PASS }",
                "    proto = tag.h_vlan_encapsulated_proto",
                "}",
            ]
            proto = "proto"
        body += self.stmts(dict(H), r.randint(0, 2))
        v4 = dict(H, ip="ip")
        inner4 = ["let ip = parse ipv4 else { return XDP_PASS }"] + self.stmts(v4, r.randint(0, 3))
        l4 = r.choice(["udp", "tcp", "icmp"])
        proto_c = {"udp": "IPPROTO_UDP", "tcp": "IPPROTO_TCP", "icmp": "IPPROTO_ICMP"}[l4]
        w = dict(v4, l4="l4", l4kind=l4)
        inner4 += [
            f"if ip.protocol == {proto_c} {{",
            f"    let l4 = parse {l4} else {{ return XDP_PASS }}",
            *["    " + x for x in self.stmts(w, r.randint(1, 4))],
            "}",
        ]
        v6 = dict(H, ip6="ip6")
        inner6 = ["let ip6 = parse ipv6 else { return XDP_PASS }"]
        if r.random() < 0.5:
            inner6 += [
                "let nh = skip_ext(ip6) else { return XDP_DROP }",
                "if nh == IPPROTO_UDP {",
                "    let u = parse udp else { return XDP_PASS }",
                "    u.dest = 53",
                "}",
            ]
        inner6 += self.stmts(v6, r.randint(0, 3))
        body += [
            f"if {proto} == ETH_P_IP {{",
            *["    " + x for x in inner4],
            f"}} else if {proto} == ETH_P_IPV6 {{",
            *["    " + x for x in inner6],
            "}",
        ]
        if r.random() < 0.3:
            body += [
                f"if adjust_tail(-{r.randint(0, 8)}) != 0 {{ return XDP_ABORTED }}",
                "let e2 = parse ethernet else { return XDP_PASS }",
                "swap(e2.h_dest, e2.h_source)",
            ]
        if r.random() < 0.2:
            body += [
                "if adjust_head(-4) != 0 { return XDP_ABORTED }",
                "let e3 = parse ethernet else { return XDP_PASS }",
            ]
        body += self.stmts({}, r.randint(0, 2))
        body += [f"return {self.action()}"]
        return HEAD + "xdp fn fuzz(ctx) {\n" + self.block(body, 4) + "\n}\n"


SEEDS = range(40)


@pytest.fixture(scope="module")
def packets() -> list[bytes]:
    from scapy.all import ICMP, IP, TCP, UDP, Dot1Q, Ether, IPv6, IPv6ExtHdrHopByHop

    return [
        bytes(p)
        for p in (
            Ether() / IP(src="10.1.1.1", dst="192.0.2.2") / UDP(dport=53) / (b"x" * 30),
            Ether() / IP() / TCP() / (b"y" * 10),
            Ether() / IP() / ICMP(),
            Ether() / IPv6() / IPv6ExtHdrHopByHop() / UDP() / b"zz",
            Ether() / Dot1Q() / IP() / UDP(),
        )
    ] + [bytes(Ether() / IP())[:20]]


def test_generated_programs_compile():
    for seed in SEEDS:
        res = compile_source(G(random.Random(seed)).program(), f"gen{seed}.bpfd")
        assert res.programs == ["fuzz"] and res.obj[:4] == b"\x7fELF", seed


@pytest.mark.kernel
def test_generated_programs_load_and_run(packets):
    from bpfdsl.abi.prog_types import XdpAction
    from bpfdsl.diagnostics import DiagnosticError
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime.loader import load_collection

    for seed in SEEDS:
        src = G(random.Random(seed)).program()
        obj = compile_source(src, f"gen{seed}.bpfd").obj
        try:
            with load_collection(read_object(obj)) as coll:
                for p in packets:
                    r = syscall.prog_test_run(coll.programs["fuzz"].fd, p)
                    assert r.retval in set(XdpAction), (seed, r.retval)
        except DiagnosticError as e:  # pragma: no cover - the failure message
            pytest.fail(f"seed {seed}: {e}\n{src}")


# ---- the campaign generators (tests/fuzz/programs.py, tests/fuzz/subprograms.py) -------


@pytest.mark.parametrize("mcpu", ["v1", "v2", "v3", "v4"])
def test_subprogram_generator_writes_programs_sema_and_the_checker_accept(mcpu):
    """Programs of fuzz.subprograms.SubGen from fixed seeds compile at every ISA level (a
    refusal is a generator bug or a compiler one: tests/fuzz/test_campaigns.py runs them
    on the kernel and the interpreter); together they use every composition feature."""
    from .subprograms import SubGen

    srcs = [SubGen(random.Random(seed)).program() for seed in range(6)]
    for seed, src in enumerate(srcs):
        try:
            compile_source(src, f"sub{seed}.bpfd", mcpu=mcpu)
        except Exception as e:  # pragma: no cover - the failure message
            if "checker-too-complex" in str(e) or "checker-complexity-limit" in str(e):
                continue
            pytest.fail(f"seed {seed} --mcpu {mcpu}: {e}\n{src}")
    text = "\n".join(srcs)
    for feature in (
        "noinline fn",
        "global fn",
        "loop(",
        "tail_call(jt",
        "prog_array",
        "ringbuf_output(",
        "ringbuf_reserve(",
        "adjust_",
        ": ipv4",
        ": pair",
    ):
        assert feature in text, feature
