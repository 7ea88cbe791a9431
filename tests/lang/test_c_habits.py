"""C habits (issue #24): each C spelling a user brings from libbpf C either works, with C's
meaning where the language has one (``x++``, ``/=``, a bare ``return``, ``&&``), or is an
error at its own file:line:col whose help gives the bpfdsl form of that very code
(``htons(53)`` -> ``be16(53)``; the one table is bpfdsl/lang/c_names.py)."""

from __future__ import annotations

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

import bpfdsl
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.lang import c_names

HEAD = (
    'license "GPL"\n'
    "map m: hash<u32, u64>(max_entries: 16)\n"
    "map dm: devmap(max_entries: 4)\n"
    "struct st { a: u32, b: u64 }\n"
    "map sm: array<u32, st>(max_entries: 1)\n"
)
PRE = (
    "xdp fn f(ctx) {\n"
    "    let eth = parse ethernet else { return XDP_PASS }\n"
    "    let ip = parse ipv4 else { return XDP_PASS }\n"
)
ENGINES = ["interp", pytest.param("kernel", marks=pytest.mark.kernel)]
BODY_LINE = HEAD.count("\n") + PRE.count("\n") + 1  # the first line of a snippet


def _prog(stmts: str) -> str:
    return HEAD + PRE + stmts + "\n    return XDP_PASS\n}\n"


def _insns(src: str) -> list[tuple]:
    spec = bpfdsl.read_object(compile_source(src, "h.bpfd").obj)
    return [(i.opcode, i.dst, i.src, i.off, i.imm) for i in spec.programs["f"].insns]


# ---- supported: the same code as the bpfdsl spelling ----

SAME = [
    ("ip.ttl--", "ip.ttl -= 1"),  # the IPv4 checksum step of `-=` (ip_decrease_ttl)
    ("ip.tos++", "ip.tos += 1"),
    ("let x: u32 = 1\n    x++\n    m[0] = x as u64", "let x: u32 = 1\n    x += 1\n    m[0] = x as u64"),
    ("let x: u32 = 1\n    x--\n    m[0] = x as u64", "let x: u32 = 1\n    x -= 1\n    m[0] = x as u64"),
    ("m[ctx.rx_queue_index]++", "m[ctx.rx_queue_index] += 1"),
    ("let s = sm.lookup(0) else { return XDP_PASS }\n    s.b++",
     "let s = sm.lookup(0) else { return XDP_PASS }\n    s.b += 1"),
    ("let s = sm.lookup(0) else { return XDP_PASS }\n    s.a--",
     "let s = sm.lookup(0) else { return XDP_PASS }\n    s.a -= 1"),
    ("let k = st(a: 1)\n    k.a++\n    m[0] = k.a as u64", "let k = st(a: 1)\n    k.a += 1\n    m[0] = k.a as u64"),
    ("let v = m.lookup(1) else { return XDP_PASS }\n    v++",
     "let v = m.lookup(1) else { return XDP_PASS }\n    v += 1"),
    ("match ip.protocol { 17 => m[1]++, _ => m[2]++ }",
     "match ip.protocol { 17 => m[1] += 1, _ => m[2] += 1 }"),
]  # fmt: skip


@pytest.mark.parametrize("c_form,form", SAME, ids=[c for c, _ in SAME])
def test_increment_statement_is_the_compound_assignment(c_form, form):
    assert _insns(_prog("    " + c_form)) == _insns(_prog("    " + form))


@pytest.mark.parametrize("op", ["/", "%", "<<", ">>", "^", "&", "|", "*", "+", "-"])
def test_compound_assignment_is_x_equals_x_op_y(op):
    """``x op= y`` compiles to the code of ``x = x op y`` (a run-time divisor: BPF's x/0 = 0,
    x%0 = x; a run-time shift count modulo the width)."""
    pre = "    let x = ctx.len as u32\n    let y = ctx.rx_queue_index\n"
    post = "\n    m[0] = x as u64"
    a = _insns(_prog(pre + f"    x {op}= y" + post))
    b = _insns(_prog(pre + f"    x = x {op} y" + post))
    assert a == b


@pytest.mark.parametrize("engine", ENGINES)
def test_compound_division_by_a_run_time_zero(engine):
    """``x /= d`` with ``d`` 0 at run time gives 0 and ``x %= d`` keeps ``x`` (the BPF ISA's
    results, docs/language.md "Integer arithmetic"); ``<<=`` takes the count modulo 32."""
    src = (
        'license "GPL"\nconfig d: u32 = 0\nconfig s: u32 = 33\n'
        "map m: hash<u32, u64>(max_entries: 16)\n"
        "xdp fn f(ctx) {\n"
        "    let a: u32 = 100\n    a /= d\n    m[1] = a as u64\n"
        "    let b: u32 = 100\n    b %= d\n    m[2] = b as u64\n"
        "    let c: u32 = 3\n    c <<= s\n    m[3] = c as u64\n"
        "    let e: u32 = 100\n    e /= 7\n    e %= 4\n    e *= 5\n    e >>= 1\n    e ^= 1\n"
        "    m[4] = e as u64\n"
        "    return XDP_PASS\n}\n"
    )
    assert _map_after_one_run(src, engine, "m") == {1: 0, 2: 100, 3: 6, 4: 4}


@pytest.mark.parametrize("engine", ENGINES)
def test_map_entry_operators_through_the_advised_lookup(engine):
    """The spelling the `m[k] OP= v` error gives works: the looked-up value takes every
    compound operator (``|=``/``&=``/``^=`` atomically)."""
    src = _prog(
        "    m[1] = 12\n    m[2] = 12\n"
        "    let v = m.lookup(1) else { return XDP_PASS }\n"
        "    v |= 3\n    v ^= 1\n    v &= 14\n"
        "    let w = m.lookup(2) else { return XDP_PASS }\n"
        "    w *= 5\n    w /= 4\n    w %= 7\n    w <<= 2\n    w >>= 1"
    )
    assert _map_after_one_run(src, engine, "m") == {1: 14, 2: 2}  # 12*5/4%7 = 1, <<2 >>1


@pytest.mark.parametrize("engine", ENGINES)
def test_map_entry_decrement_counts_down_from_zero(engine):
    """``m[k]--`` on a missing hash key inserts 0 - 1 (as ``m[k] += n`` inserts n), on a
    present one subtracts atomically; the interpreter and the kernel agree."""
    src = _prog("    m[5]--\n    m[5]--\n    m[6] += 3\n    m[6]--")
    assert _map_after_one_run(src, engine, "m") == {5: (1 << 64) - 2, 6: 2}


def _map_after_one_run(
    src: str, engine: str, name: str, frame: bytes = bytes(Ether() / IP() / UDP())
) -> dict[int, int]:
    """Map ``name`` (u32 -> u64) after program ``f`` ran once on ``frame`` (a UDP frame)."""
    from bpfdsl.runtime import testrun

    spec = bpfdsl.read_object(compile_source(src, "run.bpfd").obj)
    eng = testrun.open_engine(engine, spec)
    try:
        eng.run("f", frame)
        dump = eng.snapshot_maps()[name]
    finally:
        eng.close()
    assert dump is not None
    return {int.from_bytes(k, "little"): int.from_bytes(v[:8], "little") for k, v in dump.items()}


TTL = """license "GPL"
xdp fn ttl(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.ttl <= 1 { return XDP_DROP }
    ip.ttl--
    return XDP_TX
}
"""


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("ttl", [64, 2, 255])
def test_ttl_decrement_keeps_the_ipv4_checksum(engine, ttl):
    """``ip.ttl--`` decrements the TTL and the IPv4 header checksum stays valid (scapy
    recomputes it from the other fields and must find the same)."""
    frame = bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", ttl=ttl, id=0x1234) / UDP())
    r = bpfdsl.run(compile_source(TTL, "ttl.bpfd").obj, [frame], engine=engine)[0]
    assert r.verdict == "XDP_TX"
    out = Ether(r.data_out)[IP]
    assert out.ttl == ttl - 1
    check = out.chksum
    del out.chksum
    assert IP(bytes(out)).chksum == check


@pytest.mark.parametrize("engine", ENGINES)
def test_bare_return_in_a_fn_without_a_result(engine):
    """``return`` alone leaves a fn without a return type (inlined or a subprogram)."""
    src = (
        'license "GPL"\n'
        "map m: array<u32, u64>(max_entries: 4)\n"
        "fn count(i: u32) {\n"
        "    if i > 2 { return }\n"
        "    m[i] += 1\n"
        "}\n"
        "noinline fn count2(i: u32) {\n"
        "    if i > 2 { return; }\n"
        "    m[i] += 2\n"
        "}\n"
        "fn g() { let e = parse ethernet else { return } }\n"
        "xdp fn f(ctx) {\n"
        "    count(1)\n"
        "    count(3)\n"
        "    count2(1)\n"
        "    count2(3)\n"
        "    g()\n"
        "    return XDP_PASS\n"
        "}\n"
    )
    got = _map_after_one_run(src, engine, "m")
    assert (got[1], got[3]) == (3, 0)


def test_c_logic_operators_are_the_language_s():
    """``&&``, ``||`` and ``!`` are bpfdsl's own spelling (there is no ``and``/``or``)."""
    compile_source(
        _prog("    let b = ip.ttl > 1\n    if !b || (ip.ttl > 3 && ip.ttl < 9) { return XDP_DROP }")
    )


# ---- refused: located, with the bpfdsl form of the code written ----

# (snippet in the body of f or a whole file, line:col in the snippet, code,
#  words of the message, words of the first help line)
ERRORS = [
    ("let x: u32 = 1\n    let a = x++", (2, 13), "incdec-value", "`x++` is a statement",
     "write `x += 1` on its own line"),
    ("let x: u32 = 1\n    m[0] = (x--) as u64", (2, 13), "incdec-value", "`x--` is a statement",
     "`x -= 1`"),
    ("let x: u32 = 1\n    ++x", (2, 5), "incdec-value", "no prefix `++x`", "write `x += 1`"),
    ("--ip.ttl", (1, 5), "syntax", "unexpected '--'", "write `ip.ttl -= 1`"),
    ("++m[1]", (1, 5), "syntax", "unexpected '++'", "write `m[1] += 1`"),
    ("let x: u32 = 8\n    x /= 0", (2, 10), "division-by-zero", "division by zero", None),
    ("m[1] *= 2", (1, 5), "map-assign", "`*=` on a map entry",
     "look the entry up: `let v = m.lookup(1) else { ... }` then `v *= 2` (a plain read"),
    ("m[ctx.rx_queue_index] |= 2", (1, 5), "map-assign", "`|=` on a map entry",
     "`let v = m.lookup(ctx.rx_queue_index) else { ... }` then `v |= 2` (atomic"),
    ("if ip.tot_len == htons(53) { return XDP_DROP }", (1, 22), "unknown-fn", "`htons`",
     "C's `htons(53)` is `be16(53)` in bpfdsl"),
    ("if ntohs(ip.tot_len) > 60 { return XDP_DROP }", (1, 8), "unknown-fn", "`ntohs`",
     "C's `ntohs(ip.tot_len)` is `host(ip.tot_len)`"),
    ("let a = htonl(7)", (1, 13), "unknown-fn", "`htonl`", "`be32(7)`"),
    ("if ntohl(ip.saddr) == 1 { return XDP_DROP }", (1, 8), "unknown-fn", "`ntohl`",
     "`host(ip.saddr)`"),
    ("let a = bpf_htons(7)", (1, 13), "unknown-fn", "`bpf_htons`", "`be16(7)`"),
    ("let a = bpf_ntohs(ip.id)", (1, 13), "unknown-fn", "`bpf_ntohs`", "`host(ip.id)`"),
    ("let a = bpf_htonl(7)", (1, 13), "unknown-fn", "`bpf_htonl`", "`be32(7)`"),
    ("let a = bpf_ntohl(ip.daddr)", (1, 13), "unknown-fn", "`bpf_ntohl`", "`host(ip.daddr)`"),
    ("__builtin_memcpy(eth.h_dest, eth.h_source, 6)", (1, 5), "unknown-fn",
     "`__builtin_memcpy`", "`eth.h_dest = eth.h_source`"),
    ("memcpy(eth.h_dest, eth.h_source, 6)", (1, 5), "unknown-fn", "`memcpy`",
     "`eth.h_dest = eth.h_source`"),
    ("memset(eth.h_dest, 0, 6)", (1, 5), "unknown-fn", "`memset`", "starts zeroed"),
    ("__builtin_memset(eth.h_dest, 0, 6)", (1, 5), "unknown-fn", "`__builtin_memset`",
     "`let k = flow()`"),
    ("let n = sizeof(ip)", (1, 13), "unknown-fn", "`sizeof`", "`sizeof(ip)` is 20 here"),
    ("let n = sizeof(st)", (1, 13), "unknown-fn", "`sizeof`", "`sizeof(st)` is 16 here"),
    ("let n = sizeof(struct st)", (1, 20), "syntax", "unexpected 'struct'",
     "bpfdsl passes sizes itself"),
    ("let d = ctx->data", (1, 16), "syntax", "unexpected '->'",
     "`ctx->data` is not needed: bpfdsl reads packet bytes with bounds-checked `parse"),
    ("let d = ctx->data_end", (1, 16), "syntax", "unexpected '->'", "the length is `ctx.len`"),
    ("if ip->ttl > 3 { return XDP_DROP }", (1, 10), "syntax", "unexpected '->'",
     "write `ip.ttl`"),
    ("let v = bpf_map_lookup_elem(&m, &k)", (1, 33), "syntax", "unexpected '&'",
     "C's `bpf_map_lookup_elem(&m, &k)` is `let v = m.lookup(k) else { ... }`"),
    ("bpf_map_update_elem(&m, &k, &v, BPF_ANY)", (1, 25), "syntax", "unexpected '&'",
     "`m.update(k, v, BPF_ANY)`"),
    ("return bpf_redirect_map(&dm, 0, 0)", (1, 29), "syntax", "unexpected '&'",
     "`return redirect_map(dm, 0, 0)`"),
    ("let s = sm.lookup(0) else { return XDP_PASS }\n    __sync_fetch_and_add(&s->b, 1)",
     (2, 26), "syntax", "unexpected '&'", "C's `__sync_fetch_and_add(&s->b, 1)` is `s.b += 1`"),
    ("if bpf_xdp_adjust_head(ctx, -20) != 0 { return XDP_DROP }", (1, 8),
     "helper-not-modelled", "changes the packet", "write `adjust_head(-20)`"),
    ("bpf_tail_call(ctx, &jmp, 1)", (1, 24), "syntax", "unexpected '&'",
     "`tail_call(jmp, 1) else { ... }`"),
    ("let v = bpf_map_lookup_elem(m, 1)", (1, 13), "helper-not-modelled", "takes memory",
     "`let v = m.lookup(1) else { ... }`"),
    ("if let v = m.lookup(1) {\n        if v == NULL { return XDP_DROP }\n    }", (2, 17),
     "unknown-name", "`NULL`", "no pointers"),
    ("let a = ip.ttl > 3 ? 1 : 2", (1, 24), "syntax", "unexpected '?'",
     "write `let a = 2` then `if ip.ttl > 3 { a = 1 }`"),
    ("for (i = 0; i < 4; i++) { }", (1, 9), "syntax", "unexpected '('",
     "write `for i in 0..4 { ... }`"),
    ("for (int i = 0; i <= 4; i++) { }", (1, 9), "syntax", "unexpected '('",
     "write `for i in 0..4 + 1 { ... }`"),
    ("let n: u32 = 0\n    while n < 10 { n += 1 }", (2, 5), "unbounded-loop", "unbounded loop",
     "write `for i in 0..N"),
    ("unsigned int x = 5", (1, 5), "c-declaration", "declares a local with `let`",
     "write `let x: u32 = 5`"),
    ("__u32 x = 5;", (1, 5), "c-declaration", "C declaration", "write `let x: u32 = 5`"),
    ("u64 n;", (1, 5), "c-declaration", "C declaration", "write `let n: u64 = 0`"),
    ("let x: __u32 = 5", (1, 12), "unknown-type", "`__u32`", "C's `__u32` is `u32`"),
    ("let x: uint32_t = 5", (1, 12), "unknown-type", "`uint32_t`", "C's `uint32_t` is `u32`"),
    ("let x: __be16 = ip.id", (1, 12), "unknown-type", "`__be16`", "`be16`"),
    ("let h: iphdr = 5", (1, 12), "unknown-type", "`iphdr`", "the header `ipv4`"),
    ("let x = (u32)ip.ttl", (1, 14), "unknown-name", "`u32`", "`x as u32`"),
    ("if ip.ttl > 1 and ip.ttl < 5 { return XDP_DROP }", (1, 19), "syntax", "'and'",
     "bpfdsl writes `&&`"),
    ("switch (ip.protocol) { }", (1, 26), "syntax", "unexpected", "write `match x {"),
    # arithmetic on a network-order field: the host-order spelling of that very code
    ("ip.id++", (1, 5), "type-mismatch", "`+=` needs a host-order integer, found be16",
     "write `ip.id = be16(host(ip.id) + 1)`"),
    ("ip.id--", (1, 5), "type-mismatch", "found be16", "write `ip.id = be16(host(ip.id) - 1)`"),
    ("ip.tot_len -= 4", (1, 5), "type-mismatch", "found be16",
     "write `ip.tot_len = be16(host(ip.tot_len) - 4)`"),
    ("ip.saddr += 1", (1, 5), "type-mismatch", "found be32",
     "write `ip.saddr = be32(host(ip.saddr) + 1)`"),
    ("ip.id *= 2", (1, 5), "type-mismatch", "`*=`", "`ip.id = be16(host(ip.id) * 2)`"),
    ("ip.id /= 2", (1, 5), "type-mismatch", "`/=`", "`ip.id = be16(host(ip.id) / 2)`"),
    ("ip.id %= 2", (1, 5), "type-mismatch", "`%=`", "`ip.id = be16(host(ip.id) % 2)`"),
    ("ip.id <<= 1", (1, 5), "type-mismatch", "`<<=`", "`ip.id = be16(host(ip.id) << 1)`"),
    ("ip.id >>= 1", (1, 5), "type-mismatch", "`>>=`", "`ip.id = be16(host(ip.id) >> 1)`"),
    ("ip.id -= ip.ttl as u16", (1, 5), "type-mismatch", "`-=`",
     "`ip.id = be16(host(ip.id) - (ip.ttl as u16))`"),
    ('bpf_printk("ttl %d", ip.ttl);', (1, 5), "unknown-fn", "`bpf_printk`",
     "is `ringbuf_output(RING, RECORD)` in bpfdsl: no trace_pipe printing"),
    ('bpf_trace_printk("x", 2)', (1, 5), "helper-not-modelled", "takes memory",
     "write `ringbuf_output(RING, RECORD)` (no trace_pipe printing"),
    # C's brace-less `if` and `*v`
    ("if (ip.ttl < 2) return XDP_DROP;", (1, 21), "syntax", "unexpected 'return'",
     "the body of `if` is a block: write `if ip.ttl < 2 { return XDP_DROP }`"),
    ("if (ip.ttl < 2) && (ip.ttl > 0) m[1] += 1;", (1, 37), "syntax", "unexpected 'm'",
     "write `if (ip.ttl < 2) && (ip.ttl > 0) { m[1] += 1 }`"),
    ("let v = m.lookup(1) else { return XDP_PASS }\n    *v += 1;", (2, 5), "syntax",
     "unexpected '*'", "bpfdsl has no pointers: write `v += 1`"),
    ("let v = m.lookup(1) else { return XDP_PASS }\n    (*v)++;", (2, 6), "syntax",
     "unexpected '*'", "bpfdsl has no pointers: write `v++`"),
    # C's packet pointers: `parse` instead
    ("let d = (void *)(long)ctx->data", (1, 20), "syntax", "unexpected ')'",
     "`ctx->data` is not needed: bpfdsl reads packet bytes with bounds-checked `parse"),
    ("void *data = (void *)(long)ctx->data;", (1, 25), "syntax", "unexpected ')'",
     "`ctx->data` is not needed"),
    ("void *data_end = (void *)(long)ctx->data_end;", (1, 29), "syntax", "unexpected ')'",
     "`ctx->data_end` is not needed"),
    ("struct iphdr *ip4 = data + sizeof(struct ethhdr);", (1, 5), "syntax",
     "unexpected 'struct'", "write `let ip4 = parse ipv4 else { return XDP_PASS }` (the "
     "kernel's `struct iphdr` is the header `ipv4`"),
    ("struct ethhdr *e = data;", (1, 5), "syntax", "unexpected 'struct'",
     "write `let e = parse ethernet else { return XDP_PASS }`"),
    ("struct udphdr *u = (void *)(ip + 1);", (1, 5), "syntax", "unexpected 'struct'",
     "write `let u = parse udp else"),
    ("struct myhdr *h = data;", (1, 5), "syntax", "unexpected 'struct'",
     "declare the header (`header myhdr { a: be16, ... }`) and write `let h = parse myhdr"),
    ("let n = sizeof(struct iphdr)", (1, 20), "syntax", "unexpected 'struct'",
     "the kernel's `struct iphdr` is the header `ipv4`"),
    ("if (data + sizeof(*eth) > data_end) return XDP_DROP;", (1, 23), "syntax",
     "unexpected '*'", "C's packet pointers (`data`, `data_end`) and bounds checks are not "
     "needed"),
    ("let h: ethhdr = 5", (1, 12), "unknown-type", "`ethhdr`", "the header `ethernet`"),
    ("__u32 x = 0;", (1, 5), "c-declaration", "C declaration", "write `let x: u32 = 0`"),
    # a helper's result type is the kernel's (xdp_get_buff_len: u64)
    ("let n = bpf_xdp_get_buff_len(ctx)", (1, 13), "arg-count",
     "the context is passed for you", "write `bpf_xdp_get_buff_len()`"),
    ("if ((void *)(ip + 1) > data_end) { return XDP_DROP; }", (1, 16), "syntax",
     "unexpected ')'", "bounds checks are not needed"),
    ("let n: u32 = xdp_get_buff_len() - 1", (1, 18), "type-mismatch",
     "expected u32, found u64", "`(xdp_get_buff_len() - 1) as u32`"),
    ("let n: u32 = xdp_get_buff_len()", (1, 18), "type-mismatch", "expected u32, found u64",
     "`xdp_get_buff_len() as u32`"),
    # whole files
    ('license "GPL"\nSEC("xdp")\nint f(struct xdp_md *ctx) { return XDP_PASS; }\n', (2, 5),
     "syntax", "unexpected", "`xdp fn NAME(ctx) { ... }`"),
    ('license "GPL"\nSEC("xdp.frags")\nint f(struct xdp_md *ctx) { return XDP_PASS; }\n',
     (2, 5), "syntax", "unexpected", "`xdp(frags) fn NAME(ctx)"),
    ('license "GPL"\nint f(struct xdp_md *ctx) { return XDP_PASS; }\n', (2, 7), "syntax",
     "unexpected 'struct'", "a program is written `xdp fn f(ctx) { ... }`"),
    ('#include <linux/bpf.h>\nlicense "GPL"\n', (1, 1), "syntax", "unexpected character '#'",
     "no preprocessor"),
    ('license "GPL"\n#define PORT 53\n', (2, 1), "syntax", "'#'", "write `const PORT: u32 = 53`"),
    ('license "GPL"\nstruct x {\n    __u32 a;\n    __u64 b;\n}\n', (3, 11), "syntax",
     "unexpected 'a'", "write `a: u32,`"),
    ('license "GPL"\nstruct x {\n    unsigned char mac[6];\n}\n', (3, 14), "syntax",
     "unexpected 'char'", "write `mac: [u8; 6],`"),
    ('license "GPL"\nxdp fn f(ctx) {\n    return\n}\n', (3, 5), "return-value",
     "returns a verdict: `return` needs one", "write `return XDP_PASS`"),
    ('license "GPL"\nsk_msg fn f(msg) {\n    return;\n}\n', (3, 5), "return-value",
     "returns a verdict", "write `return SK_PASS`"),
    ('license "GPL"\nfn g() -> u32 {\n    return\n}\nxdp fn f(ctx) { return XDP_PASS }\n',
     (3, 5), "return-value", "returns u32: `return` needs a value", "`return VALUE`"),
    # C's context parameter on a fn: bpfdsl hands it over unnamed
    ('license "GPL"\nglobal fn g(ctx) -> u32 {\n    return 1\n}\n', (2, 18), "syntax",
     "unexpected '->'", "write `global fn g() -> ...`"),
    ('license "GPL"\nfn g(ctx) -> u32 {\n    return 1\n}\n', (2, 9), "syntax",
     "unexpected ')'", "write `fn g() -> ...`"),
    ('license "GPL"\nnoinline fn g(n) -> u32 {\n    return n\n}\n', (2, 18), "syntax",
     "unexpected '->'", "`noinline fn g(n: u32)`"),
]  # fmt: skip


@pytest.mark.parametrize(
    "src,where,code,message,help_",
    ERRORS,
    ids=[f"{i}-{code}" for i, (_s, _w, code, *_r) in enumerate(ERRORS)],
)
def test_c_habit_error_names_the_bpfdsl_form(src, where, code, message, help_):
    whole = src.startswith("license") or src.startswith("#")
    text = src if whole else _prog("    " + src)
    first = 1 if whole else BODY_LINE
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "habit.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, first + where[0] - 1, where[1]), d.render(
        text
    )
    assert message in d.message, d.message
    if help_ is not None:
        assert d.hints and help_ in d.hints[0], d.hints
    shown = ei.value.render()
    assert f"habit.bpfd:{first + where[0] - 1}:{where[1]}" in shown
    assert text.split("\n")[first + where[0] - 2] in shown  # the line itself


XDP_FILE = 'license "GPL"\nmap m: hash<u32, u64>(max_entries: 16)\n'


@pytest.mark.parametrize("engine", ENGINES)
def test_frame_length_minus_one_with_its_cast(engine):
    """``xdp_get_buff_len()`` is a u64 (the kernel's ``bpf_xdp_get_buff_len``): the common
    ``xdp_get_buff_len() - 1`` into a u32 parameter takes the cast the error names, and the
    kernel accepts the object and reads the frame's last byte."""
    src = XDP_FILE + (
        "xdp fn f(ctx) {\n"
        "    let n: u64 = xdp_get_buff_len()\n"
        "    m[0] = n\n"
        "    let last: u8 = 0\n"
        "    m[1] = xdp_load_bytes((xdp_get_buff_len() - 1) as u32, last) as u64\n"
        "    m[2] = last as u64\n"
        "    m[3] = bpf_xdp_get_buff_len()\n"
        "    return XDP_PASS\n"
        "}\n"
    )
    frame = bytes(Ether() / IP() / UDP() / b"tail\x7f")
    got = _map_after_one_run(src, engine, "m", frame)
    assert got == {0: len(frame), 1: 0, 2: 0x7F, 3: len(frame)}


def test_builtin_results_come_from_the_helper_table():
    """A builtin that is one helper call has the result type of the helper's prototype
    (bpfdsl/abi/helpers.py ``ret_ctype``): no second list of result types."""
    from bpfdsl.abi.helpers import HELPERS
    from bpfdsl.lang.sema.symbols import BUILTINS, PKT_RESIZE, RET_TYPES

    checked = 0
    for name, sig in BUILTINS.items():
        h = HELPERS.get(PKT_RESIZE.get(name, name))
        if sig is None or h is None:
            continue
        assert sig[1] == RET_TYPES[h.ret_ctype], name
        checked += 1
    assert checked >= 10
    assert BUILTINS["xdp_get_buff_len"][1].name == "u64"


BE_FIELDS = """license "GPL"
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    ip.id = be16(host(ip.id) + 1)
    ip.frag_off |= 0x4000
    ip.tos &= 0xfc
    udp.dest ^= 1
    ip.saddr = be32(host(ip.saddr) + 1)
    return XDP_TX
}
"""


@pytest.mark.parametrize("engine", ENGINES)
def test_network_order_fields_in_the_advised_spelling(engine):
    """The spelling the be16/be32 error gives (``ip.id = be16(host(ip.id) + 1)``) adds in
    host order; ``|=``/``&=``/``^=`` on a be16 work as written (a literal is a be16 value:
    ``frag_off |= 0x4000`` sets DF, ``dest ^= 1`` turns port 53 into 52); the IPv4 and UDP
    checksums stay right (scapy recomputes them)."""
    frame = bytes(
        Ether() / IP(src="10.0.0.1", dst="10.0.0.2", id=0x12FF, tos=0x13)
        / UDP(sport=1000, dport=53) / b"payload!"
    )  # fmt: skip
    r = bpfdsl.run(compile_source(BE_FIELDS, "be.bpfd").obj, [frame], engine=engine)[0]
    assert r.verdict == "XDP_TX"
    ip = Ether(r.data_out)[IP]
    assert (ip.id, ip.flags, ip.tos, ip.src) == (0x1300, "DF", 0x10, "10.0.0.2")
    assert ip[UDP].dport == 52
    ip_check, udp_check = ip.chksum, ip[UDP].chksum
    del ip.chksum
    del ip[UDP].chksum
    again = IP(bytes(ip))
    assert (again.chksum, again[UDP].chksum) == (ip_check, udp_check)


def test_c_statement_semicolons_and_parentheses_are_accepted():
    """``return XDP_PASS;``, ``m[1] += 1;`` and C's ``if (cond)`` compile as written, to the
    code of the spelling without them."""
    c = "    m[1] += 1;\n    if (ip.ttl > 1) { return XDP_DROP; }\n    return XDP_PASS;"
    plain = "    m[1] += 1\n    if ip.ttl > 1 { return XDP_DROP }\n    return XDP_PASS"
    assert _insns(_prog(c)) == _insns(_prog(plain))


def test_one_table_of_c_names():
    """Every C call named in the docs' table has its form in c_names, and the helper path
    of sema (``bpf_NAME``) reads the same table (no second list of helper forms)."""
    from bpfdsl.lang.sema import helpers

    assert not hasattr(helpers, "LANGUAGE_FORMS")
    for name in ("htons", "ntohs", "htonl", "ntohl", "bpf_htons", "bpf_ntohs", "bpf_htonl",
                 "bpf_ntohl", "memcpy", "__builtin_memcpy", "memset", "__builtin_memset",
                 "bpf_map_lookup_elem", "bpf_redirect_map", "sizeof"):  # fmt: skip
        assert c_names.call_hint(name) is not None, name
    from bpfdsl.lang import headers

    # the kernel's struct names of headers live in c_names only
    assert headers.KERNEL_STRUCTS is c_names.KERNEL_STRUCTS
    assert c_names.header_of("iphdr") == "ipv4" and c_names.header_of("struct ethhdr") == "ethernet"
