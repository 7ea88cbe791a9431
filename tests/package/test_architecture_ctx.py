"""bpfdsl/abi/ctx.py is the only place that lays out a program context struct (#26).

Read from the source with ``ast``: outside ``bpfdsl/abi/`` no module may hold

(a) a context member's name next to a number in one tuple, list or dict entry
    (``"rx_queue_index": (16, 4)``, ``("remote_ip4", 20, 4)``, ``{16: "rx_queue_index"}``);
(b) six or more member names of one context struct in their declaration order, as one
    space-separated string or a tuple/list of strings (``"u32 data data_end data_meta
    ingress_ifindex ..."``, the bpf_sock_ops u32 run);
(c) a ``struct`` format string the size of a context struct (``"<6I"``: xdp_md's 24 bytes)
    in a module that names that struct.

Generic member names that mean other things too (``data``, ``size``, ``sk``, ``op``...) count
for (b) but not for (a).  Each rule also runs on a small package the test writes, so each
can fail.
"""

from __future__ import annotations

import ast
import re
import struct
from pathlib import Path

from support.paths import ROOT

from bpfdsl.abi.ctx import CTX_STRUCTS

PACKAGE = ROOT / "bpfdsl"
GENERIC = {"data", "data_end", "size", "sk", "op", "state", "family", "args", "reply", "len"}
# a struct format with a byte order or a leading count ("<6I", "6I"), not a word ("bpfel")
_FORMAT = re.compile(r"^([<>=!@]|\d)(\d*[xcbB?hHiIlLqQnNefdspP])+$")


def _names() -> dict[str, list[str]]:
    return {s.name: [f.name for f in s.fields] for s in CTX_STRUCTS.values()}


def _str(n: ast.AST) -> str | None:
    return n.value if isinstance(n, ast.Constant) and isinstance(n.value, str) else None


def _num(n: ast.AST) -> bool:
    if isinstance(n, ast.Tuple | ast.List):
        return any(_num(e) for e in n.elts)
    return isinstance(n, ast.Constant) and type(n.value) is int


def _in_order(words: list[str], order: list[str], at_least: int = 6) -> bool:
    """``words`` hold ``at_least`` members of ``order`` in their declaration order."""
    pos = [order.index(w) for w in words if w in order]
    run = 1
    for a, b in zip(pos, pos[1:], strict=False):
        run = run + 1 if b > a else 1
        if run >= at_least:
            return True
    return False


def violations(root: Path) -> list[str]:
    """``path:line: rule: what`` for each layout found under ``root`` outside ``abi/``."""
    names = _names()
    distinct = {n for ns in names.values() for n in ns} - GENERIC
    sizes = {s.size: s.name for s in CTX_STRUCTS.values()}
    out = []
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root)
        if rel.parts[0] == "abi":
            continue
        text = p.read_text()
        tree = ast.parse(text, str(p))
        for n in ast.walk(tree):
            where = f"{rel}:{getattr(n, 'lineno', 0)}"
            if isinstance(n, ast.Tuple | ast.List):
                strs = [_str(e) for e in n.elts]
                if any(s in distinct for s in strs) and any(_num(e) for e in n.elts):
                    out.append(f"{where}: (a) {ast.unparse(n)[:60]}")
                words = [s for s in strs if s is not None]
                if any(_in_order(words, order) for order in names.values()):
                    out.append(f"{where}: (b) {ast.unparse(n)[:60]}")
            elif isinstance(n, ast.Dict):
                for k, v in zip(n.keys, n.values, strict=True):
                    if k is None:
                        continue
                    if (_str(k) in distinct and _num(v)) or (_num(k) and _str(v) in distinct):
                        out.append(f"{where}: (a) {ast.unparse(k)}: {ast.unparse(v)[:40]}")
            elif (s := _str(n)) is not None:
                words = re.split(r"[\s;]+", s.strip())
                if all(w.isidentifier() for w in words) and any(
                    _in_order(words, order) for order in names.values()
                ):
                    out.append(f"{where}: (b) {s[:60]!r}")
                if _FORMAT.match(s) and not s.isdigit():
                    try:
                        n_bytes = struct.calcsize(s)
                    except struct.error:
                        continue
                    ctx = sizes.get(n_bytes)
                    if ctx is not None and ctx in text:
                        out.append(f"{where}: (c) {s!r} is sizeof(struct {ctx})")
    return out


def test_no_context_layout_outside_abi() -> None:
    assert violations(PACKAGE) == []


def test_each_rule_finds_its_layout(tmp_path: Path) -> None:
    pkg = tmp_path / "bpfdsl"
    (pkg / "abi").mkdir(parents=True)
    (pkg / "abi" / "ctx.py").write_text('T = {"rx_queue_index": (16, 4)}\n')  # allowed here
    (pkg / "a.py").write_text(
        'F = {"rx_queue_index": (16, 4, "u32")}\nG = {20: "egress_ifindex"}\n'
    )
    (pkg / "b.py").write_text('S = ("remote_ip4", 20, 4)\n')
    (pkg / "c.py").write_text(
        'X = "u32 data data_end data_meta ingress_ifindex rx_queue_index egress_ifindex"\n'
        'Y = ("is_fullsock", "snd_cwnd", "srtt_us", "bpf_sock_ops_cb_flags", "state", "rtt_min")\n'
    )
    (pkg / "d.py").write_text('import struct\nXDP_MD = struct.Struct("<6I")  # xdp_md\n')
    (pkg / "ok.py").write_text(
        'HELP = "xdp_md ingress_ifindex, rx_queue_index"\nN = ("family", "remote_ip4")\n'
        'FORMS = {"remote_port": "port_be"}\nH = "<4I"\n'
    )
    (pkg / "ok2.py").write_text('import struct\nS = struct.Struct("<6I")  # 24 bytes, no context\n')
    got = violations(pkg)
    rules = sorted((line.split(":")[0], line.split(": ")[1][:3]) for line in got)
    assert rules == [
        ("a.py", "(a)"),
        ("a.py", "(a)"),
        ("b.py", "(a)"),
        ("c.py", "(b)"),
        ("c.py", "(b)"),
        ("d.py", "(c)"),
    ], got
