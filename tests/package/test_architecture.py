"""The import graph of the package follows docs/ARCHITECTURE.md: read from the source with
``ast`` (every import: module level, ``if TYPE_CHECKING:`` and function level alike).

(a) no import cycle between modules; (b) no import against the package order (a package
imports only the packages it lists in :data:`MAY_IMPORT`); (c) no import inside a function
or class outside ``bpfdsl/cli/`` and ``bpfdsl/__init__.py``, and no ``importlib`` /
``__import__`` there either (an import the graph cannot see); (d) outside ``bpfdsl/kernel/``
no system calls for bpf: no C library opened with ctypes, no libc handle called, no netlink
socket.  Each rule is also run on a small package written by the test, so each can fail.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from support.paths import ROOT

PACKAGE = ROOT / "bpfdsl"

# Layer of each module: the first component under bpfdsl (bpfdsl/__init__.py is "api").
BASE = {"record", "diagnostics"}
MAY_IMPORT: dict[str, set[str]] = {
    "record": set(),
    "diagnostics": {"record"},
    "abi": BASE,
    "lang": BASE | {"abi"},
    "obj": BASE | {"abi"},
    # backend may read objects too (obj/elf.py for the object it emits: part "dedup" of #16)
    "backend": BASE | {"abi", "lang", "obj"},
    "checker": BASE | {"abi", "obj"},
    "interp": BASE | {"abi", "obj"},
    "compiler": BASE | {"abi", "lang", "backend", "obj", "checker"},
    "kernel": BASE | {"abi"},
    "runtime": BASE | {"abi", "obj", "checker", "interp", "compiler", "kernel"},
    # bench: the library of `bpfdsl bench`, a user of runtime (below cli only)
    "bench": BASE | {"abi", "obj", "kernel", "runtime"},
    # deploy: bytecode images and cluster resources, a stage after obj (#15)
    "deploy": BASE | {"abi", "obj", "compiler"},
    "testing": BASE
    | {"abi", "lang", "backend", "obj", "checker", "interp", "compiler"}
    | {"kernel", "runtime"},
    "cli": BASE
    | {"abi", "lang", "backend", "obj", "checker", "interp", "compiler", "kernel"}
    | {"runtime", "bench", "testing", "api", "deploy"},
    "api": BASE
    | {"abi", "lang", "backend", "obj", "checker", "interp", "compiler", "kernel"}
    | {"runtime"},
}


# Function-level imports allowed elsewhere, by (module, top-level package imported): heavy
# third-party fallbacks imported at their one point of use, and start-up shortcuts another
# part of #16 is removing.  No bpfdsl module is ever imported this way outside the CLI.
DEFERRED: dict[tuple[str, str], str] = {
    ("bpfdsl.backend.target", "llvmlite"): "llvmlite.binding: the fallback LLVM binding, "
    "chosen per call (BPFDSL_LLVM=llvmlite, an llvmlite version llvm_c is not declared for)",
    ("bpfdsl.kernel.netlink", "pyroute2"): "rtnetlink via pyroute2: XDP over netlink and "
    "veths; attaching through a BPF link never needs it",
    ("bpfdsl.runtime.packets", "scapy"): "captures and frame summaries only",
    ("bpfdsl.runtime.events", "numpy"): "RecordBatch.array() only: numpy is optional (not a "
    "dependency); rows, JSON lines and Event objects need none",
    ("bpfdsl.runtime.xsk", "numpy"): "XskSocket.l2fwd's MAC swap only: numpy is optional "
    "(without it the swap goes frame by frame)",
    ("bpfdsl.testing.pytest_plugin", "scapy"): "BpfResult.packet only; the plugin is loaded "
    "by every pytest process (entry point pytest11)",
}

# System-call sites outside bpfdsl/kernel allowed, by (module, what): see _syscall_sites.
SYSCALLS_OK: dict[tuple[str, str], str] = {
    ("bpfdsl.backend.llvm_c", "CDLL"): "libllvmlite.so (LLVM), not libc: no system call",
    # calls through bpfdsl.kernel.libc (the one libc handle lives in kernel/)
    **{("bpfdsl.runtime.xsk", what): "kernel.libc" for what in ("CDLL", "libc")},
    **{("bpfdsl.runtime.cgroup", what): "kernel.libc" for what in ("CDLL", "libc")},
    ("bpfdsl.runtime.bpffs", "libc"): "kernel.libc",
}


class Import:
    """One import statement's edge: ``src`` module imports ``dst`` (a module name as
    written, resolved to a module of the package when it is one) at ``line``; ``lazy``
    when the statement is inside a function or class body."""

    def __init__(self, src: str, dst: str, line: int, lazy: bool) -> None:
        self.src, self.dst, self.line, self.lazy = src, dst, line, lazy

    def __repr__(self) -> str:
        return f"{self.src}:{self.line} -> {self.dst}{' (lazy)' if self.lazy else ''}"


def modules(root: Path) -> dict[str, Path]:
    """Module name -> file for every ``.py`` under ``root`` (a package directory named
    ``bpfdsl``: the package, or one a test writes)."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = [root.name, *p.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = p
    return out


def _module_level(body: list[ast.stmt]) -> set[int]:
    """ids of the import statements run at import time of the module: its top level and
    module-level ``if``/``try`` blocks (``if TYPE_CHECKING:`` included)."""
    out: set[int] = set()
    for n in body:
        if isinstance(n, ast.Import | ast.ImportFrom):
            out.add(id(n))
        elif isinstance(n, ast.If | ast.Try):
            blocks = [n.body, n.orelse, getattr(n, "finalbody", [])]
            blocks += [h.body for h in getattr(n, "handlers", [])]
            for b in blocks:
                out |= _module_level(b)
    return out


def imports(root: Path) -> tuple[dict[str, Path], list[Import], dict[str, ast.Module]]:
    """(modules, every import of the package, syntax trees).  ``from P import N`` is an edge
    to ``P.N`` when that is a module, else to ``P``; relative imports are resolved."""
    mods = modules(root)
    trees = {m: ast.parse(p.read_text(), str(p)) for m, p in mods.items()}
    out = []
    for m, tree in trees.items():
        top = _module_level(tree.body)
        is_pkg = mods[m].name == "__init__.py"
        for n in ast.walk(tree):
            if isinstance(n, ast.Import):
                targets = [a.name for a in n.names]
            elif isinstance(n, ast.ImportFrom):
                base = n.module or ""
                if n.level:
                    pkg = m.split(".") if is_pkg else m.split(".")[:-1]
                    pkg = pkg[: len(pkg) - (n.level - 1)]
                    base = ".".join(pkg + ([n.module] if n.module else []))
                targets = [
                    f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in n.names
                ]
            else:
                continue
            for t in dict.fromkeys(targets):
                out.append(Import(m, t, n.lineno, id(n) not in top))
    return mods, out, trees


def layer(module: str) -> str:
    """``abi`` for bpfdsl.abi.insn, ``compiler`` for bpfdsl.compiler, ``api`` for bpfdsl."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    return "cli" if parts[1] == "__main__" else parts[1]


def _internal(name: str, mods: dict[str, Path]) -> str | None:
    """The package module an import of ``name`` runs (``a.b.c`` of ``import a.b.c``)."""
    while name and name not in mods:
        name = name.rpartition(".")[0]
    return name or None


def cycles(mods: dict[str, Path], edges: list[Import]) -> list[list[str]]:
    """One cycle (a list of modules, first repeated last) per strongly connected set of
    modules of size > 1 (Tarjan, iterative), plus self-imports."""
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for e in edges:
        dst = _internal(e.dst, mods)
        if dst is not None:
            graph[e.src].add(dst)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                scc = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    scc.append(w)
                    if w == v:
                        break
                if len(scc) > 1 or v in graph[v]:
                    found.append(_cycle_in(sorted(scc), graph))
    return found


def _cycle_in(scc: list[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the first module of ``scc`` (breadth first inside it)."""
    first, members = scc[0], set(scc)
    paths = {first: [first]}
    todo = [first]
    while todo:
        v = todo.pop(0)
        for w in sorted(graph[v] & members):
            if w == first:
                return [*paths[v], first]
            if w not in paths:
                paths[w] = [*paths[v], w]
                todo.append(w)
    return [first, first]


def upward(mods: dict[str, Path], edges: list[Import]) -> list[str]:
    """Imports of a package module by a layer not allowed to import it, and modules in no
    layer of :data:`MAY_IMPORT`."""
    bad = [f"{m}: in no layer of MAY_IMPORT" for m in mods if layer(m) not in MAY_IMPORT]
    for e in edges:
        dst = _internal(e.dst, mods)
        if dst is None or layer(dst) == layer(e.src) or layer(e.src) not in MAY_IMPORT:
            continue
        if layer(dst) not in MAY_IMPORT[layer(e.src)]:
            bad.append(f"{e!r}: {layer(e.src)} may not import {layer(dst)}")
    return bad


def missing(mods: dict[str, Path], edges: list[Import]) -> list[str]:
    """Imports of ``bpfdsl.X`` naming no module of the package (a module moved away)."""
    return [repr(e) for e in edges if e.dst.split(".")[0] == "bpfdsl" and e.dst not in mods]


def _lazy_ok(module: str) -> bool:
    """The CLI (a command module is imported when its command runs, and imports what that
    command needs) and the package ``__init__`` (a lazy public API) may import late."""
    return module in ("bpfdsl", "bpfdsl.__main__", "bpfdsl.cli") or module.startswith("bpfdsl.cli.")


def function_level(edges: list[Import], trees: dict[str, ast.Module]) -> list[str]:
    """Imports inside functions/classes (and importlib/__import__ calls) outside the CLI
    and the package ``__init__``, other than :data:`DEFERRED` ones."""
    bad = []
    for e in edges:
        if not e.lazy or _lazy_ok(e.src):
            continue
        if (e.src, e.dst.split(".")[0]) in DEFERRED:
            continue
        bad.append(repr(e))
    for m, tree in trees.items():
        if _lazy_ok(m):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call):
                f = n.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in ("import_module", "__import__"):
                    bad.append(f"{m}:{n.lineno}: {name}() hides an import from the graph")
    return bad


_NETLINK_NAMES = {"AF_NETLINK", "NETLINK_ROUTE", "NETLINK_GENERIC"}


def _syscall_sites(tree: ast.Module) -> list[tuple[str, int]]:
    """(what, line) of the system-call machinery in ``tree`` that is cheap to recognise:
    ``CDLL``/``cdll``/``LoadLibrary`` (a C library opened with ctypes), a call of a libc
    handle (``libc()``, ``_libc.f()``, ``libc.f()``), ``.syscall(...)``, netlink socket
    constants, and pyroute2 imports."""
    out = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Call):
            f = n.func
            name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
            owner = f.value if isinstance(f, ast.Attribute) else None
            owner_name = getattr(owner, "id", getattr(owner, "attr", ""))
            if name in ("CDLL", "LoadLibrary") or owner_name == "cdll":
                out.append(("CDLL", n.lineno))
            elif name in ("libc", "_libc") or owner_name in ("libc", "_libc"):
                out.append(("libc", n.lineno))
            elif name == "syscall" and isinstance(f, ast.Attribute):
                out.append(("syscall", n.lineno))
        elif isinstance(n, ast.Name | ast.Attribute) and isinstance(n.ctx, ast.Load):
            name = n.id if isinstance(n, ast.Name) else n.attr
            if name in _NETLINK_NAMES:  # used: bpfdsl.abi.net defining it is not
                out.append(("netlink", n.lineno))
        elif isinstance(n, ast.Import | ast.ImportFrom):
            names = [a.name for a in n.names] if isinstance(n, ast.Import) else [n.module or ""]
            if any(x.split(".")[0] == "pyroute2" for x in names):
                out.append(("netlink", n.lineno))
    return out


def syscalls_outside_kernel(trees: dict[str, ast.Module]) -> list[str]:
    """System-call sites (:func:`_syscall_sites`) in modules outside ``<package>.kernel``,
    other than :data:`SYSCALLS_OK` ones."""
    bad = []
    for m, tree in trees.items():
        if m == "bpfdsl.kernel" or m.startswith("bpfdsl.kernel."):
            continue
        for what, line in _syscall_sites(tree):
            if (m, what) not in SYSCALLS_OK:
                bad.append(f"{m}:{line}: {what} outside bpfdsl/kernel")
    return bad


# ---- the package -------------------------------------------------------------------------

MODS, EDGES, TREES = imports(PACKAGE)


def test_the_graph_is_read() -> None:
    """The reader sees the package: known modules, edges of each kind."""
    assert {"bpfdsl.compiler", "bpfdsl.lang.sema.symbols", "bpfdsl.obj.spec"} <= set(MODS)
    edges = {(e.src, e.dst) for e in EDGES}
    assert ("bpfdsl.compiler", "bpfdsl.lang.sema.analyzer") in edges  # from P import module
    assert ("bpfdsl.runtime.loader", "bpfdsl.kernel.syscall") in edges  # import ... as
    assert any(e.lazy and e.src.startswith("bpfdsl.cli.") for e in EDGES)  # per command


def test_no_import_cycle() -> None:
    assert cycles(MODS, EDGES) == []


def test_imports_follow_the_package_order() -> None:
    assert upward(MODS, EDGES) == []


def test_every_imported_package_module_exists() -> None:
    assert missing(MODS, EDGES) == []


def test_imports_at_module_level_outside_the_cli() -> None:
    assert function_level(EDGES, TREES) == []


def test_only_the_kernel_package_makes_system_calls() -> None:
    assert syscalls_outside_kernel(TREES) == []


# ---- each rule fails where it should: a package written by the test --------------------

FAKE = {
    "__init__.py": "import importlib\n",
    "record.py": "",
    "abi/__init__.py": "",
    "abi/limits.py": "from bpfdsl.record import *\n",
    "lang/__init__.py": "",
    "lang/a.py": "from bpfdsl.lang import b\nfrom bpfdsl.abi import limits\n",
    "lang/b.py": "TYPE_CHECKING = False\nif TYPE_CHECKING:\n    from bpfdsl.lang.a import X\n",
    "obj/__init__.py": "",
    "obj/spec.py": "from bpfdsl.lang import a\nfrom bpfdsl.obj.gone import Y\n",
    "kernel/__init__.py": "",
    "kernel/syscall.py": "import ctypes\nlibc = ctypes.CDLL(None)\n",
    "runtime/__init__.py": "",
    "runtime/run.py": (
        "import ctypes\n_libc = ctypes.CDLL(None, use_errno=True)\n\n"
        "def f():\n    from bpfdsl.kernel import syscall\n    return syscall.libc()\n\n"
        "def g():\n    import importlib\n    return importlib.import_module('bpfdsl.obj.spec')\n"
    ),
    "runtime/net.py": "from pyroute2 import IPRoute\n",
    "cli/__init__.py": "def main():\n    from bpfdsl.runtime import run\n",
}


def fake_package(tmp_path: Path, files: dict[str, str]):
    """Write ``files`` (path under bpfdsl/ -> text) as a package and read its imports."""
    root = tmp_path / "bpfdsl"
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return imports(root)


@pytest.fixture
def fake(tmp_path: Path):
    return fake_package(tmp_path, FAKE)


def test_rules_fail_on_a_package_that_breaks_them(fake) -> None:
    mods, edges, trees = fake
    # (a) lang.a -> lang.b -> lang.a, the back edge only under TYPE_CHECKING
    assert cycles(mods, edges) == [["bpfdsl.lang.a", "bpfdsl.lang.b", "bpfdsl.lang.a"]]
    # (b) obj may not import lang; abi may import record; the CLI may import anything
    assert upward(mods, edges) == ["bpfdsl.obj.spec:1 -> bpfdsl.lang.a: obj may not import lang"]
    assert missing(mods, edges) == ["bpfdsl.obj.spec:2 -> bpfdsl.obj.gone"]
    # (c) function-level imports and importlib outside the CLI and the package __init__
    assert function_level(edges, trees) == [
        "bpfdsl.runtime.run:5 -> bpfdsl.kernel.syscall (lazy)",
        "bpfdsl.runtime.run:9 -> importlib (lazy)",
        "bpfdsl.runtime.run:10: import_module() hides an import from the graph",
    ]
    # (d) libc opened and called, netlink, outside kernel/ (kernel/syscall.py may)
    assert syscalls_outside_kernel(trees) == [
        "bpfdsl.runtime.net:1: netlink outside bpfdsl/kernel",
        "bpfdsl.runtime.run:2: CDLL outside bpfdsl/kernel",
        "bpfdsl.runtime.run:6: libc outside bpfdsl/kernel",
    ]


# ---- kernel constants: bpfdsl/abi is their one definer ----------------------------------

# Names abi/ defines that are the kernel's (a flag, limit, helper id, errno): module-level
# upper-case names with one of these kernel prefixes, or an errno name.
KERNEL_NAME = re.compile(
    r"^(?:(?:BPF|BTF|XDP|SK|MAX|KMALLOC|PAGE|PCPU|HTAB|LPM|U32|ETH|ETHTOOL|AF|SOL|NETLINK|NLM"
    r"|NLMSG|RTM|IFLA|IFF|GENL|CTRL|NETDEV|SIOC|PERF|CPUMAP|CSUM|TAIL_CALL|TEST_XDP)_\w+|E[A-Z]+)$"
)
# enum classes of abi/ whose members are kernel names less a prefix (abi's rule:
# BPF_PROG_TYPE_XDP -> ProgramType.XDP): (prefix, suffix) of the kernel's name
ENUM_NAMES: dict[str, tuple[str, str]] = {
    "BpfCmd": ("BPF_", ""),
    "MapType": ("BPF_MAP_TYPE_", ""),
    "ProgramType": ("BPF_PROG_TYPE_", ""),
    "AttachType": ("BPF_", ""),
    "LinkType": ("BPF_LINK_TYPE_", ""),
    "XdpAction": ("XDP_", ""),
    "SkAction": ("SK_", ""),
    "SockOpsOp": ("BPF_SOCK_OPS_", ""),
    "SockOpsCbFlag": ("BPF_SOCK_OPS_", "_CB_FLAG"),
    "TcpState": ("BPF_TCP_", ""),
    "XdpFlags": ("XDP_FLAGS_", ""),
    "FibResult": ("BPF_FIB_LKUP_RET_", ""),
    "FibLookupFlag": ("BPF_FIB_LOOKUP_", ""),
    "Kind": ("BTF_KIND_", ""),
}


def _assigned(tree: ast.AST) -> list[tuple[str, int]]:
    """(name, line) of every plain name ``tree`` assigns (``X = ...``, ``X: T = ...``,
    ``X, Y = ...``), at any depth."""
    out = []
    for n in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(n, ast.Assign):
            targets = list(n.targets)
        elif isinstance(n, ast.AnnAssign | ast.AugAssign):
            targets = [n.target]
        for t in targets:
            for x in ast.walk(t):
                if isinstance(x, ast.Name):
                    out.append((x.id, x.lineno))
    return out


def kernel_names(trees: dict[str, ast.Module], package: str = "bpfdsl") -> dict[str, str]:
    """Kernel constant name -> the abi module defining it: module-level names of
    ``<package>.abi.*`` matching :data:`KERNEL_NAME`, and the kernel's names of the members
    of the :data:`ENUM_NAMES` classes (``XDP_TX`` for ``XdpAction.TX``)."""
    out: dict[str, str] = {}
    for m, tree in trees.items():
        if not (m == f"{package}.abi" or m.startswith(f"{package}.abi.")):
            continue
        for n in tree.body:
            if isinstance(n, ast.ClassDef) and n.name in ENUM_NAMES:
                pre, post = ENUM_NAMES[n.name]
                for name, _ in _assigned(ast.Module(body=n.body, type_ignores=[])):
                    out.setdefault(pre + name + post, f"{m}.{n.name}")
            elif isinstance(n, ast.Assign | ast.AnnAssign):
                for name, _ in _assigned(n):
                    if KERNEL_NAME.match(name):
                        out.setdefault(name, m)
    return out


def kernel_constants_outside_abi(
    trees: dict[str, ast.Module], package: str = "bpfdsl"
) -> list[str]:
    """Assignments outside ``<package>.abi`` of a name :func:`kernel_names` finds in abi/
    (leading underscores ignored: ``_BPF_F_LOCK = 4`` is a second copy too)."""
    names = kernel_names(trees, package)
    bad = []
    for m, tree in trees.items():
        if m == f"{package}.abi" or m.startswith(f"{package}.abi."):
            continue
        for name, line in _assigned(tree):
            if name.lstrip("_") in names:
                bad.append(f"{m}:{line}: {name} (import it from {names[name.lstrip('_')]})")
    return bad


def test_the_kernel_constants_of_abi_are_found() -> None:
    names = kernel_names(TREES)
    for name in ("BPF_F_RDONLY_PROG", "MAX_BPF_STACK", "BPF_FUNC_LOOP", "ENOTSUPP", "XDP_TX"):
        assert name in names, name
    assert names["BPF_MAP_TYPE_LPM_TRIE"] == "bpfdsl.abi.map_types.MapType"
    assert "HELPERS" not in names and "PROGRAM_KINDS" not in names  # tables, not constants


def test_kernel_constants_are_defined_only_in_abi() -> None:
    assert kernel_constants_outside_abi(TREES) == []


def test_a_kernel_constant_defined_again_is_found(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "abi/__init__.py": "",
        "abi/flags.py": (
            "from enum import IntEnum\nBPF_F_RDONLY_PROG = 1 << 7\nMAX_BPF_STACK = 512\n"
            "class XdpAction(IntEnum):\n    TX = 3\n"
        ),
        "checker/__init__.py": "",
        "checker/mem.py": "from bpfdsl.abi.flags import MAX_BPF_STACK\nBPF_F_RDONLY_PROG = 1 << 7\n",
        "obj/__init__.py": "",
        "obj/verdicts.py": "def f():\n    _XDP_TX = 3\n    return _XDP_TX\nLIMIT = 512\n",
    }
    _, _, trees = fake_package(tmp_path, files)
    assert kernel_constants_outside_abi(trees) == [
        "bpfdsl.checker.mem:2: BPF_F_RDONLY_PROG (import it from bpfdsl.abi.flags)",
        "bpfdsl.obj.verdicts:2: _XDP_TX (import it from bpfdsl.abi.flags.XdpAction)",
    ]


# ---- no kernel-looking constant outside abi/, whether abi defines it yet or not ----------

# Prefixes of the kernel's constant names (include/uapi/linux/bpf.h, if_xdp.h, if_ether.h,
# socket.h, netlink.h, rtnetlink.h, genetlink.h, netdev.h, if_link.h, if.h, sockios.h,
# ethtool.h, perf_event.h; include/linux/bpf.h MAX_BPF_*): an upper-case name outside abi/
# with one of them is a second source of a kernel fact, or a project name that reads as one.
KERNEL_PREFIX = re.compile(
    r"^(?:BPF_|BTF_|XDP_|MAX_BPF|SO_|SOL_|XSK_|ETH_|ETHTOOL_|AF_XDP|NETLINK_|NLM_|NLMSG_|RTM_"
    r"|IFLA_|IFF_|GENL_|CTRL_CMD_|CTRL_ATTR_|NETDEV_|SIOC|PERF_)[A-Z0-9_]*$"
)
# bpfdsl's own names that start like a kernel name (not a kernel constant): name -> why
NOT_KERNEL: dict[str, str] = {
    "XDP_SOCK": "checker register type (domain.py), after the kernel's PTR_TO_XDP_SOCK",
    "XDP_FIELDS": "interp: struct xdp_md members by offset, from bpfdsl.abi.ctx.XDP_MD",
    "XDP_MD_FIELDS": "runinfo: struct xdp_md members a --ctx names",
    "BPF_SOCK_OPS_FIELDS": "interp: struct bpf_sock_ops members a test run sets",
    "XDP_BYTES_MAX": "the language's xdp_bytes() limit (MAX_BPF_STACK)",
    "XDP_BYTES_HINT": "the language's xdp_bytes() hint text",
    "XSK_MODES": "the xsk benchmark's modes (rxdrop, l2fwd)",
}


def kernel_prefixed_outside_abi(trees: dict[str, ast.Module], package: str = "bpfdsl") -> list[str]:
    """Assignments outside ``<package>.abi`` of an upper-case name with a
    :data:`KERNEL_PREFIX` (leading underscores ignored), other than :data:`NOT_KERNEL`."""
    bad = []
    for m, tree in trees.items():
        if m == f"{package}.abi" or m.startswith(f"{package}.abi."):
            continue
        for name, line in _assigned(tree):
            bare = name.lstrip("_")
            if KERNEL_PREFIX.match(bare) and bare not in NOT_KERNEL:
                bad.append(f"{m}:{line}: {name} (a kernel name: define it in {package}/abi)")
    return bad


def test_no_kernel_prefixed_constant_outside_abi() -> None:
    assert kernel_prefixed_outside_abi(TREES) == []


def test_a_kernel_prefixed_constant_outside_abi_is_found(tmp_path: Path) -> None:
    files = {
        "__init__.py": "",
        "abi/__init__.py": "",
        "abi/net.py": "AF_XDP = 44\nNETLINK_ROUTE = 0\n",
        "runtime/__init__.py": "",
        "runtime/xsk.py": (
            "SOL_XDP = 283\nXSK_MODES = ('rxdrop',)\nLIMIT = 512\n"
            "def f():\n    _ETH_P_IP = 0x0800\n    return _ETH_P_IP\n"
        ),
        "kernel/__init__.py": "",
        "kernel/netlink.py": "from bpfdsl.abi.net import NETLINK_ROUTE\nx = NETLINK_ROUTE\n",
        "obj/__init__.py": "",
        "obj/a.py": "from bpfdsl.abi.net import NETLINK_ROUTE\nx = NETLINK_ROUTE\n",
    }
    _, _, trees = fake_package(tmp_path, files)
    assert kernel_prefixed_outside_abi(trees) == [
        "bpfdsl.runtime.xsk:1: SOL_XDP (a kernel name: define it in bpfdsl/abi)",
        "bpfdsl.runtime.xsk:5: _ETH_P_IP (a kernel name: define it in bpfdsl/abi)",
    ]
    # abi/ defining a netlink constant is not netlink; using it outside kernel/ is
    assert syscalls_outside_kernel(trees) == ["bpfdsl.obj.a:2: netlink outside bpfdsl/kernel"]
