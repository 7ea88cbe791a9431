"""Source mutator: progs/*.bpfd and the docs' ```bpfd examples, mutated at token and at
statement/block level, through the compiler (``compile_file``: parser, sema, codegen,
LLVM, checker).  Every outcome must be an object or a located diagnostic (file:line:col
inside the file, a stable code, a rendering with the line and a caret); as root, every
object the compiler accepts must load in the kernel (BPF_PROG_LOAD through the loader),
except the verifier's documented complexity limit (docs/language.md, "Control flow").

Mutations: token deletion, duplication, swaps, replacement and insertion from the corpus'
vocabulary; literal edge values (0, 2^n +- 1, 2^64, malformed numbers and addresses);
long identifiers; deep nesting of blocks and parentheses; statement/line and block
deletion, duplication, swaps and splices from another program; truncation; program-kind,
type and operator swaps; odd Unicode (NUL, form feed, U+2028, BOM inside) and bad UTF-8.
"""

from __future__ import annotations

import os
import random
import re
import tempfile

from .harness import DOCS, PROGS, Case, Fuzzer, Result, ddmin

# ---- the corpus ----------------------------------------------------------------------

FENCE = re.compile(r"^```bpfd(?P<info>[^\n]*)\n(?P<body>.*?)^```", re.M | re.S)  # as test_docs


def corpus() -> list[tuple[str, str]]:
    """(label, text) of every progs/*.bpfd file and every ```bpfd block of docs/*.md."""
    out = [(f"progs/{p.name}", p.read_text()) for p in sorted(PROGS.glob("*.bpfd"))]
    for md in sorted(DOCS.glob("*.md")):
        text = md.read_text()
        for m in FENCE.finditer(text):
            out.append((f"docs/{md.name}:{text.count(chr(10), 0, m.start()) + 1}", m["body"]))
    return out


TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<comment>//[^\n]*|/\*.*?\*/)
    |(?P<string>"(?:[^"\\\n]|\\.)*")
    |(?P<addr>[0-9a-fA-F:]*::[0-9a-fA-F:.]*(?:/\d+)?|\d{1,3}(?:\.\d{1,3}){3}(?:/\d+)?
       |[0-9a-fA-F]{2}(?::[0-9a-fA-F]{2}){5})
    |(?P<num>0[xX][0-9a-fA-F_]+|0[bB][01_]+|\d[\d_]*)
    |(?P<name>[A-Za-z_]\w*)
    |(?P<op>\.\.|=>|->|==|!=|<=|>=|&&|\|\||<<=|>>=|<<|>>|\+=|-=|\*=|\|=|&=|\^=|.)""",
    re.S | re.X,
)


def tokens(text: str) -> list[tuple[str, str]]:
    """Lossless (kind, text) tokens: ``"".join(t for _k, t in tokens(s)) == s``."""
    return [(m.lastgroup, m.group()) for m in TOKEN.finditer(text)]


EDGE_NUMBERS = [
    "0", "1", "7", "127", "128", "255", "256", "32767", "32768", "65535", "65536",
    "0x7fffffff", "0x80000000", "0xffffffff", "0x100000000", "4294967295", "4294967296",
    "0x7fffffffffffffff", "0x8000000000000000", "0xffffffffffffffff", "18446744073709551615",
    "18446744073709551616", "0x1_0000_0000_0000_0000", "1" + "0" * 40, "9" * 400,
    "0b1", "0b" + "1" * 64, "0b" + "1" * 65, "0x0", "00", "007", "1_000", "0xff_ff",
    "0x", "0b", "0b2", "0xg", "1__0", "0x_", "0b_", "12ab", "1.5", "1e9", "-0",
]  # fmt: skip
EDGE_ADDRS = [
    "0.0.0.0", "255.255.255.255", "256.0.0.1", "1.2.3.4/0", "1.2.3.4/32", "1.2.3.4/33",
    "10.0.0.0/99", "::", "::/0", "::/128", "::/129", "ffff::ffff/200", "1::2::3",
    "::ffff:1.2.3.4", "::ffff:300.1.1.1", "1:2:3:4:5:6:7:8", "1:2:3:4:5:6:7:8:9",
    "00:00:00:00:00:00", "ff:ff:ff:ff:ff:ff", "ff:ff:ff:ff:ff", "gg:00:00:00:00:00",
]  # fmt: skip
KINDS = [
    "xdp", "xdp(frags)", "xdp(cpumap)", "xdp(devmap)", "sk_msg", "sock_ops", "xdp(bogus)",
    "tc", "xdp()", "fn", "kprobe",
]  # fmt: skip
TYPES = [
    "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64", "bool", "be16", "be32", "be64",
    "ipv4_prefix", "ipv6_prefix", "ipv6_addr", "mac_addr", "[u8; 4]", "[u64; 0]",
    "[u32; 100000]", "ethernet", "ipv4", "void", "u128", "flow",
]  # fmt: skip
OPS = ["+", "-", "*", "/", "%", "&", "|", "^", "<<", ">>", "==", "!=", "<", ">", "<=",
       ">=", "&&", "||", "!", "~", "=", "+=", "-=", "<<=", "..", "=>", "->", "in", "as"]  # fmt: skip
ODD_TEXT = ["\t", "\r", "\r\n", "\x0c", "\x0b", "\x00", "\u2028", "\u00a0", "\ufeff",
            "\u202e", "é", "\u0301", "１２", "😀", "\x1b[31m", "\\", '"', "'", "`", "#",
            "/*", "*/", "//", "@", "$"]  # fmt: skip
BAD_UTF8 = [b"\xff", b"\xfe\xff", b"\xc3", b"\xc0\xaf", b"\xed\xa0\x80", b"\xf4\x90\x80\x80",
            b"\x80", b"\xe2\x82", b"\xf0\x9f\x98"]  # fmt: skip
NEST_DEPTHS = [8, 64, 256, 499, 500, 501, 1000, 3000]
ID_LENGTHS = [16, 63, 64, 255, 256, 1023, 1024, 1025, 4096]


def _sig(toks) -> list[int]:
    return [i for i, (k, _t) in enumerate(toks) if k not in ("ws", "comment")]


def _blocks(toks) -> list[tuple[int, int]]:
    """(open, close) index pairs of matching braces."""
    out, stack = [], []
    for i, (_k, t) in enumerate(toks):
        if t == "{":
            stack.append(i)
        elif t == "}" and stack:
            out.append((stack.pop(), i))
    return out


class Mutator:
    """Applies random mutations; each method takes and returns the token list."""

    def __init__(self, rng: random.Random, texts: list[str]):
        self.r = rng
        self.texts = texts
        self.vocab = sorted({t for s in texts for k, t in tokens(s) if k not in ("ws", "comment")})

    def pick_sig(self, toks, kinds=None):
        idx = [i for i in _sig(toks) if kinds is None or toks[i][0] in kinds]
        return self.r.choice(idx) if idx else None

    # token level
    def delete(self, toks):
        i = self.pick_sig(toks)
        return toks if i is None else toks[:i] + toks[i + 1 :]

    def duplicate(self, toks):
        i = self.pick_sig(toks)
        return toks if i is None else toks[: i + 1] + [("ws", " "), toks[i]] + toks[i + 1 :]

    def swap_adjacent(self, toks):
        s = _sig(toks)
        if len(s) < 2:
            return toks
        j = self.r.randrange(len(s) - 1)
        a, b = s[j], s[j + 1]
        toks = list(toks)
        toks[a], toks[b] = toks[b], toks[a]
        return toks

    def swap_any(self, toks):
        s = _sig(toks)
        if len(s) < 2:
            return toks
        a, b = self.r.sample(s, 2)
        toks = list(toks)
        toks[a], toks[b] = toks[b], toks[a]
        return toks

    def replace(self, toks):
        i = self.pick_sig(toks)
        if i is None:
            return toks
        return toks[:i] + [("name", self.r.choice(self.vocab))] + toks[i + 1 :]

    def insert(self, toks):
        i = self.r.randrange(len(toks) + 1)
        return toks[:i] + [("ws", " "), ("name", self.r.choice(self.vocab)), ("ws", " ")] + toks[i:]

    def edge_literal(self, toks):
        i = self.pick_sig(toks, ("num", "addr"))
        if i is None:
            return toks
        pool = EDGE_NUMBERS if toks[i][0] == "num" or self.r.random() < 0.3 else EDGE_ADDRS
        return toks[:i] + [("num", self.r.choice(pool))] + toks[i + 1 :]

    def long_identifier(self, toks):
        i = self.pick_sig(toks, ("name",))
        if i is None:
            return toks
        n = self.r.choice(ID_LENGTHS)
        old = toks[i][1]
        new = (old * (n // len(old) + 1))[:n]
        if self.r.random() < 0.5:  # rename every use: the program stays consistent
            return [(k, new if t == old else t) for k, t in toks]
        return toks[:i] + [("name", new)] + toks[i + 1 :]

    def deep_nesting(self, toks):
        k = self.r.choice(NEST_DEPTHS)
        if self.r.random() < 0.5:  # parentheses around an operand
            i = self.pick_sig(toks, ("num", "name", "addr"))
            if i is None:
                return toks
            return toks[:i] + [("op", "(" * k), toks[i], ("op", ")" * k)] + toks[i + 1 :]
        blocks = [b for b in _blocks(toks) if b[0] > 0]
        if not blocks:
            return toks
        o, c = self.r.choice(blocks)
        head = self.r.choice(["if true {", "if ctx.len > 0 {", "for i in 0..2 {", "{"])
        return (toks[: o + 1] + [("op", ("\n" + head) * k)] + toks[o + 1 : c]
                + [("op", "\n}" * k)] + toks[c:])  # fmt: skip

    def truncate(self, toks):
        return toks[: self.r.randrange(len(toks) + 1)]

    def program_kind(self, toks):
        s = [i for i in _sig(toks) if toks[i][1] in ("xdp", "sk_msg", "sock_ops")]
        if not s:
            return toks
        i = self.r.choice(s)
        j = i + 1
        if j + 1 < len(toks) and toks[j][1] == "(":  # drop an existing variant "(...)"
            while j < len(toks) and toks[j][1] != ")":
                j += 1
            j += 1
        return toks[:i] + [("name", self.r.choice(KINDS))] + toks[j:]

    def type_swap(self, toks):
        names = set(TYPES)
        i = self.pick_sig(toks)
        s = [j for j in _sig(toks) if toks[j][1] in names]
        if s:
            i = self.r.choice(s)
        if i is None:
            return toks
        return toks[:i] + [("name", self.r.choice(TYPES))] + toks[i + 1 :]

    def op_swap(self, toks):
        i = self.pick_sig(toks, ("op",))
        if i is None:
            return toks
        return toks[:i] + [("op", self.r.choice(OPS))] + toks[i + 1 :]

    def odd_text(self, toks):
        i = self.r.randrange(len(toks) + 1)
        return toks[:i] + [("ws", self.r.choice(ODD_TEXT))] + toks[i:]

    def bad_utf8(self, toks):
        i = self.r.randrange(len(toks) + 1)
        bad = self.r.choice(BAD_UTF8).decode("utf-8", "surrogateescape")
        return toks[:i] + [("ws", bad)] + toks[i:]

    # statement / block level
    def _lines(self, toks) -> list[str]:
        return "".join(t for _k, t in toks).split("\n")

    def _from_lines(self, lines: list[str]):
        return tokens("\n".join(lines))

    def line_op(self, toks):
        lines = self._lines(toks)
        if len(lines) < 2:
            return toks
        i, j = self.r.randrange(len(lines)), self.r.randrange(len(lines))
        op = self.r.choice(["delete", "duplicate", "swap", "move", "repeat"])
        if op == "delete":
            del lines[i]
        elif op == "duplicate":
            lines.insert(i, lines[i])
        elif op == "swap":
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "move":
            lines.insert(j, lines.pop(i))
        else:
            lines[i:i] = [lines[i]] * self.r.choice([10, 100, 2000])
        return self._from_lines(lines)

    def block_op(self, toks):
        blocks = _blocks(toks)
        if not blocks:
            return toks
        o, c = self.r.choice(blocks)
        op = self.r.choice(["delete", "empty", "duplicate", "swap"])
        if op == "delete":
            return toks[:o] + toks[c + 1 :]
        if op == "empty":
            return toks[: o + 1] + toks[c:]
        if op == "duplicate":
            return toks[: c + 1] + [("ws", "\n")] + toks[o : c + 1] + toks[c + 1 :]
        o2, c2 = self.r.choice(blocks)
        if o2 > c or c2 < o:  # disjoint: exchange the two bodies
            (a, b), (x, y) = sorted([(o, c), (o2, c2)])
            return toks[:a] + toks[x : y + 1] + toks[b + 1 : x] + toks[a : b + 1] + toks[y + 1 :]
        return toks

    def splice(self, toks):
        other = self._lines(tokens(self.r.choice(self.texts)))
        lines = self._lines(toks)
        a = self.r.randrange(len(other))
        b = min(len(other), a + self.r.randint(1, 6))
        i = self.r.randrange(len(lines) + 1)
        return self._from_lines(lines[:i] + other[a:b] + lines[i:])

    def whole(self, toks):
        text = "".join(t for _k, t in toks)
        op = self.r.choice(["twice", "empty", "license-only", "no-license", "blank"])
        if op == "twice":
            return tokens(text + "\n" + text)
        if op == "empty":
            return []
        if op == "license-only":
            return tokens('license "GPL"\n')
        if op == "blank":
            return tokens(" \n\t\n" * 3)
        return tokens(re.sub(r'license\s+"[^"]*"', "", text))

    WEIGHTS = {
        "delete": 8, "duplicate": 4, "swap_adjacent": 4, "swap_any": 3, "replace": 8,
        "insert": 5, "edge_literal": 8, "long_identifier": 3, "deep_nesting": 3,
        "truncate": 3, "program_kind": 3, "type_swap": 5, "op_swap": 5, "odd_text": 3,
        "bad_utf8": 2, "line_op": 8, "block_op": 6, "splice": 5, "whole": 1,
    }  # fmt: skip

    def mutate(self, text: str) -> tuple[str, list[str]]:
        toks = tokens(text)
        names = list(self.WEIGHTS)
        ops = self.r.choices(
            names, weights=[self.WEIGHTS[n] for n in names], k=self.r.choice((1, 1, 2, 3))
        )
        for op in ops:
            toks = getattr(self, op)(toks)
        return "".join(t for _k, t in toks), ops


def cases(seed: int, count: int, kernel: bool):
    """``count`` mutants from ``seed``: payload (text, load_in_kernel)."""
    rng = random.Random(seed)
    base = corpus()
    mut = Mutator(rng, [t for _l, t in base])
    for i in range(count):
        label, text = rng.choice(base)
        src, ops = mut.mutate(text)
        yield Case((src, kernel), f"{label} + {', '.join(ops)} (mutant {i})")


# ---- running one ---------------------------------------------------------------------

CODE = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
COMPLEXITY = re.compile(r"program is too large|too complex|jumps is too complex|insn_processed")
_TMP: list[str] = []


def _workdir() -> str:
    if not _TMP or not os.path.isdir(_TMP[0]):
        _TMP[:] = [tempfile.mkdtemp(prefix="bpfdsl-fuzz-src-")]
    return _TMP[0]


def _too_large(text: str) -> bool:
    from .api import MAX_SOURCE_BYTES

    """A mutant grown past the compiler's source size limit (long_identifier on a long
    example): refusing the whole file, without a line, is the right outcome for it."""
    return len(text.encode("utf-8", "surrogateescape")) > MAX_SOURCE_BYTES


def check_diagnostics(err, path: str, text: str) -> Result:
    """``diagnostic`` when every error of ``err`` names ``path``:line:col inside ``text``
    and renders with that line and a caret; else the failure it is."""
    # compile_file reads lines as editors do (bpfdsl.compiler.read_source: CR LF and a lone
    # CR end a line, bpfdsl.diagnostics.universal_newlines)
    from .api import universal_newlines

    lines = universal_newlines(text).split("\n")
    for d in err.diagnostics:
        if not d.code or not CODE.fullmatch(d.code):
            return Result("unlocated", f"diagnostic without a stable code: {d.code!r}", d.concise())
        if d.severity != "error":
            continue
        if d.span is None:
            if d.code == "source-too-large" and _too_large(text):
                return Result("diagnostic", d.code)  # about the whole file: right here
            return Result("unlocated", d.code, d.concise())
        sp = d.span
        if sp.file != path:
            return Result("bad-location", f"{d.code}: names file {sp.file!r}", d.concise())
        if not 1 <= sp.line <= len(lines) or not 1 <= sp.col <= len(lines[sp.line - 1]) + 1:
            return Result("bad-location", f"{d.code}: line:col outside the file", d.concise())
    try:
        shown = err.render()
    except Exception as e:
        from .harness import exception_result

        r = exception_result(e)
        return Result("traceback", f"rendering: {r.detail}", r.text)
    for d in err.diagnostics:
        if d.severity == "error":
            # as the renderer shows it: a byte that is not UTF-8 as U+FFFD
            raw = lines[d.span.line - 1].encode("utf-8", "surrogateescape")
            want = raw.decode("utf-8", "replace").expandtabs(1)
            if f"{d.span.line} | {want}" not in shown.split("\n"):
                return Result(
                    "bad-location",
                    "the rendering shows another line than the one named",
                    f"line {d.span.line} is {want!r}\n{shown[:2000]}",
                )
            break
    return Result("diagnostic", err.diagnostics[0].code)


def load_result(obj: bytes) -> Result | None:
    """None when the kernel loads ``obj``; else ``complexity-limit`` (the documented
    verifier budget) or a ``kernel-rejected`` failure naming the kernel's reason."""
    from .api import DiagnosticError, load_collection, needs_dev_bound, read_object

    try:
        spec = read_object(obj)
        # pinning=False: the kernel's verdict is the question; a LIBBPF_PIN_BY_NAME map
        # would stay pinned on bpffs after the load, as libbpf leaves it (a leak here)
        if any(needs_dev_bound(p) for p in spec.programs.values()):
            # a device-bound program (metadata kfuncs) loads for a device: a veth here
            from support.netns import veth_here

            with veth_here("fz") as ifindex, load_collection(spec, pinning=False, ifindex=ifindex):
                return None
        with load_collection(spec, pinning=False):
            return None
    except DiagnosticError as e:
        log = getattr(e, "log", "") or ""
        if COMPLEXITY.search(str(e)) or COMPLEXITY.search(log):
            return Result("complexity-limit", "verifier budget", str(e))
        d = e.diagnostics[0]
        why = re.sub(r"\d+", "N", d.message.split(": ", 2)[-1])
        why = re.sub(r"\w{33,}", "…", why)[:100]  # a long name is not part of the kind
        return Result("kernel-rejected", f"{d.code}: {why}", e.render() + "\n" + log[-3000:])


def run_case(payload: tuple[str, bool]) -> Result:
    from .api import DiagnosticError, compile_file

    text, kernel = payload
    path = os.path.join(_workdir(), "mutant.bpfd")
    with open(path, "wb") as f:
        f.write(text.encode("utf-8", "surrogateescape"))
    try:
        res = compile_file(path)
    except DiagnosticError as e:
        decoded = text[1:] if text.startswith("\ufeff") else text
        return check_diagnostics(e, path, decoded)
    if kernel:
        bad = load_result(res.obj)
        if bad is not None:
            return bad
    return Result("ok")


def reproducer(payload: tuple[str, bool]) -> str:
    text, kernel = payload
    shown = text if len(text) <= 3000 else text[:1500] + "\n[...]\n" + text[-1500:]
    raw = text.encode("utf-8", "surrogateescape")
    note = "" if raw.decode("utf-8", "replace") == text else f"(bytes: {raw[:200]!r})\n"
    how = "bpfdsl compile mutant.bpfd" + (" && bpfdsl load mutant.o" if kernel else "")
    return f"{how}   # mutant.bpfd ({len(raw)} bytes):\n{note}{shown}"


def shrink(payload, fails, deadline: float):
    """Fewer lines, then fewer tokens, keeping the failure."""
    text, kernel = payload

    def by_lines(ls):
        return fails(("\n".join(ls), kernel))

    lines = ddmin(text.split("\n"), by_lines, deadline=deadline)
    toks = [t for _k, t in tokens("\n".join(lines))]
    toks = ddmin(toks, lambda ts: fails(("".join(ts), kernel)), deadline=deadline)
    return ("".join(toks), kernel)


FUZZER = Fuzzer("sources", cases, run_case, reproducer, shrink, timeout=60.0)


def source_of(label: str) -> str:
    """The corpus text labelled ``label`` (``progs/x.bpfd`` or ``docs/f.md:LINE``)."""
    for lab, text in corpus():
        if lab == label:
            return text
    raise KeyError(label)


__all__ = ["FUZZER", "Mutator", "corpus", "check_diagnostics", "load_result", "source_of"]
