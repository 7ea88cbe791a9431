"""Topology files: one TOML document declaring a whole deployment (docs/topology.md).

A topology names its objects (a ``.bpfd`` source compiled here, or an ELF object, with
load-time configs), where their programs attach (XDP on interfaces with a mode, cpumap
and devmap entries with their entry programs, prog_array slots, sk_msg programs on
sockmaps/sockhashes, sock_ops programs on cgroups v2) and the initial contents of their
maps (inline or from a file in the forms ``bpfdsl map update --from`` reads).  This
module reads and validates the file (:func:`read_topology`) and compiles every object
(:func:`build`), touching nothing in the kernel; :mod:`bpfdsl.runtime.topology_ops`
brings the system to the declared state.

TOML: tomllib (Python 3.11+, PEP 680; tomli on Python 3.10).  Programs and maps are named ``OBJECT:NAME``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any

from bpfdsl.abi.map_types import DEVMAP_TYPES, SOCK_MAP_TYPES, MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.compiler import compile_file
from bpfdsl.diagnostics import Span, UsageError, error
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.config import parse_config
from bpfdsl.obj.spec import CollectionSpec
from bpfdsl.runtime.attach import DEFAULT_PIN_ROOT, MODES
from bpfdsl.runtime.mapfile import read_entries

if sys.version_info >= (3, 11):  # the standard library's TOML reader (PEP 680)
    import tomllib
else:  # pragma: no cover - Python 3.10: tomli, which tomllib came from (a dependency there)
    import tomli as tomllib

TOP_KEYS: tuple[str, ...] = ("pin_dir", "objects", "xdp", "cpumap", "devmap", "prog_array")
TOP_KEYS += ("sk_msg", "sock_ops", "maps")
DEFAULT_QSIZE = 2048  # frames queued per cpumap entry when the file gives none (xdp-tools' 2048)


@dataclass(frozen=True, slots=True)
class Ref:
    """A program or map of an object: ``OBJECT:NAME`` in the file."""

    obj: str
    name: str

    def __str__(self) -> str:
        return f"{self.obj}:{self.name}"


@dataclass(frozen=True, slots=True)
class ObjectDecl:
    """``[objects.NAME]``: ``path`` (absolute) of a ``.bpfd`` source (``source =``) or an
    ELF object (``object =``), ``config``: .rodata config name -> value (text, int, bool)."""

    name: str
    path: str
    config: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class XdpDecl:
    """An XDP program on one interface (``[[xdp]]`` with several ``interfaces`` gives one
    per interface); ``mode``: native or generic (attach.MODES)."""

    program: Ref
    dev: str
    mode: str = "native"


@dataclass(frozen=True, slots=True)
class EntryDecl:
    """One slot of a cpumap (``key`` = CPU, ``qsize``), devmap (``key``, egress
    ``interface``) or prog_array (``key`` = slot; ``program`` required) with its program."""

    kind: str  # "cpumap" | "devmap" | "prog_array"
    map: Ref
    key: int
    program: Ref | None = None
    qsize: int = 0
    interface: str = ""


@dataclass(frozen=True, slots=True)
class HookDecl:
    """An sk_msg program on a sockmap/sockhash (``target`` the map) or a sock_ops
    program on a cgroup v2 directory (``target`` its path)."""

    kind: str  # "sk_msg" | "sock_ops"
    program: Ref
    target: str
    map: Ref | None = None


@dataclass(frozen=True, slots=True)
class ContentsDecl:
    """``[maps."OBJ:MAP"]``: entries to be present (``entries`` inline or ``from`` a
    file; key and value as ``bpfdsl map update`` takes them, encoded by the map's BTF)."""

    map: Ref
    entries: tuple[tuple[Any, Any], ...]
    source: str = "inline"


@dataclass(slots=True)
class Topology:
    """A read topology file; ``pin_dir``: the bpffs dir everything it makes lives in."""

    path: str
    pin_dir: str
    objects: dict[str, ObjectDecl] = field(default_factory=dict)
    xdp: list[XdpDecl] = field(default_factory=list)
    entries: list[EntryDecl] = field(default_factory=list)
    hooks: list[HookDecl] = field(default_factory=list)
    contents: list[ContentsDecl] = field(default_factory=list)

    def interfaces(self) -> list[str]:
        return sorted({x.dev for x in self.xdp})


@dataclass(slots=True)
class Built:
    """One object compiled and read: ``data`` (ELF bytes), ``spec``, ``config`` as the
    loader takes it, ``digest`` (sha256 of the ELF bytes and the configs: what tells an
    edited object from the one loaded)."""

    decl: ObjectDecl
    data: bytes
    spec: CollectionSpec
    config: dict[str, Any]
    digest: str


def _bad(
    path: str,
    what: str,
    hint: str | None = None,
    *,
    at: str | None = None,
    key: str | None = None,
    value: Any = None,
) -> UsageError:
    """UsageError ``bad-topology`` located in the file ``path`` (:func:`locate`: the table
    ``at``, its ``key`` or the text of ``value`` in it)."""
    return UsageError(
        error(
            "bad-topology",
            what,
            locate(path, at, key=key, value=value),
            hint=hint or "see docs/topology.md",
        )
    )


def _table(path: str, where: str, v: Any, keys: tuple[str, ...], need: tuple[str, ...]) -> dict:
    if not isinstance(v, dict):
        raise _bad(path, f"{where} is not a table", at=where)
    unknown = sorted(set(v) - set(keys))
    if unknown:
        raise _bad(
            path,
            f"{where}: unknown key {', '.join(unknown)}",
            f"keys: {', '.join(keys)}",
            at=where,
            key=unknown[0],
        )
    missing = [k for k in need if k not in v]
    if missing:
        raise _bad(path, f"{where}: missing {', '.join(missing)}", at=where)
    return v


def _ref(path: str, where: str, text: Any, objects: dict) -> Ref:
    if not isinstance(text, str) or text.count(":") != 1 or text.startswith(":"):
        raise _bad(path, f"{where}: {text!r} is not OBJECT:NAME", at=where, value=text)
    obj, name = text.split(":")
    if obj not in objects:
        known = ", ".join(sorted(objects)) or "none"
        raise _bad(path, f"{where}: no object {obj!r} (objects: {known})", at=where, value=text)
    return Ref(obj, name)


def _int(path: str, where: str, v: Any, lo: int = 0, hi: int = (1 << 32) - 1) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise _bad(path, f"{where}: {v!r} is not an integer in {lo}..{hi}", at=where, value=v)
    return v


def _list(path: str, where: str, v: Any) -> list:
    if not isinstance(v, list):
        raise _bad(path, f"{where} is not an array of tables ([[{where}]])", at=where)
    return v


def read_topology(path: str) -> Topology:
    """Read and validate the topology file at ``path`` (paths in it are relative to its
    directory).  Raises UsageError (``bad-topology``, exit 2) naming the key at fault, or
    ``no-such-file``."""
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except FileNotFoundError:
        raise UsageError(error("no-such-file", f"{path}: no such topology file")) from None
    except OSError as e:
        raise UsageError(error("bad-file", f"{path}: {e.strerror or e}")) from None
    except tomllib.TOMLDecodeError as e:
        pos = re.search(r"\(at line (\d+), column (\d+)\)", str(e))
        span = Span(path, int(pos.group(1)), int(pos.group(2))) if pos else Span(path, 1, 1)
        msg = re.sub(r"\s*\(at line \d+, column \d+\)", "", str(e))
        raise UsageError(
            error("bad-topology", f"not TOML: {msg}", span, hint="see docs/topology.md")
        ) from None
    _table(path, "the file", doc, TOP_KEYS, ("objects",))
    base = os.path.dirname(os.path.abspath(path))
    pin_dir = doc.get("pin_dir") or os.path.join(
        DEFAULT_PIN_ROOT, "topology_" + _stem(os.path.basename(path))
    )
    if not isinstance(pin_dir, str) or not pin_dir.startswith("/sys/fs/bpf/"):
        raise _bad(path, f"pin_dir {pin_dir!r} is not a directory under /sys/fs/bpf", key="pin_dir")
    if "." in os.path.basename(pin_dir.rstrip("/")):
        raise _bad(path, f"pin_dir {pin_dir!r}: bpffs does not allow '.' in names", key="pin_dir")
    top = Topology(os.path.abspath(path), os.path.normpath(pin_dir))
    objs = doc["objects"]
    if not isinstance(objs, dict) or not objs:
        raise _bad(path, "[objects] declares no object", key="objects")
    for name, o in objs.items():
        where = f"[objects.{name}]"
        if not name.replace("_", "").isalnum() or name.endswith(("_next", "by_name")):
            raise _bad(path, f"{where}: object names are letters, digits and _", at=where)
        _table(path, where, o, ("source", "object", "config"), ())
        if ("source" in o) == ("object" in o):
            raise _bad(
                path, f"{where}: give one of source = FILE.bpfd or object = FILE.o", at=where
            )
        file = o.get("source") or o.get("object")
        if not isinstance(file, str):
            raise _bad(path, f"{where}: the file is not a string", at=where)
        cfg = o.get("config", {})
        if not isinstance(cfg, dict):
            raise _bad(path, f"{where}: config is not a table", at=where, key="config")
        items = tuple(sorted((str(k), _config_text(v)) for k, v in cfg.items()))
        top.objects[name] = ObjectDecl(name, os.path.normpath(os.path.join(base, file)), items)
    for i, x in enumerate(_list(path, "xdp", doc.get("xdp", []))):
        where = f"xdp[{i}]"
        _table(path, where, x, ("program", "interfaces", "mode"), ("program", "interfaces"))
        prog = _ref(path, where, x["program"], top.objects)
        devs = x["interfaces"]
        if not isinstance(devs, list) or not devs or not all(isinstance(d, str) for d in devs):
            raise _bad(
                path,
                f"{where}: interfaces is not a list of interface names",
                at=where,
                key="interfaces",
            )
        mode = x.get("mode", "native")
        if mode not in MODES:
            raise _bad(
                path, f"{where}: mode {mode!r}: give native or generic", at=where, key="mode"
            )
        for d in devs:
            if any(y.dev == d for y in top.xdp):
                raise _bad(path, f"{where}: interface {d} is given twice", at=where, value=d)
            top.xdp.append(XdpDecl(prog, d, mode))
    for kind in ("cpumap", "devmap", "prog_array"):
        keys = {"cpumap": ("map", "cpu", "qsize", "program"),
                "devmap": ("map", "key", "interface", "program"),
                "prog_array": ("map", "slot", "program")}[kind]  # fmt: skip
        need = {"cpumap": ("map", "cpu"), "devmap": ("map", "key", "interface"),
                "prog_array": ("map", "slot", "program")}[kind]  # fmt: skip
        for i, ent in enumerate(_list(path, kind, doc.get(kind, []))):
            where = f"{kind}[{i}]"
            _table(path, where, ent, keys, need)
            key = _int(path, where, ent.get("cpu", ent.get("key", ent.get("slot"))))
            eprog = _ref(path, where, ent["program"], top.objects) if "program" in ent else None
            d = EntryDecl(
                kind,
                _ref(path, where, ent["map"], top.objects),
                key,
                eprog,
                _int(path, where, ent.get("qsize", DEFAULT_QSIZE), 1, 16384)
                if kind == "cpumap"
                else 0,
                str(ent.get("interface", "")),
            )
            if any((y.map, y.key) == (d.map, d.key) for y in top.entries):
                raise _bad(path, f"{where}: {d.map} key {key} is given twice", at=where)
            top.entries.append(d)
    for i, h in enumerate(_list(path, "sk_msg", doc.get("sk_msg", []))):
        where = f"sk_msg[{i}]"
        _table(path, where, h, ("map", "program"), ("map", "program"))
        m = _ref(path, where, h["map"], top.objects)
        top.hooks.append(
            HookDecl("sk_msg", _ref(path, where, h["program"], top.objects), str(m), m)
        )
    for i, h in enumerate(_list(path, "sock_ops", doc.get("sock_ops", []))):
        where = f"sock_ops[{i}]"
        _table(path, where, h, ("cgroup", "program"), ("cgroup", "program"))
        if not isinstance(h["cgroup"], str) or not os.path.isabs(h["cgroup"]):
            raise _bad(
                path,
                f"{where}: cgroup is not an absolute path of a cgroup v2 dir",
                at=where,
                key="cgroup",
            )
        prog = _ref(path, where, h["program"], top.objects)
        top.hooks.append(HookDecl("sock_ops", prog, os.path.normpath(h["cgroup"])))
    maps = doc.get("maps", {})
    if not isinstance(maps, dict):
        raise _bad(path, "[maps] is not a table", key="maps")
    for name, m in maps.items():
        where = f'[maps."{name}"]'
        _table(path, where, m, ("entries", "from"), ())
        ref = _ref(path, where, name, top.objects)
        if ("entries" in m) == ("from" in m):
            raise _bad(path, f"{where}: give one of entries = [...] or from = FILE", at=where)
        if "from" in m:
            src = os.path.normpath(os.path.join(base, str(m["from"])))
            rows = tuple(read_entries(src))
        else:
            src = "inline"
            inline = []
            for j, row in enumerate(_list(path, f"{where} entries", m["entries"])):
                _table(path, f"{where} entries[{j}]", row, ("key", "value"), ("key", "value"))
                inline.append((row["key"], row["value"]))
            rows = tuple(inline)
        top.contents.append(ContentsDecl(ref, rows, src))
    return top


def _config_text(v: Any) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    return str(v)


def _stem(name: str) -> str:
    stem = name.rsplit(".", 1)[0]
    return "".join(c if c.isalnum() or c == "_" else "_" for c in stem) or "_"


# what each declaration needs of its program: (program type, expected attach type)
_WANT = {
    "xdp": (ProgramType.XDP, AttachType.XDP, "a plain `xdp` program"),
    "cpumap": (ProgramType.XDP, AttachType.XDP_CPUMAP, "an `xdp(cpumap)` program"),
    "devmap": (ProgramType.XDP, AttachType.XDP_DEVMAP, "an `xdp(devmap)` program"),
    "sk_msg": (ProgramType.SK_MSG, None, "an `sk_msg` program"),
    "sock_ops": (ProgramType.SOCK_OPS, None, "a `sock_ops` program"),
}
_MAP_KINDS: dict[str, frozenset] = {
    "cpumap": frozenset({MapType.CPUMAP}),
    "devmap": DEVMAP_TYPES,
    "prog_array": frozenset({MapType.PROG_ARRAY}),
    "sk_msg": SOCK_MAP_TYPES,
}


def build(top: Topology) -> dict[str, Built]:
    """Compile (``.bpfd``) or read (``.o``) every object of ``top`` and check that each
    reference names a program or map of the right kind, and each config is known.
    Touches nothing in the kernel: the kernel verifier runs when the objects are loaded
    (:func:`bpfdsl.runtime.topology_ops.apply`, into staging pin dirs first).  Raises
    DiagnosticError (compile errors: exit 1) and UsageError (bad references, exit 2)."""
    out: dict[str, Built] = {}
    for name, o in top.objects.items():
        if o.path.endswith(".bpfd"):
            data = compile_file(o.path).obj
        else:
            try:
                with open(o.path, "rb") as f:
                    data = f.read()
            except OSError as e:
                raise UsageError(error("no-such-file", f"{o.path}: {e.strerror or e}")) from None
        spec = read_object(data, name=o.path)
        items = [f"{k}={v}" for k, v in o.config]
        config = dict(parse_config(items, spec.configs)) if items else {}
        h = hashlib.sha256(data)
        h.update(json.dumps(o.config).encode())
        out[name] = Built(o, data, spec, config, h.hexdigest()[:16])
    where = top.path
    for x in top.xdp:
        _check_prog(where, out, x.program, "xdp")
    for ent in top.entries:
        _check_map(where, out, ent.map, ent.kind)
        if ent.program is not None:
            kind = ent.kind if ent.kind != "prog_array" else None
            _check_prog(where, out, ent.program, kind)
    for hook in top.hooks:
        _check_prog(where, out, hook.program, hook.kind)
        if hook.map is not None:
            _check_map(where, out, hook.map, hook.kind)
    for c in top.contents:
        _check_map(where, out, c.map, None)
    return out


def _check_prog(where: str, built: dict[str, Built], ref: Ref, kind: str | None) -> None:
    spec = built[ref.obj].spec
    p = spec.programs.get(ref.name)
    if p is None:
        known = ", ".join(sorted(spec.programs)) or "none"
        raise _bad(
            where,
            f"{ref}: object {ref.obj} has no program {ref.name!r} (programs: {known})",
            value=str(ref),
        )
    if kind is None:
        return
    ptype, atype, what = _WANT[kind]
    if p.program_type != ptype or (atype is not None and p.attach_type != atype):
        raise _bad(
            where, f"{ref} (section {p.section}) is not {what}, which {kind} needs", value=str(ref)
        )


def _check_map(where: str, built: dict[str, Built], ref: Ref, kind: str | None) -> None:
    spec = built[ref.obj].spec
    m = spec.maps.get(ref.name)
    if m is None:
        known = ", ".join(sorted(spec.maps)) or "none"
        raise _bad(
            where,
            f"{ref}: object {ref.obj} has no map {ref.name!r} (maps: {known})",
            value=str(ref),
        )
    if kind is not None and m.map_type not in _MAP_KINDS[kind]:
        raise _bad(where, f"{ref} is a {m.type_name}, not a map for {kind} entries", value=str(ref))


_HEADER = re.compile(r"^\s*\[")


def _lines(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read().splitlines()
    except OSError:
        return []


def _header_index(lines: list[str], at: str) -> int | None:
    """0-based line of the table ``at`` names: ``kind[i]`` (the i-th ``[[kind]]``),
    ``[objects.NAME]``, ``[maps."NAME"]`` (a trailing `` entries[j]`` is ignored)."""
    m = re.match(r"^(\w+)\[(\d+)\]$", at)
    if m:
        pat = rf"^\s*\[\[\s*{re.escape(m.group(1))}\s*\]\]"
        index = int(m.group(2))
    else:
        m = re.match(r'^\[(objects|maps)\.(?:"([^"]*)"|([^\]]*))\]', at)
        if not m:
            return None
        name = re.escape(m.group(2) if m.group(2) is not None else m.group(3))
        pat = rf"^\s*\[\s*{m.group(1)}\s*\.\s*(\"{name}\"|'{name}'|{name})\s*\]"
        index = 0
    seen = 0
    for no, text in enumerate(lines):
        if re.match(pat, text):
            if seen == index:
                return no
            seen += 1
    return None


def _needle(value: Any) -> str:
    return f'"{value}"' if isinstance(value, str) else str(value)


def locate(path: str, at: str | None = None, *, key: str | None = None, value: Any = None) -> Span:
    """Where a topology file ``path`` says something (tomllib gives no positions, so the
    file is read again as text): in the table ``at`` (``xdp[0]``, ``[objects.edge]``,
    ``[maps."edge:allowed"]``; None: the whole file), the line of ``key = ...`` or of the
    first occurrence of ``value`` (a string is looked for quoted), else the table's header;
    the file's first line when nothing is found."""
    lines = _lines(path)
    start, end = 0, len(lines)
    h = _header_index(lines, at) if at is not None else None
    if h is not None:
        start = h
        end = next((i for i in range(h + 1, len(lines)) if _HEADER.match(lines[i])), len(lines))
    elif at is None and key is not None:  # a top-level key: before the first table
        end = next((i for i, t in enumerate(lines) if _HEADER.match(t)), len(lines))
    for i in range(start, end):
        text = lines[i]
        if key is not None:
            m = re.match(rf"^(\s*)({re.escape(key)}|\"{re.escape(key)}\")\s*=", text)
            if m:
                return Span(path, i + 1, len(m.group(1)) + 1)
        elif value is not None:
            col = text.find(_needle(value))
            if col >= 0:
                return Span(path, i + 1, col + 1)
    if h is not None:
        text = lines[h]
        return Span(path, h + 1, len(text) - len(text.lstrip()) + 1)
    return Span(path, 1, 1)


def table_span(path: str, kind: str, index: int = 0) -> Span:
    """Where the ``index``-th (0-based) ``[[kind]]`` table of the topology file ``path``
    starts, or for a ``kind`` of the form ``maps.NAME`` the ``[maps."NAME"]`` table
    (:func:`locate`)."""
    if kind.startswith("maps."):
        return locate(path, f'[maps."{kind[5:]}"]')
    return locate(path, f"{kind}[{index}]")
