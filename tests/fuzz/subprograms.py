"""Random valid XDP programs with BPF subprograms, run on both engines (issue #23 b).

:class:`SubGen` extends :class:`fuzz.programs.ProgGen` with what composes programs:

- ``noinline fn`` (static subprograms, verified at every call with the caller's argument
  types) and ``global fn`` (verified once, on their own: every pointer parameter is
  unwrapped with ``let ... else`` first), with integer, ``bool``, struct (``pair``,
  ``stats``: a literal, a local or a map value, passed by reference) and header view
  (``ethernet``, ``ipv4``, ``ipv6``, ``udp``, ``tcp``) parameters, up to 5, calling each
  other (no recursion: a fn calls only fns defined before it, 6 frames deep at most);
- ``loop(count, callback[, state])`` (bpf_loop) with run-time and constant counts (0
  too), callbacks with and without a state struct, called from programs, subprograms and
  other callbacks;
- tail calls through a ``prog_array`` whose slots hold other programs of the file (which
  may tail-call again) and sometimes the program itself (33 tail calls, then the
  ``else``);
- ring buffer records (``ringbuf_output``, ``ringbuf_reserve`` + submit/discard) in
  programs, subprograms and callbacks;
- packet resizes (``adjust_head``/``adjust_tail``/``adjust_meta``) in the program body
  between subprogram calls, on one path of a branch and in a loop, then a new parse whose
  views go to subprograms again (a subprogram itself cannot resize: ``resize-in-fn``);
- subprograms that see the packet (issue 24): ``noinline`` fns that parse on from the
  caller's cursor (``parse byte``, ``load ... at cursor``, a byte walk), ``global`` fns
  that take the context (``__arg_ctx``) and parse from the frame's start (``parse
  ethernet``, then ``ipv4`` on IPv4), and ``loop`` callbacks that walk the packet a byte
  per call; the fns that call them take the context (and cursor) too, so a caller keeps
  to the kernel's 5 argument registers (a noinline fn that reaches the packet has 3 of its
  own, a global one 4) and a callback that reaches a context-taking fn parses itself;
- every ISA level, ``--mcpu v1`` to ``v4``.

The oracle is :func:`fuzz.programs.run_case`: every program sema accepts is one the
checker should accept and the kernel load (``kernel-rejected``: the checker accepted what
the kernel refuses; ``checker-false-refusal``: the checker refused what the kernel loads;
``both-refused``: an object neither accepts), and on each frame the kernel
(BPF_PROG_TEST_RUN) and the interpreter agree on the verdict, the output bytes, every data
map and the records in the ring buffer.  A generated program that sema refuses is a
``compile-rejected`` failure (a generator bug, unless sema is wrong).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from .harness import Case, Fuzzer, ddmin
from .programs import HEADER, MCPUS, ProgGen, Scope, frames, reproducer, run_case

DECLS = """struct lst { n: u64, k: u32 }
struct ev { tag: u32, v: u32, w: u64 }
map events: ringbuf<ev>(max_entries: 16384)
"""

PARAM_INTS = ("u8", "u16", "u32", "u64", "i32", "i64")
VIEWS = {"eth": "ethernet", "ip": "ipv4", "ip6": "ipv6", "udp": "udp", "tcp": "tcp"}
STRUCTS = {"pair": (("a", "u32"), ("b", "u64")), "stats": (("pkts", "u64"), ("bytes", "u64"))}
MAX_DEPTH = 6  # frames below the program (the kernel allows 8 in all)


@dataclass
class Fn:
    """A generated subprogram: ``kind`` noinline/global/callback, its parameters
    ``(name, type)`` (a type is an integer type, a struct name or a header view kind
    ``VIEWS`` key), ``ret`` ("" for nothing), ``depth`` (frames it adds, callees
    included), ``state`` (callbacks: takes a ``lst``), ``packet`` (it reads the packet
    on its caller's context and cursor: sema's packet_fns), ``ctx`` (it needs the
    context from its caller without being a packet fn of its own: a global fn that
    reads the packet, or a fn calling one)."""

    name: str
    kind: str
    params: list[tuple[str, str]] = field(default_factory=list)
    ret: str = ""
    depth: int = 1
    state: bool = False
    packet: bool = False
    ctx: bool = False


class SubGen(ProgGen):
    """One random program with subprograms, callbacks, tail calls and ring buffer
    records per :meth:`program` call (deterministic for a seed)."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__(rng)
        self.fns: list[Fn] = []
        self.visible = 0  # fns[:visible] may be called from the body being written
        self.max_callee = MAX_DEPTH  # callable fns add at most this many frames
        self.tails = False  # a prog_array `jt` exists
        self.in_call = 0  # writing the arguments of a call
        # what the fn being written may call: fns that read the packet (the caller then
        # takes the context and cursor) and fns that need the context
        self.allow_packet = True
        self.allow_ctx = True

    # ---- calls ----

    def callable(self, sc: Scope, want: str | None = None) -> list[Fn]:
        out = []
        for f in self.fns[: self.visible]:
            if f.kind == "callback" or f.depth > self.max_callee:
                continue
            if want is not None and f.ret != want:
                continue
            if (f.packet and not self.allow_packet) or (f.ctx and not self.allow_ctx):
                continue
            if all(t not in VIEWS or t in sc.hdrs for _n, t in f.params):
                out.append(f)
        return out

    def struct_arg(self, ty: str, sc: Scope) -> str:
        have = [v for v, t in sc.refs.items() if t == ty]
        if have and self.r.random() < 0.6:
            return self.r.choice(have)
        fs = ", ".join(f"{n}: {self.expr(t, sc, 2)}" for n, t in STRUCTS[ty])
        return f"{ty}({fs})"

    def call(self, f: Fn, sc: Scope) -> str:
        args = []
        self.in_call += 1  # no call in an argument (bounded expressions)
        try:
            for _n, t in f.params:
                if t in VIEWS:
                    args.append(t)
                elif t in STRUCTS:
                    args.append(self.struct_arg(t, sc))
                else:
                    args.append(self.expr(t, sc, 2))
        finally:
            self.in_call -= 1
        return f"{f.name}({', '.join(args)})"

    def extra_leaves(self, sc: Scope) -> list[tuple[str, str]]:
        if self.in_call or self.r.random() < 0.5:
            return []
        fs = [f for f in self.callable(sc) if f.ret not in ("", "bool")]
        if not fs:
            return []
        f = self.r.choice(fs)
        return [(self.call(f, sc), f.ret)] * 2

    def extra_conds(self, sc: Scope) -> list[str]:
        if self.in_call:
            return []
        fs = self.callable(sc, "bool")
        return [self.call(self.r.choice(fs), sc)] if fs else []

    def extra_kinds(self, sc: Scope) -> list[str]:
        kinds = ["ring", "sref"]
        if self.callable(sc):
            kinds += ["call", "call", "call"]
        if self.callbacks():
            kinds += ["loop", "loop"]
        if self.tails and sc.sub is None:
            kinds += ["tail"]
        return kinds

    # ---- statements ----

    def s_call(self, sc: Scope) -> list[str]:
        f = self.r.choice(self.callable(sc))
        c = self.call(f, sc)
        if f.ret in ("", "bool") or self.r.random() < 0.4:
            if f.ret == "bool" and self.r.random() < 0.5:
                return [f"if {c} {{ {self.leave(sc)} }}"]
            return [c]
        v = self.fresh("c")
        sc.vars[v] = f.ret
        return [f"let {v}: {f.ret} = {c}"]

    def s_sref(self, sc: Scope) -> list[str]:
        """A write to a field of a struct in scope (a local, a map value, a parameter)."""
        fields = []
        for v, t in sc.refs.items():
            if t in STRUCTS:
                fields += [(f"{v}.{n}", ft) for n, ft in STRUCTS[t]]
            elif t == "lst":
                fields += [(f"{v}.n", "u64"), (f"{v}.k", "u32")]
        if not fields:
            v = self.fresh("s")
            t = self.r.choice(sorted(STRUCTS))
            line = f"let {v} = {self._lit_struct(t, sc)}"
            sc.refs[v] = t
            return [line]
        e, t = self.r.choice(fields)
        # a map value's fields are written atomically: 32-bit |= ^= &= need --mcpu v3
        ops = ("=", "+=", "^=", "|=", "&=") if t == "u64" else ("=", "+=")
        return [f"{e} {self.c(*ops)} {self.expr(t, sc, 1)}"]

    def _lit_struct(self, ty: str, sc: Scope) -> str:
        fs = ", ".join(f"{n}: {self.expr(t, sc, 2)}" for n, t in STRUCTS[ty])
        return f"{ty}({fs})"

    def s_ring(self, sc: Scope) -> list[str]:
        r = self.r
        tag = r.randrange(64)
        flag = self.c("", "", "", ", BPF_RB_NO_WAKEUP", ", BPF_RB_FORCE_WAKEUP")
        if r.random() < 0.5:
            rec = f"ev(tag: {tag}, v: {self.expr('u32', sc, 1)}, w: {self.expr('u64', sc, 1)})"
            if r.random() < 0.3:
                v = self.fresh("rc")
                sc.vars[v] = "i64"
                return [f"let {v} = ringbuf_output(events, {rec}{flag})"]
            return [f"ringbuf_output(events, {rec}{flag})"]
        v = self.fresh("r")
        leave = self.c(*(["break", "continue"] if sc.loop else []), self.leave(sc))
        out = [f"let {v} = ringbuf_reserve(events) else {{ {leave} }}",
               f"{v}.tag = {tag}", f"{v}.v = {self.expr('u32', sc, 1)}"]  # fmt: skip
        # every field: a reservation's memory is not zeroed (on the kernel it holds what an
        # earlier record left there; reproducers/ringbuf_unwritten_field.bpfd)
        out.append(f"{v}.w = {self.expr('u64', sc, 1)}")
        end = self.c("submit", "submit", "discard")
        if r.random() < 0.3:
            other = "discard" if end == "submit" else "submit"
            out += [f"if {self.cond(sc)} {{", f"    ringbuf_{end}({v}{flag})", "} else {",
                    f"    ringbuf_{other}({v})", "}"]  # fmt: skip
        else:
            out.append(f"ringbuf_{end}({v}{flag})")
        return out

    def callbacks(self) -> list[Fn]:
        """The loop callbacks the body being written may give to ``loop``."""
        return [
            f
            for f in self.fns[: self.visible]
            if f.kind == "callback"
            and f.depth <= self.max_callee
            and not (f.packet and not self.allow_packet)
            and not (f.ctx and not self.allow_ctx)
        ]

    def s_loop(self, sc: Scope) -> list[str]:
        r = self.r
        f = r.choice(self.callbacks())
        # a constant 0 is rare: the kernel refuses bpf_loop(0, ...) after a noinline call
        # ("No program to jit", fuzz/known.py), which would hide the rest of the program
        count = self.c(
            str(r.randint(1, 6)),
            str(r.randint(1, 6)),
            "0" if r.random() < 0.15 else "1",
            f"({self.expr('u32', sc, 1)} % 8)",
            f"({self.runtime('u32', sc)} & 7)",
            "knob",
        )
        out = []
        if f.state:
            s = self.fresh("st")
            out.append(f"let {s} = lst(n: {self.expr('u64', sc, 2)}, k: {self.expr('u32', sc, 2)})")
            call = f"loop({count}, {f.name}, {s})"
        else:
            s = None
            call = f"loop({count}, {f.name})"
        k = r.random()
        if k < 0.3:
            out.append(call)
        else:
            c = self.fresh("n")
            out.append(f"let {c} = {call}")
            if k < 0.5:
                out.append(f"if {c} < 0 {{ {self.leave(sc)} }}")
            else:
                out.append(f"arr[{self.key32(sc, 16)}] += {c} as u64")
            sc.vars[c] = "i64"
        if s is not None:
            sc.refs[s] = "lst"
            if r.random() < 0.6:
                out.append(f"arr[({s}.k % 16)] += {s}.n")
        return out

    def s_tail(self, sc: Scope) -> list[str]:
        slot = self.c("0", "1", "2", "3", self.key32(sc, 4), self.key32(sc, 5))
        leave = self.c(*(["break", "continue"] if sc.loop else []), self.leave(sc))
        return [f"if {self.cond(sc)} {{", f"    tail_call(jt, {slot}) else {{ {leave} }}", "}"]

    # ---- subprograms ----

    def fn_decl(self, idx: int) -> str:
        """Subprogram ``idx`` (a noinline/global fn or a loop callback) calling only
        subprograms before it."""
        r = self.r
        kind = r.choice(["noinline", "noinline", "global", "callback"])
        f = Fn(f"{'cb' if kind == 'callback' else kind[0] + 'f'}{idx}", kind)
        sc = Scope()
        pre: list[str] = []
        parses = r.random() < 0.4
        if kind == "callback":
            self.allow_packet, self.allow_ctx = True, parses
            f.ret = "bool"
            f.params = [("i", self.c("u32", "u32", "u64"))]
            sc.vars["i"] = f.params[0][1]
            sc.ro.add("i")
            f.state = r.random() < 0.7
            if f.state:
                f.params.append(("cs", "lst"))
                sc.refs["cs"] = "lst"
        else:
            if kind == "global":
                f.ret = r.choice(["i32", "i32", "u32", "u64", "i64"])
            else:
                f.ret = r.choice(["u32", "u64", "i32", "i64", "bool", ""])
            views = [v for v in VIEWS if r.random() < 0.3 and not (parses and kind == "global")]
            if "udp" in views and "tcp" in views:
                views.remove(r.choice(["udp", "tcp"]))
            if ("udp" in views or "tcp" in views) and r.random() < 0.5:
                views.append("ip")
            views = list(dict.fromkeys(views))[:3]
            room = 5 - len(views)
            if parses:  # a noinline packet fn takes the ctx and cursor first, a global the ctx
                room = min(room, (3 if kind == "noinline" else 4) - len(views))
            n = r.randint(max(0, 1 - len(views)), max(0, room))
            ps: list[tuple[str, str]] = [(v, v) for v in views]
            for _ in range(n):
                t = r.choice(PARAM_INTS + ("pair", "stats"))
                ps.append((self.fresh("a"), t))
            r.shuffle(ps)
            f.params = ps
            # from here on (the unwrapping of parameters too) calls keep to the registers
            self.allow_packet = self.allow_ctx = len(ps) <= (3 if kind == "noinline" else 4)
            sc.sub = f.ret
            for name, t in ps:
                if t in VIEWS:
                    if kind == "global":  # a global fn's pointers may be NULL
                        pre.append(f"let {t} = {t}_p else {{ {self.leave(sc)} }}")
                    sc.hdrs.add(t)
                elif t in STRUCTS:
                    if kind == "global":
                        pre.append(f"let {name}v = {name} else {{ {self.leave(sc)} }}")
                        sc.refs[name + "v"] = t
                    else:
                        sc.refs[name] = t
                else:
                    sc.vars[name] = t
        sc.sub = f.ret
        self.visible = idx
        self.max_callee = MAX_DEPTH - 1
        if kind == "callback":
            self.allow_packet, self.allow_ctx = True, parses
        else:
            self.allow_packet = self.allow_ctx = len(f.params) <= (3 if kind == "noinline" else 4)
        saved = self.depth
        self.depth = 1
        if f.ret == "":  # `return` needs a value: a fn of no result cannot leave early
            body = self.flat_block(sc, r.randint(1, 4))
            if parses:
                body = self.byte_walk(sc, "") + body
        else:
            if parses:
                pre += self.parse_start(kind, sc)
            body = pre + self.block(sc, r.randint(1, 4))
        self.depth = saved
        if f.ret == "":
            pass
        elif f.ret == "bool":
            body.append(f"return {self.cond(sc)}")
        else:
            body.append(f"return {self.expr(f.ret, sc)}")
        self.allow_packet = self.allow_ctx = True
        text = "\n".join(body)
        callees = [g for g in self.fns[:idx]
                   if g.name + "(" in text or f"{g.name})" in text or f"{g.name}," in text]  # fmt: skip
        f.depth = 1 + max((g.depth for g in callees), default=0)
        reads = parses or any(g.packet for g in callees if g.kind != "global")
        f.packet = reads and kind != "global"
        f.ctx = (reads and kind == "global") or any(g.ctx for g in callees)
        self.fns.append(f)

        def param(name: str, t: str) -> str:
            if t in VIEWS:
                return f"{t}{'_p' if kind == 'global' else ''}: {VIEWS[t]}"
            return f"{name}: {t}"

        head = "fn" if kind == "callback" else f"{kind} fn"
        ret = f" -> {f.ret}" if f.ret else ""
        sig = f"{head} {f.name}({', '.join(param(n, t) for n, t in f.params)}){ret}"
        return sig + " {\n" + "\n".join(self.ind(body)) + "\n}\n"

    def parse_start(self, kind: str, sc: Scope) -> list[str]:
        """The first statements of a fn that reads the packet: a global fn parses the frame
        from its start (Ethernet, then IPv4 when it is one), a noinline fn or a callback
        parses on from its caller's cursor (bytes, a load ahead of the cursor, a walk)."""
        r = self.r
        if kind != "global":
            return self.byte_walk(sc, self.leave(sc))
        out = [f"let eth = parse ethernet else {{ {self.leave(sc)} }}"]
        sc.hdrs.add("eth")
        if r.random() < 0.6:
            s4 = sc.child()
            s4.hdrs.add("ip")
            inner = [f"let ip = parse ipv4 else {{ {self.leave(sc)} }}"]
            inner += self.block(s4, r.randint(1, 2))
            out += ["if eth.h_proto == ETH_P_IP {", *self.ind(inner), "}"]
        return out

    def byte_walk(self, sc: Scope, leave: str) -> list[str]:
        """Reads at the cursor: ``parse byte`` (its value a local), ``load u8/be16 at cursor
        + N``, or a bounded walk of ``parse byte``; ``leave`` ("": none, a fn of no result)
        is where a short packet goes."""
        r = self.r
        k = r.random()
        if k < 0.35 and leave:
            b, v = self.fresh("pb"), self.fresh("pv")
            sc.vars[v] = "u8"
            return [f"let {b} = parse byte else {{ {leave} }}", f"let {v}: u8 = {b}.value"]
        if k < 0.7 and leave:
            v, t = self.fresh("lv"), self.c("u8", "be16", "u32")
            at = self.c("cursor", f"cursor + {r.randint(0, 40)}", str(r.randint(0, 60)))
            sc.vars[v + "h"] = "u32" if t == "u32" else ("u16" if t == "be16" else "u8")
            conv = f"host({v})" if t == "be16" else v
            return [f"let {v} = load {t} at {at} else {{ {leave} }}",
                    f"let {v}h: {sc.vars[v + 'h']} = {conv}"]  # fmt: skip
        b, i, acc = self.fresh("wb"), self.fresh("wi"), self.fresh("wa")
        sc.vars[acc] = "u32"
        return [f"let {acc}: u32 = 0",
                f"for {i} in 0..{r.randint(1, 8)} {{",
                f"    let {b} = parse byte else {{ break }}",
                f"    {acc} = {acc} * 31 + {b}.value as u32",
                "}"]  # fmt: skip

    def flat_block(self, sc: Scope, n: int) -> list[str]:
        """Statements that never leave the function (the body of a fn returning nothing)."""
        out: list[str] = []
        for _ in range(n):
            kinds = ["s_let", "s_assign", "s_count", "s_mapop", "s_sref"]
            if sc.hdrs - {"eth"}:
                kinds.append("s_write")
            if "ip" in sc.hdrs:
                kinds += ["s_flow", "s_dec"]
            k = self.r.choice(kinds)
            out += getattr(self, k)(sc)
        rec = f"ev(tag: 63, v: {self.expr('u32', sc, 1)}, w: {self.expr('u64', sc, 1)})"
        if self.r.random() < 0.4:
            out.append(f"ringbuf_output(events, {rec})")
        return out

    # ---- programs ----

    def target(self, name: str) -> str:
        """A tail call target: parse, some statements, maybe a tail call of its own."""
        r = self.r
        top = Scope()
        body = self.block(top, r.randint(0, 1))
        body.append(f"let eth = parse ethernet else {{ {self.leave(top)} }}")
        top.hdrs.add("eth")
        body += self.block(top, r.randint(0, 2))
        if r.random() < 0.6:
            s4 = top.child()
            s4.hdrs.add("ip")
            inner = [f"let ip = parse ipv4 else {{ {self.leave(top)} }}"]
            inner += self.block(s4, r.randint(1, 3))
            body += ["if eth.h_proto == ETH_P_IP {", *self.ind(inner), "}"]
        if r.random() < 0.4:
            body.append(f"tail_call(jt, {self.key32(top, 4)}) else {{ {self.leave(top)} }}")
        else:
            body.append(self.leave(top))
        return f"xdp fn {name}(ctx) {{\n" + "\n".join(self.ind(body)) + "\n}\n"

    def resize(self, top: Scope) -> list[str]:
        """A resize on every path, on one path or in a loop, then a new parse (all views of
        before are stale) and statements over the new views (subprogram calls among them)."""
        r = self.r
        call = r.choice(
            [f"adjust_tail(-{r.randint(0, 16)})", f"adjust_tail({r.randint(1, 64)})",
             f"adjust_head({r.choice([-8, -4, 4, 14])})", f"adjust_meta(-{r.choice([4, 8])})"]
        )  # fmt: skip
        k = r.random()
        cond = self.cond(top)
        top.hdrs.clear()
        if k < 0.5:
            out = [f"if {call} != 0 {{ {self.leave(top)} }}"]
        elif k < 0.8:
            out = [f"if {cond} {{", f"    if {call} != 0 {{ {self.leave(top)} }}", "}"]
        else:
            out = [f"for rz in 0..{r.randint(1, 3)} {{", f"    if {call} != 0 {{ break }}", "}"]
        out.append(f"let eth = parse ethernet else {{ {self.leave(top)} }}")
        top.hdrs.add("eth")
        out += self.block(top, r.randint(0, 2))
        if r.random() < 0.7:
            s4 = top.child()
            s4.hdrs.add("ip")
            inner = [f"let ip = parse ipv4 else {{ {self.leave(top)} }}"]
            inner += self.block(s4, r.randint(0, 2))
            inner += self.l4(s4, "ip.protocol", False)
            out += ["if eth.h_proto == ETH_P_IP {", *self.ind(inner), "}"]
        return out

    def program(self) -> str:
        r = self.r
        decls = []
        nfns = r.randint(2, 6)
        for idx in range(nfns):
            decls.append(self.fn_decl(idx))
        self.visible = len(self.fns)
        self.max_callee = MAX_DEPTH
        self.tails = r.random() < 0.5
        targets = []
        if self.tails:
            names = [f"t{j}" for j in range(r.randint(1, 2))]
            slots = {0: names[0]}
            if len(names) > 1:
                slots[1] = names[1]
            if r.random() < 0.4:
                slots[2] = "fuzz"  # itself: 33 tail calls, then the else block
            for n in names:
                targets.append(self.target(n))
            init = ", ".join(f"{k}: {v}" for k, v in slots.items())
            decls.insert(0, f"map jt: prog_array(max_entries: 4) = {{ {init} }}\n")
        top = Scope()
        body: list[str] = []
        body += self.block(top, r.randint(0, 2))
        body.append(f"let eth = parse ethernet else {{ {self.leave(top)} }}")
        top.hdrs.add("eth")
        body += self.block(top, r.randint(0, 2))
        s4 = top.child()
        s4.hdrs.add("ip")
        v4 = [f"let ip = parse ipv4 else {{ {self.leave(top)} }}"]
        v4 += self.block(s4, r.randint(0, 3))
        v4 += self.l4(s4, "ip.protocol", False)
        v4 += self.block(s4, r.randint(0, 2))
        s6 = top.child()
        s6.hdrs.add("ip6")
        v6 = [f"let ip6 = parse ipv6 else {{ {self.leave(top)} }}"]
        v6 += self.l4(s6, "ip6.nexthdr", True)
        v6 += self.block(s6, r.randint(0, 2))
        body += ["if eth.h_proto == ETH_P_IP {", *self.ind(v4),
                 "} else if eth.h_proto == ETH_P_IPV6 {", *self.ind(v6), "}"]  # fmt: skip
        if r.random() < 0.45:
            body += self.resize(top)
        body += self.block(top, r.randint(0, 2))
        if self.tails and r.random() < 0.5:
            body.append(f"tail_call(jt, {self.key32(top, 4)}) else {{ {self.leave(top)} }}")
        else:
            body.append(self.leave(top))
        return (HEADER + DECLS + "\n".join(decls) + "xdp fn fuzz(ctx) {\n"
                + "\n".join(self.ind(body)) + "\n}\n" + "".join(targets))  # fmt: skip


def cases(seed: int, count: int, kernel: bool):
    """``count`` programs from ``seed``; payload (source, frames, ISA level) as
    :func:`fuzz.programs.cases`."""
    rng = random.Random(seed)
    fr = frames(seed)
    for i in range(count):
        src = SubGen(random.Random(rng.getrandbits(64))).program()
        mcpu = rng.choice(MCPUS)
        yield Case((src, fr, mcpu), f"program {i} (--mcpu {mcpu})")


def shrink(payload, fails, deadline: float):
    """Fewer frames, then fewer lines after the common header (fns and programs alike)."""
    src, pkts, mcpu = payload
    pkts = ddmin(pkts, lambda ps: fails((src, ps, mcpu)), deadline=deadline)
    head = HEADER + DECLS
    lines = src[len(head) :].rstrip("\n").split("\n")

    def text(ls: list[str]) -> str:
        return head + "\n".join(ls) + "\n"

    lines = ddmin(lines, lambda ls: fails((text(ls), pkts, mcpu)), budget=300, deadline=deadline)
    return (text(lines), pkts, mcpu)


FUZZER = Fuzzer("subprograms", cases, run_case, reproducer, shrink, timeout=120.0)
