"""C habits: the C spellings users bring from libbpf programs, and the bpfdsl form of each.

The one table of them (docs/language.md "Coming from C" lists it): :data:`C_CALLS` (C
functions, macros and ``bpf_*`` helpers the language writes another way -> the bpfdsl
expression, with the call's own arguments put in), :data:`C_TYPES` (C type names -> bpfdsl
types), :data:`C_NAMES` (other C names: ``NULL``) and :data:`KERNEL_STRUCTS` (library
header -> the kernel's struct of it, ``ipv4`` -> ``iphdr``; :func:`header_of` the other
way).  Consulted by sema's unknown-function, unknown-type and unknown-name errors and its
``bpf_NAME`` helper path (:mod:`bpfdsl.lang.sema.helpers`), by the header library
(``Header.c_name``), by the builder for a C declaration (``__u32 x = 5``) and by the parser
for C syntax (:func:`syntax_hint`: ``->``, ``&x``, ``sizeof(struct x)``, C's packet pointers
``(void *)(long)ctx->data`` and ``struct iphdr *ip = data + ...``, ``SEC(...)``,
``#include``, C's ``for (;;)``, ``?:``, ``++x``, C struct fields and function definitions).
A leaf of the front end: it imports only the ABI tables.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from bpfdsl.abi.prog_types import PROGRAM_KINDS


@dataclass(frozen=True, slots=True)
class CForm:
    """The bpfdsl form of a C call: ``params`` names C's parameters (in C's order);
    ``form`` and ``note`` are :meth:`str.format` templates over the call's argument texts
    (``{0}`` the first), the parameter names standing in when the arguments are not known."""

    params: tuple[str, ...]
    form: str
    note: str = ""


_HTON = "host to network order; a literal converts at compile time, no swap at run time"
_NTOH = "network to host order"
_COPY = "a value is copied by assignment (fields, structs, arrays, addresses): no size"
_ZERO = (
    "a value the program builds starts zeroed (`let k = flow()`: every field and padding "
    "byte 0); assign a value or each field instead of clearing memory"
)
_LOOKUP = "the `else` runs when the key is missing; or `if let v = {0}.lookup({1}) {{ ... }}`"

C_CALLS: dict[str, CForm] = {
    # byte order (bpf_endian.h, arpa/inet.h)
    **{n: CForm(("x",), "be16({0})", _HTON) for n in ("htons", "bpf_htons", "__constant_htons")},
    **{n: CForm(("x",), "be32({0})", _HTON) for n in ("htonl", "bpf_htonl", "__constant_htonl")},
    **{n: CForm(("x",), "be64({0})", _HTON) for n in ("bpf_cpu_to_be64", "htobe64")},
    **{
        n: CForm(("x",), "host({0})", _NTOH)
        for n in ("ntohs", "bpf_ntohs", "__constant_ntohs", "ntohl", "bpf_ntohl")
        + ("__constant_ntohl", "bpf_be64_to_cpu", "be64toh")
    },
    # memory
    **{
        n: CForm(("dst", "src", "n"), "{0} = {1}", _COPY)
        for n in ("memcpy", "__builtin_memcpy", "memmove", "__builtin_memmove")
    },
    **{n: CForm(("dst", "c", "n"), "{0} = VALUE", _ZERO) for n in ("memset", "__builtin_memset")},
    "__sync_fetch_and_add": CForm(
        ("ptr", "value"), "{0} += {1}", "an atomic add (BPF_ATOMIC) on a map value"
    ),
    "__sync_fetch_and_or": CForm(("ptr", "value"), "{0} |= {1}", "atomic on a map value"),
    "__sync_fetch_and_and": CForm(("ptr", "value"), "{0} &= {1}", "atomic on a map value"),
    "__sync_fetch_and_xor": CForm(("ptr", "value"), "{0} ^= {1}", "atomic on a map value"),
    "sizeof": CForm(
        ("x",),
        "the value itself",
        "bpfdsl passes sizes itself (map keys and values, `csum_diff`, `ringbuf_output` and "
        "`xdp_load_bytes` take the value); where a length is a number, write it (a `const`)",
    ),
    # debug printing (bpf_helpers.h bpf_printk, helper bpf_trace_printk)
    **{
        n: CForm(
            ("fmt", "..."),
            "ringbuf_output(RING, RECORD)",
            "no trace_pipe printing: put the values in a struct record, send it through a "
            "`ringbuf` map and read it decoded by field with `bpfdsl events PIN_DIR:RING`",
        )
        for n in ("bpf_printk", "bpf_trace_printk")
    },
    # helpers (include/uapi/linux/bpf.h) the language has its own form for
    "bpf_map_lookup_elem": CForm(("map", "key"), "let v = {0}.lookup({1}) else {{ ... }}", _LOOKUP),
    "bpf_map_update_elem": CForm(
        ("map", "key", "value", "flags"),
        "{0}.update({1}, {2}, {3})",
        "`{0}[{1}] = {2}` with BPF_ANY",
    ),
    "bpf_map_delete_elem": CForm(("map", "key"), "{0}.delete({1})"),
    "bpf_redirect_map": CForm(("map", "key", "flags"), "return redirect_map({0}, {1}, {2})"),
    "bpf_fib_lookup": CForm(("ctx", "params", "size", "flags"), "fib_lookup({1}, {3})"),
    "bpf_csum_diff": CForm(
        ("from", "from_size", "to", "to_size", "seed"),
        "csum_diff({0}, {2}, {4})",
        "`none` for a NULL side",
    ),
    "bpf_xdp_adjust_head": CForm(("ctx", "delta"), "adjust_head({1})"),
    "bpf_xdp_adjust_tail": CForm(("ctx", "delta"), "adjust_tail({1})"),
    "bpf_xdp_adjust_meta": CForm(("ctx", "delta"), "adjust_meta({1})"),
    "bpf_xdp_load_bytes": CForm(("ctx", "offset", "buf", "len"), "xdp_load_bytes({1}, {2})"),
    "bpf_xdp_store_bytes": CForm(("ctx", "offset", "buf", "len"), "xdp_store_bytes({1}, {2})"),
    "bpf_ringbuf_output": CForm(("ringbuf", "data", "size", "flags"), "ringbuf_output({0}, {1})"),
    "bpf_perf_event_output": CForm(
        ("ctx", "map", "flags", "data", "size"), "perf_event_output({1}, {3})"
    ),
    "bpf_tail_call": CForm(("ctx", "prog_array", "index"), "tail_call({1}, {2}) else {{ ... }}"),
    "bpf_msg_pull_data": CForm(("msg", "start", "end", "flags"), "msg_pull_data({1}, {2}, {3})"),
    "bpf_msg_push_data": CForm(("msg", "start", "len", "flags"), "msg_push_data({1}, {2}, {3})"),
    "bpf_msg_pop_data": CForm(("msg", "start", "len", "flags"), "msg_pop_data({1}, {2}, {3})"),
    "bpf_msg_redirect_map": CForm(
        ("msg", "map", "key", "flags"), "return msg_redirect_map({1}, {2}, {3})"
    ),
    "bpf_msg_redirect_hash": CForm(
        ("msg", "map", "key", "flags"), "return msg_redirect_hash({1}, {2}, {3})"
    ),
    "bpf_sock_map_update": CForm(
        ("skops", "map", "key", "flags"), "sock_map_update({1}, {2}, {3})"
    ),
    "bpf_sock_hash_update": CForm(
        ("skops", "map", "key", "flags"), "sock_hash_update({1}, {2}, {3})"
    ),
}
"""C call name -> its bpfdsl form (``bpf_NAME`` helpers under their C name)."""

C_TYPES: dict[str, str] = {
    **{f"__u{b}": f"u{b}" for b in (8, 16, 32, 64)},
    **{f"__s{b}": f"i{b}" for b in (8, 16, 32, 64)},
    **{f"uint{b}_t": f"u{b}" for b in (8, 16, 32, 64)},
    **{f"u_int{b}_t": f"u{b}" for b in (8, 16, 32, 64)},
    **{f"int{b}_t": f"i{b}" for b in (8, 16, 32, 64)},
    **{f"__be{b}": f"be{b}" for b in (16, 32, 64)},
    "unsigned char": "u8",
    "unsigned short": "u16",
    "unsigned int": "u32",
    "unsigned": "u32",
    "unsigned long": "u64",
    "unsigned long long": "u64",
    "char": "i8",
    "signed char": "i8",
    "short": "i16",
    "int": "i32",
    "signed": "i32",
    "signed int": "i32",
    "long": "i64",
    "long long": "i64",
    "size_t": "u64",
    "_Bool": "bool",
}
"""C type name (the kernel's ``__u32``, stdint's ``uint32_t``, C's own) -> bpfdsl type."""

C_NAMES: dict[str, str] = {
    "NULL": "bpfdsl has no pointers: a lookup that finds nothing runs the `else` of "
    "`let v = m.lookup(k) else { ... }` (or is skipped by `if let v = m.lookup(k) { ... }`); "
    "a fn declared `-> T?` returns `none`",
    "nullptr": "bpfdsl has no pointers: see `let ... else` and `none`",
    "BPF_F_CURRENT_CPU": "`perf_event_output(map, record)` writes to the current CPU's "
    "buffer: no flags argument",
}
"""Other C names -> what to write instead."""

KERNEL_STRUCTS: dict[str, str] = {
    "ethernet": "ethhdr",
    "vlan": "vlan_hdr",
    "ipv4": "iphdr",
    "ipv6": "ipv6hdr",
    "tcp": "tcphdr",
    "udp": "udphdr",
    "icmp": "icmphdr",
    "icmpv6": "icmp6hdr",
    "byte": "__u8",
    "arp": "arphdr",
    "gre": "gre_base_hdr",
    "vxlan": "vxlanhdr",
    "geneve": "genevehdr",
    "gue": "guehdr",
    "mpls": "mpls_label",
    "ipv6_opt": "ipv6_opt_hdr",
    "ipv6_rt": "ipv6_rt_hdr",
    "ipv6_frag": "frag_hdr",
}
"""bpfdsl library header -> the kernel struct of it (include/uapi/linux/*.h: if_ether.h
``ethhdr``, ip.h ``iphdr``, ...), for messages, documentation and C's ``struct iphdr``."""
_HEADER_OF = {c: h for h, c in KERNEL_STRUCTS.items() if h != "byte"}
_HEADER_OF.update({"vlan_ethhdr": "vlan", "udp6hdr": "udp", "icmp6_hdr": "icmpv6"})


def header_of(c_struct: str) -> str | None:
    """The bpfdsl header of the kernel struct ``c_struct`` (``iphdr`` -> ``ipv4``), or None."""
    return _HEADER_OF.get(c_struct.removeprefix("struct ").strip())


_PACKET = (
    "bpfdsl reads packet bytes with bounds-checked `parse HEADER` (or `parse byte`), "
    "each parse after the one before; the length is `ctx.len`"
)


def _parse_form(c_struct: str, var: str) -> str:
    """``write `let ip = parse ipv4 else { return XDP_PASS }` ...`` for C's ``struct
    c_struct *var = data + ...``."""
    h = header_of(c_struct)
    if h is None:
        return (
            f"bpfdsl has no pointers: declare the header (`header {c_struct} {{ a: be16, ... }}`) "
            f"and write `let {var} = parse {c_struct} else {{ return XDP_PASS }}`"
        )
    return (
        f"write `let {var} = parse {h} else {{ return XDP_PASS }}` (the kernel's `struct "
        f"{c_struct}` is the header `{h}`; `parse` checks the bounds and moves past it)"
    )


# words of a C type or declaration: `unsigned int x`, `static const __u32 x`
_C_TYPE_WORDS = frozenset(w for t in C_TYPES for w in t.split()) | {"void", "const", "static"}
_BPFDSL_TYPES = frozenset(
    f"{p}{b}"
    for p, bs in (("u", (8, 16, 32, 64)), ("i", (8, 16, 32, 64)), ("be", (16, 32, 64)))
    for b in bs
) | {"bool"}


def c_type(words: str) -> str | None:
    """The bpfdsl type of the C type ``words`` (``unsigned  int``, ``__u32``; bpfdsl's own
    names are themselves), or None."""
    w = " ".join(x for x in words.split() if x not in ("const", "volatile", "static"))
    if w in _BPFDSL_TYPES:
        return w
    return C_TYPES.get(w)


def is_c_declaration_word(name: str) -> bool:
    """True for a name that starts a C declaration (``__u32``, ``unsigned``, ``int``,
    ``u32``): a statement of that name alone is C's ``TYPE NAME = VALUE``."""
    return name in _C_TYPE_WORDS or name in C_TYPES or name in _BPFDSL_TYPES


def _args_text(args: list[str]) -> list[str]:
    """Argument texts as bpfdsl reads them: no ``&`` (there are no pointers), ``a->b`` is
    ``a.b``."""
    return [re.sub(r"\s*->\s*", ".", a.strip().removeprefix("&").strip()) for a in args]


def c_form(name: str, args: list[str] | None = None) -> tuple[str, str] | None:
    """The bpfdsl form of the C call ``name(args)`` (``args`` the source texts of its
    arguments, None when unknown) as ``(form, note)``: ``form`` in backticks, ``note`` ""
    or a sentence; None if ``name`` is no C habit of :data:`C_CALLS`."""
    f = C_CALLS.get(name)
    if f is None:
        return None
    a = _args_text(args) if args is not None else None
    if a is not None and f.params[:1] == ("ctx",) and len(a) == len(f.params) - 1:
        a = ["ctx", *a]  # written the bpfdsl way, without the context
    if a is None or len(a) != len(f.params):
        a = list(f.params)
    return f"`{f.form.format(*a)}`", f.note.format(*a)


def call_hint(name: str, args: list[str] | None = None) -> str | None:
    """``C's `htons(53)` is `be16(53)` in bpfdsl: NOTE`` for a C call (``args`` its
    argument texts, None when unknown), or None."""
    got = c_form(name, args)
    if got is None:
        return None
    form, note = got
    call = f"{name}({', '.join(a.strip() for a in args)})" if args is not None else name
    return f"C's `{call}` is {form} in bpfdsl" + (f": {note}" if note else "")


def type_hint(name: str) -> str | None:
    """``C's `__u32` is `u32``` for a C type name, or None."""
    t = c_type(name)
    if t is None or t == name:
        return None
    return f"C's `{name}` is `{t}` in bpfdsl"


def name_hint(name: str) -> str | None:
    """What to write for the C name ``name`` used as a value (``NULL``, a type in a C cast
    ``(u32)x``), or None."""
    if name in C_NAMES:
        return C_NAMES[name]
    t = c_type(name)
    if t is not None:
        return f"a cast is written `x as {t}`; a declaration `let x: {t} = ...`"
    return None


def declaration_hint(line: str) -> str | None:
    """The bpfdsl form of a C declaration statement ``line`` (``__u32 x = 5;``,
    ``unsigned int n;``), or None."""
    m = re.match(r"\s*((?:[A-Za-z_]\w*\s+)+?)\**\s*([A-Za-z_]\w*)\s*(?:=\s*(.*?))?\s*;?\s*$", line)
    if m is None:
        return None
    t = c_type(m.group(1))
    if t is None:
        return None
    value = m.group(3) or "0"
    return f"write `let {m.group(2)}: {t} = {value}` (C's `{m.group(1).strip()}` is `{t}`)"


def _call_around(text: str, pos: int) -> tuple[str, list[str]] | None:
    """The name and argument texts of the call whose parentheses hold ``pos`` (on its
    line), or None."""
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    end = len(text) if end < 0 else end
    depth, i = 0, pos - 1
    while i >= start:
        ch = text[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            if depth == 0:
                break
            depth -= 1
        i -= 1
    if i < start:
        return None
    m = re.search(r"([A-Za-z_]\w*)\s*$", text[start:i])
    if m is None:
        return None
    args, depth, cur = [], 0, ""
    for ch in text[i + 1 : end]:
        if ch == "(" or ch == "[":
            depth += 1
        elif ch in ")]":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append(cur)
            cur = ""
            continue
        cur += ch
    if cur.strip():
        args.append(cur)
    return m.group(1), args


def _outer_parens(text: str) -> bool:
    """True when the ``(`` that starts ``text`` closes at its last character (``(a && b)``,
    not ``(a) && (b)``)."""
    depth = 0
    for i, ch in enumerate(text):
        depth += (ch == "(") - (ch == ")")
        if depth == 0:
            return i == len(text) - 1
    return False


_SECTIONS: dict[str, str] = {}  # ELF section -> the first program kind of it (`xdp`)
for _k in PROGRAM_KINDS:
    _SECTIONS.setdefault(_k.section, _k.keyword)


# what C and bpfdsl programs call their context parameter
_CONTEXT_NAMES = frozenset({"ctx", "skb", "msg", "skops", "xdp"})


def syntax_hint(text: str, pos: int, value: str | None, expected: set[str]) -> str | None:
    """A hint naming the bpfdsl form of the C syntax at character offset ``pos`` of
    ``text`` where the parser stopped (``value``: the unexpected token's text, None for a
    character the lexer refused; ``expected``: the terminals allowed there), or None."""
    ls = text.rfind("\n", 0, pos) + 1
    le = text.find("\n", pos)
    line = text[ls : len(text) if le < 0 else le]
    before = text[ls:pos]
    if value is None and line.lstrip().startswith("#"):
        m = re.match(r"\s*#\s*define\s+(\w+)\s+(.+?)\s*$", line)
        if m:
            return f"write `const {m.group(1)}: u32 = {m.group(2)}` (bpfdsl has no preprocessor)"
        return (
            "bpfdsl has no preprocessor: remove the line; the kernel's headers (ethernet, "
            "ipv4, tcp, ...) and constants (XDP_PASS, ETH_P_IP, IPPROTO_UDP, ...) are built in"
        )
    # `global fn g(ctx) -> u32`, `fn g(ctx) -> u32`: C's context parameter on a fn
    m = re.match(r"\s*((?:global|noinline)\s+)?fn\s+(\w+)\s*\(\s*(\w+)\s*(\))?\s*$", before)
    if m and (value == "->" if m.group(4) else value == ")"):
        kind = (m.group(1) or "").strip()
        fn = f"{kind + ' ' if kind else ''}fn {m.group(2)}"
        if m.group(3) in _CONTEXT_NAMES:
            return (
                f"a fn gets the program's context without naming it (one that parses or "
                f"calls a context builtin is handed it): write `{fn}() -> ...`; other "
                f"parameters are `NAME: TYPE`"
            )
        return f"a parameter has a type: `{fn}({m.group(3)}: u32)`"
    m = re.match(r'\s*SEC\s*\(\s*"([^"]*)"', line)
    if m:
        sec = m.group(1)
        if sec == ".maps":
            return (
                "bpfdsl has no SEC(): declare a map as `map NAME: hash<KEY, VALUE>(max_entries: N)`"
            )
        if sec == "license":
            return 'bpfdsl has no SEC(): write `license "GPL"`'
        kind = _SECTIONS.get(sec, "xdp")
        return (
            f"bpfdsl has no SEC(): the program kind comes first, `{kind} fn NAME(ctx) {{ ... }}` "
            f"(its section is `{sec if sec in _SECTIONS else 'xdp'}`)"
        )
    m = re.match(
        r"\s*(?:(?:static|inline|__always_inline|__noinline)\s+)*((?:[A-Za-z_]\w*\s+)+?)\**\s*"
        r"([A-Za-z_]\w*)\s*\(([^)]*)\)?",
        line,
    )
    if m and (c_type(m.group(1)) is not None or m.group(1).split()[-1] == "void"):
        name, params = m.group(2), m.group(3) or ""
        if "xdp_md" in params:
            return f"a program is written `xdp fn {name}(ctx) {{ ... }}`"
        if "sk_msg_md" in params:
            return f"a program is written `sk_msg fn {name}(msg) {{ ... }}`"
        if "bpf_sock_ops" in params:
            return f"a program is written `sock_ops fn {name}(skops) {{ ... }}`"
        ret = c_type(m.group(1))
        arrow = f" -> {ret}" if ret else ""
        return (
            f"a function is written `fn {name}(a: u32){arrow} {{ ... }}` (parameters `NAME: TYPE`)"
        )
    m = re.match(r"\s*(?:const\s+)?struct\s+(\w+)\s*\*\s*(\w+)\s*(?:=|;)", line)
    if m:  # `struct iphdr *ip = data + sizeof(struct ethhdr);`
        return _parse_form(m.group(1), m.group(2))
    m = re.search(r"\b([A-Za-z_]\w*)\s*->\s*(data|data_end|data_meta)\b", line)
    if m or re.match(r"\s*void\s*\*", line) or re.search(r"\bdata_end\b", line):
        # `void *data = (void *)(long)ctx->data;`, `if (data + 14 > data_end)`
        if m is None:
            return (
                "C's packet pointers (`data`, `data_end`) and bounds checks are not needed: "
                + _PACKET
            )
        obj, field = m.group(1), m.group(2)
        return f"`{obj}->{field}` is not needed: " + _PACKET.replace("ctx.len", f"{obj}.len")
    m = re.search(r"([A-Za-z_][\w.]*)\s*$", before)
    if value == "->" and m is not None:  # `p->field` (not a misplaced `-> TYPE`)
        f = re.match(r"->\s*([A-Za-z_]\w*)", text[pos:])
        obj = m.group(1)
        field = f.group(1) if f else "field"
        return f"write `{obj}.{field}`: bpfdsl has no pointers, every field is read with `.`"
    if value == "&":
        call = _call_around(text, pos)
        if call is not None:
            hint = call_hint(*call)
            if hint is not None:
                return hint
        return "bpfdsl has no `&` (address of): pass the value itself (`m.lookup(k)`, `f(k)`)"
    if value == "struct" and re.search(r"sizeof\s*\(\s*$", before):
        hint = "write " + C_CALLS["sizeof"].form + ": " + C_CALLS["sizeof"].note
        m = re.match(r"struct\s+(\w+)", text[pos:])
        h = header_of(m.group(1)) if m else None
        if m and h:
            hint += f" (the kernel's `struct {m.group(1)}` is the header `{h}`)"
        return hint
    if value == "struct":
        m = re.match(r"\s*struct\s+(\w+)\s+(\w+)", line)
        if m:
            return (
                f"build a struct value with named fields: `let {m.group(2)} = {m.group(1)}()` "
                "(the fields not given are zero)"
            )
    m = re.match(
        r"\s*for\s*\(\s*(?:[A-Za-z_]\w*\s+)*([A-Za-z_]\w*)\s*=\s*([^;]+?)\s*;\s*\1\s*(<=?)\s*"
        r"([^;]+?)\s*;",
        line,
    )
    if m and re.search(r"\bfor\s*$", before):
        end = m.group(4) if m.group(3) == "<" else f"{m.group(4)} + 1"
        return f"write `for {m.group(1)} in {m.group(2)}..{end} {{ ... }}` (the end is exclusive)"
    if re.search(r"\bfor\s*$", before) and value == "(":
        return "write `for i in START..END { ... }` (END exclusive, a constant the verifier sees)"
    if re.match(r"\s*switch\b", line):
        return "write `match x { 1 => ..., 2 | 3 => { ... }, _ => ... }`"
    if value == "?":
        m = re.match(
            r"\s*let\s+(\w+)(\s*:\s*\w+)?\s*=\s*(.+?)\s*\?\s*(.+?)\s*:\s*(.+?)\s*;?\s*$", line
        )
        if m:
            n, t = m.group(1), m.group(2) or ""
            return (
                f"bpfdsl has no `?:`: write `let {n}{t} = {m.group(5)}` then "
                f"`if {m.group(3)} {{ {n} = {m.group(4)} }}`"
            )
        return "bpfdsl has no `c ? a : b`: assign in `if c { v = a } else { v = b }`"
    if value in ("++", "--"):
        m = re.match(r"(\+\+|--)\s*([A-Za-z_][\w.\[\]]*)", text[pos:])
        what = m.group(2) if m else "x"
        op = "+=" if value == "++" else "-="
        return f"write `{what} {op} 1` (or `{what}{value}` as a statement)"
    if value == "*" and re.search(r"(?:^|[(;{=,])\s*\(?\s*$", before):  # `*v += 1`, `(*v)++`
        m = re.match(
            r"\*\s*([A-Za-z_]\w*)\s*\)?\s*(.*?)\s*;?\s*$", text[pos : len(text) if le < 0 else le]
        )
        name, rest = (m.group(1), m.group(2)) if m else ("v", "")
        stmt = name + (rest if rest[:2] in ("++", "--") else f" {rest}" if rest else "")
        return (
            f"bpfdsl has no pointers: write `{stmt}` (a looked-up map value is used by its "
            f"name: `let {name} = m.lookup(k) else {{ ... }}` then `{name} += 1`)"
        )
    m = re.match(r"\s*(?:}\s*else\s+)?if\b(.*)$", before)
    if m and "LBRACE" in expected and value != "{":  # C's `if (c) stmt;`
        cond = m.group(1).strip()
        if cond.startswith("(") and cond.endswith(")") and _outer_parens(cond):
            cond = cond[1:-1].strip()
        body = text[pos : len(text) if le < 0 else le].strip().removesuffix(";").strip()
        if "{" not in body:  # `if c and d { ... }` stops at `and`: a block follows
            return f"the body of `if` is a block: write `if {cond} {{ {body} }}`"
    if value in ("and", "or", "not"):
        return f"bpfdsl writes `{ {'and': '&&', 'or': '||', 'not': '!'}[value] }`"
    if value is not None and "COLON" in expected:
        m = re.match(
            r"\s*((?:[A-Za-z_]\w*\s+)+?)\**\s*([A-Za-z_]\w*)\s*(?:\[\s*(\w+)\s*\])?\s*;", line
        )
        if m and c_type(m.group(1)) is not None:
            t = c_type(m.group(1))
            if m.group(3):
                t = f"[{t}; {m.group(3)}]"
            return (
                f"write `{m.group(2)}: {t},` (C's `{line.strip()}`): fields are `NAME: TYPE`, "
                "separated by `,`"
            )
    return None
