"""Loader (kernel side): CollectionSpec -> live maps and programs, as libbpf loads objects.

Steps (bpf_object__load): BTF (fixed-up DATASECs, B13) -> maps (pinned-by-name reuse,
cpumap clamp B09) -> data sections as internal array maps (``--set`` configs applied,
.rodata frozen) -> programs (ld_imm64 patched on a COPY, BTF func/line info) -> initial
prog-array / map-in-map slots.  Errors: :class:`LoadError` naming the map/program/BTF part,
:class:`VerifierError` with the trimmed verifier log; PermissionError passes through.
Any failure closes every fd opened and removes every pin made by this call.
"""

from __future__ import annotations

import copy
import errno as E
import os
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from bpfdsl.abi.btf.core import Btf, BtfFormatError
from bpfdsl.abi.btf.sanitize import BtfFeatures, fixup_arg_ctx, sanitize_for
from bpfdsl.abi.btf.shape import type_decl, type_shape
from bpfdsl.abi.flags import BPF_F_RDONLY_PROG, BPF_F_XDP_DEV_BOUND_ONLY
from bpfdsl.abi.insn import Insn, encode
from bpfdsl.abi.limits import ENOTSUPP
from bpfdsl.abi.map_types import MapType, is_percpu, map_create_problems
from bpfdsl.abi.opcodes import BPF_PSEUDO_KFUNC_CALL, BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.features import btf_features
from bpfdsl.obj import config as objconfig
from bpfdsl.obj.maps import PIN_BY_NAME, MapSpec
from bpfdsl.obj.spec import CollectionSpec, DataSection, FuncRecord, ProgramSpec
from bpfdsl.runtime import cpumap
from bpfdsl.runtime.bpffs import BPFFS, ensure_bpffs
from bpfdsl.runtime.kfuncs import kfunc_btf_id, needs_dev_bound
from bpfdsl.runtime.verifier_log import LogSummary, summarize

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

PIN_BY_NAME_ROOT = BPFFS  # libbpf's pin root for LIBBPF_PIN_BY_NAME maps without --pin-dir


class LoadError(DiagnosticError):
    """The object could not be loaded (BTF, map, program, config); exit code 1."""


class VerifierError(LoadError):
    """The verifier rejected ``program``: ``log`` (whole), ``details`` (failing path)."""

    def __init__(self, program: str, summary: LogSummary, log: str, errno: int) -> None:
        msg = summary.message or os.strerror(errno)
        diag = error(
            "verifier-rejected",
            f"program '{program}' rejected by the kernel "
            f"verifier: {msg}" + (f" (insn {summary.insn})" if summary.insn is not None else ""),
            summary.span,
            note="failing path:\n" + summary.details if summary.details else None,
            hint="`bpfdsl check` explains this in source terms; --log prints the "
            "whole verifier log",
        )
        super().__init__(diag)
        self.program, self.log, self.details, self.errno = program, log, summary.details, errno


class ConfigError(LoadError, objconfig.ConfigError):
    """A ``--set`` config that is unknown or does not fit its type; exit code 2 (usage)."""

    exit_code = 2


def _fail(code: str, msg: str, hint: str | None = None) -> LoadError:
    return LoadError(error(code, msg, hint=hint))


@dataclass(slots=True)
class LoadedMap:
    """A live map: ``fd``, its spec (None for internal data-section maps), ``pinned`` path
    when pinned by name, ``reused`` when an existing pin was opened."""

    name: str
    fd: S.Fd
    spec: MapSpec | None
    key_size: int
    value_size: int
    max_entries: int
    map_type: int
    pinned: str | None = None
    reused: bool = False

    def _value_size(self) -> int:
        """Bytes of one lookup: per-CPU maps return one value per possible CPU, each
        rounded up to 8 bytes (kernel bpf_map_copy_value layout)."""
        if is_percpu(self.map_type):
            return S.percpu_value_size(self.value_size)
        return self.value_size

    def lookup(self, key: bytes) -> bytes | None:
        """BPF_MAP_LOOKUP_ELEM: the value bytes of ``key`` (object byte order: little
        endian, network-order fields as stored), or None when the key is absent."""
        return S.map_lookup(self.fd, key, self._value_size())

    def update(self, key: bytes, value: bytes, flags: int = 0) -> None:
        """BPF_MAP_UPDATE_ELEM (``flags``: BPF_ANY 0, BPF_NOEXIST 1, BPF_EXIST 2).
        Raises BpfError (E2BIG when full, EEXIST/ENOENT per flags)."""
        S.map_update(self.fd, key, value, flags)

    def delete(self, key: bytes) -> bool:
        """BPF_MAP_DELETE_ELEM; False when ``key`` was absent."""
        return S.map_delete(self.fd, key)


@dataclass(slots=True)
class LoadedProgram:
    """A live program: ``fd``, its spec and the verifier log (empty unless log_level>0)."""

    name: str
    fd: S.Fd
    spec: ProgramSpec
    log: str = ""


@dataclass(slots=True)
class Collection:
    """Everything one load made.  Context manager: ``close()`` closes all fds (pins stay)."""

    spec: CollectionSpec
    maps: dict[str, LoadedMap] = field(default_factory=dict)
    programs: dict[str, LoadedProgram] = field(default_factory=dict)
    btf_fd: S.Fd | None = None
    # how the object's BTF was rewritten for this kernel (abi.btf.sanitize.sanitize_for:
    # "DECL_TAG -> INT: 1"...); empty when the kernel takes it as it is
    btf_changes: list[str] = field(default_factory=list)
    # program key -> the func_info it is loaded with when the BTF rewrite cloned its
    # functions (a kernel without arg:ctx); the spec's otherwise
    func_info: dict[str, list[FuncRecord]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    pins: list[str] = field(default_factory=list)  # pins made by this load (pinning by name)

    def close(self) -> None:
        for p in self.programs.values():
            p.fd.close()
        for m in self.maps.values():
            m.fd.close()
        if self.btf_fd is not None:
            self.btf_fd.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_collection(
    spec: CollectionSpec,
    *,
    config: dict[str, Any] | None = None,
    pin_dir: str | None = None,
    log_level: int = 0,
    log_size: int = 1 << 20,
    pinning: bool = True,
    reuse_maps: dict[str, str] | None = None,
    ifindex: int = 0,
    before_pin: Callable[[str, int], None] | None = None,
    btf_features: BtfFeatures | None = None,
) -> Collection:
    """Load ``spec``; ``config`` maps .rodata VAR names to int/bytes/str values;
    ``pin_dir`` is where maps with ``pinning: LIBBPF_PIN_BY_NAME`` live (PIN_ROOT, default
    /sys/fs/bpf).  ``pinning=False`` (test runs) ignores that attribute: such maps are
    created fresh and never pinned nor reused, so the load leaves nothing on bpffs and
    touches no live map (a warning in ``Collection.warnings`` says so).  ``reuse_maps``:
    map name -> pin path of a live map to use instead of creating one (a program update
    keeping its state; libbpf's bpf_map__reuse_fd; given explicitly, so it applies with
    ``pinning=False`` too): it must match the definition (type, key/value size,
    max_entries, flags), else LoadError ``map-incompatible`` names the map and the fields
    that differ.  ``ifindex``: the device programs that call the XDP metadata kfuncs are
    bound to (prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY; libbpf bpf_program__set_ifindex);
    such a program without one is refused (``dev-bound-needs-device``).
    ``before_pin(path, map_id)``: called before a map this load created is pinned by name
    at ``path`` (an intent record lists it, so a repair after SIGKILL removes exactly
    the pins this load made).  ``btf_features``: what the kernel's BTF loader takes (None:
    probed, :func:`bpfdsl.kernel.features.btf_features`); the object's BTF is rewritten as
    libbpf does for a kernel that lacks a kind (``Collection.btf_changes`` says how).
    Raises LoadError, VerifierError, PermissionError (BpfPermissionError)."""
    coll = Collection(spec)
    reuse = reuse_maps or {}
    try:
        _check_license(spec)
        _load_btf(coll, btf_features)
        for m in spec.maps.values():
            root = (pin_dir or PIN_BY_NAME_ROOT) if pinning else None
            _create_map(coll, m, root, reuse.get(m.name), before_pin)
        _check_configs(spec, config or {})
        for ds in spec.data_sections.values():
            _create_data_map(coll, ds, config or {})
        for key, p in spec.programs.items():
            _load_program(coll, p, log_level, log_size, key, ifindex)
        _fill_initial_values(coll)
    except BaseException:
        coll.close()
        for path in coll.pins:
            try:
                os.unlink(path)
            except OSError:
                pass
        raise
    return coll


def _check_license(spec: CollectionSpec) -> None:
    if not spec.license:
        raise _fail(
            "no-license",
            f"{spec.path}: object has no license",
            hint='declare one: `license "GPL"` (bpfdsl) or '
            'char LICENSE[] SEC("license") = "GPL"; (C)',
        )


def _load_btf(coll: Collection, features: BtfFeatures | None) -> None:
    spec = coll.spec
    if spec.btf is None:
        return
    if spec.btf_error:
        raise _fail("bad-btf", f"{spec.path}: BTF cannot be fixed up: {spec.btf_error}")
    try:
        feats = features or btf_features()  # libbpf's order: func_info fix-up, sanitize
        btf = spec.btf if feats.arg_ctx else _fixup_arg_ctx(coll, copy.deepcopy(spec.btf))
        btf, changes = sanitize_for(btf, feats)
        coll.btf_changes += changes
        coll.btf_fd, _ = S.btf_load(btf.to_bytes())
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        lines = [ln.strip() for ln in e.log.splitlines() if ln.strip()]
        where = next((ln for ln in reversed(lines) if ln.startswith("[")), "")
        raise LoadError(
            error(
                "btf-rejected",
                f"{spec.path}: the kernel rejected the object's BTF: "
                f"{lines[-1] if lines else e}" + (f" at type {where}" if where else ""),
                note="\n".join(lines[-8:]) or None,
                hint=_btf_hint(lines),
            )
        ) from None


def _fixup_arg_ctx(coll: Collection, btf: Btf) -> Btf:
    """``btf`` (a copy of the spec's, changed) with each program's global functions whose
    context parameter is a tagged ``void *`` cloned as ``struct CTX *`` (abi.btf.sanitize.
    fixup_arg_ctx, libbpf bpf_program_fixup_func_info); the programs' func_info to load
    with go to ``coll.func_info``, warnings to ``coll.warnings``."""
    cloned = 0
    for key, p in coll.spec.programs.items():
        if not p.func_info or p.kind is None or not p.kind.ctx:
            continue
        ids, warnings = fixup_arg_ctx(btf, [f.type_id for f in p.func_info], p.kind.ctx)
        coll.warnings += [f"prog '{p.name}': {w}" for w in warnings]
        if ids != [f.type_id for f in p.func_info]:
            pairs = list(zip(p.func_info, ids, strict=True))
            coll.func_info[key] = [replace(f, type_id=i) for f, i in pairs]
            cloned += sum(1 for f, i in pairs if f.type_id != i)
    if cloned:
        coll.btf_changes.append(f"global FUNC void *ctx __arg_ctx -> struct ctx *: {cloned}")
    return btf


def _btf_hint(log: list[str]) -> str:
    """What to do about BTF the kernel refused (``log``: its BTF log lines)."""
    if any("Array size overflows U32_MAX" in ln for ln in log):
        return (
            "an array in the BTF is 4 GiB or more; in a map definition that is a "
            "max_entries of 2**30 or more (`__uint(max_entries, N)` is `int (*)[N]`): "
            "declare fewer entries"
        )
    return "rebuild with a current compiler; `bpftool btf dump file OBJ` shows the types"


def _btf_ids(coll: Collection, key_id: int, value_id: int) -> dict[str, int]:
    if coll.btf_fd is None or not (key_id or value_id):
        return {}
    return {"btf_fd": int(coll.btf_fd), "btf_key_type_id": key_id, "btf_value_type_id": value_id}


def _map_create(coll: Collection, name: str, m: MapSpec, max_entries: int, **kw: Any) -> S.Fd:
    """BPF_MAP_CREATE; with BTF first, again without it if the kernel refuses (as libbpf)."""
    args: dict[str, Any] = dict(
        map_flags=m.map_flags, name=name, numa_node=m.numa_node, map_extra=m.map_extra
    )
    btf: dict[str, Any] = _btf_ids(coll, m.key_type_id, m.value_type_id)
    try:
        return S.map_create(m.map_type, m.key_size, m.value_size, max_entries, **args, **btf, **kw)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        if not btf or e.errno not in (E.EINVAL, E.EOPNOTSUPP, ENOTSUPP):
            raise
    return S.map_create(m.map_type, m.key_size, m.value_size, max_entries, **args, **kw)


def _create_map(
    coll: Collection,
    m: MapSpec,
    pin_root: str | None,
    reuse: str | None = None,
    before_pin: Callable[[str, int], None] | None = None,
) -> None:
    """Create map ``m``, or reuse its pin under ``pin_root`` (None: never pin), or the live
    map pinned at ``reuse`` (the map of the program an update replaces)."""
    max_entries = m.max_entries
    if m.map_type == MapType.CPUMAP:
        if m.key_size != 4 or m.value_size not in (4, 8):
            raise _fail(
                "bad-map",
                f"cpumap '{m.name}': key must be 4 bytes and value 4 (qsize) or"
                f" 8 bytes (struct bpf_cpumap_val), got {m.key_size}/{m.value_size}",
            )
        max_entries, warn = cpumap.clamp_max_entries(m.max_entries, m.name)
        if warn:
            coll.warnings.append(warn)
    elif m.map_type == MapType.PERF_EVENT_ARRAY and not max_entries:
        max_entries = S.possible_cpus()  # libbpf: one slot per possible CPU
    if m.pinning == PIN_BY_NAME and pin_root is None and reuse is None:
        coll.warnings.append(
            f"map '{m.name}' is pinned by name (LIBBPF_PIN_BY_NAME): this run uses a "
            f"private copy, not the pin at {os.path.join(PIN_BY_NAME_ROOT, m.name)}, "
            "and pins nothing"
        )
    path = os.path.join(pin_root, m.name) if m.pinning == PIN_BY_NAME and pin_root else None
    if path and pin_root and pin_root.startswith(PIN_BY_NAME_ROOT):
        ensure_bpffs(PIN_BY_NAME_ROOT)
    if path and os.path.exists(path):
        fd = _reuse_pinned(coll, path, m, max_entries)
        coll.maps[m.name] = LoadedMap(
            m.name, fd, m, m.key_size, m.value_size, max_entries, m.map_type, path, reused=True
        )
        return
    if reuse is not None:
        fd = _reuse_pinned(coll, reuse, m, max_entries, update=True)
        coll.maps[m.name] = LoadedMap(
            m.name, fd, m, m.key_size, m.value_size, max_entries, m.map_type, reused=True
        )
        return
    inner = None
    try:
        if m.inner is not None:
            inner = _map_create(coll, m.inner.name[:15], m.inner, m.inner.max_entries)
        fd = _map_create(coll, m.name, m, max_entries, inner_map_fd=int(inner) if inner else 0)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        if m.map_type == MapType.CPUMAP:
            raise cpumap.explain_create_error(e, m.name, m.max_entries) from None
        raise _map_error(m, max_entries, e) from None
    finally:
        if inner is not None:
            inner.close()
    coll.maps[m.name] = LoadedMap(m.name, fd, m, m.key_size, m.value_size, max_entries, m.map_type)
    if path:
        if before_pin is not None:
            before_pin(path, int(S.map_info(fd).id))
        try:
            S.obj_pin(fd, path)
        except S.BpfError as e:
            raise _fail(
                "pin-failed",
                f"map '{m.name}': cannot pin at {path}: {e}",
                hint="is bpffs mounted there? (mount -t bpf bpf /sys/fs/bpf)",
            ) from None
        coll.pins.append(path)
        coll.maps[m.name].pinned = path


_MAP_HINTS = {
    E.E2BIG: "max_entries or the key/value size is above what the kernel allows for this map type",
    E.EINVAL: "check key/value sizes and flags for this map type (e.g. lpm_trie needs "
    "BPF_F_NO_PREALLOC, sockmap values are 4 or 8 bytes)",
    E.ENOMEM: "not enough memory (or memlock limit) for max_entries * value size",
}


def _map_error(m: MapSpec, max_entries: int, e: S.BpfError) -> LoadError:
    """The map-create-failed error; the hint names the broken rule when the kernel's
    BPF_MAP_CREATE rules (abi.map_types.MAP_LIMITS) tell which it is."""

    problems = map_create_problems(m.map_type, m.key_size, m.value_size, max_entries, m.map_flags)
    return _fail(
        "map-create-failed",
        f"map '{m.name}' ({m.type_name}, key {m.key_size} B, value {m.value_size} B, "
        f"max_entries {max_entries}): the kernel refused it: {os.strerror(e.errno)}",
        hint="; ".join(msg for _what, msg in problems) or _MAP_HINTS.get(e.errno),
    )


def _reuse_pinned(
    coll: Collection, path: str, m: MapSpec, max_entries: int, *, update: bool = False
) -> S.Fd:
    """Open the map pinned at ``path`` if it matches ``m``: type, key/value size,
    max_entries, map_flags (libbpf map_is_reuse_compat), and the key and value *types*
    where both the live map and the object have BTF (:mod:`bpfdsl.abi.btf.shape`: same
    sizes under another layout would be read as the wrong type).  ``update``: the map of
    the program being replaced (error ``map-incompatible``), else a map pinned by name
    (``pin-incompatible``)."""
    try:
        fd = S.obj_get(path)
    except S.BpfError as e:
        raise _fail("pin-unusable", f"map '{m.name}': cannot open pinned {path}: {e}") from None
    try:
        info = S.map_info(fd)
    except S.BpfError:
        fd.close()
        raise _fail("pin-unusable", f"map '{m.name}': {path} is not a map") from None
    want = (int(m.map_type), m.key_size, m.value_size, max_entries, m.map_flags)
    got = (info.type, info.key_size, info.value_size, info.max_entries, info.map_flags)
    diff = ""
    if want != got:
        names = ("type", "key_size", "value_size", "max_entries", "map_flags")
        show = {"type": _map_type_name}
        diff = ", ".join(
            f"{n} {show.get(n, str)(g)} (object: {show.get(n, str)(w)})"
            for n, w, g in zip(names, want, got, strict=True)
            if w != g
        )
    else:
        diff = _type_diff(coll, m, info)
    if not diff:
        return fd
    fd.close()
    if update:
        raise _fail(
            "map-incompatible",
            f"map '{m.name}': the new object's definition does not match the map of the "
            f"program it replaces ({path}): {diff}",
            hint="keep the map's definition to keep its state, or attach with "
            "--fresh-maps to start with new, empty maps (the old state is dropped)",
        )
    raise _fail(
        "pin-incompatible",
        f"map '{m.name}': the map pinned at {path} is incompatible: {diff}",
        hint=f"remove the old pin to start a new map: rm {path}",
    )


def _type_diff(coll: Collection, m: MapSpec, info: S.MapInfo) -> str:
    """How the key/value types of the live map (``info``, its BTF as the kernel holds it)
    differ from the object's, "" when they agree or either side has no BTF to compare (a
    map created without BTF: its sizes are all there is, as for libbpf)."""
    obj = coll.spec.btf
    if obj is None or not info.btf_id:
        return ""
    live = S.kernel_btf(int(info.btf_id))
    if live is None:
        return ""  # the kernel would not say (EPERM...): sizes are all there is
    parts = []
    for what, mine, theirs in (
        ("key", m.key_type_id, int(info.btf_key_type_id)),
        ("value", m.value_type_id, int(info.btf_value_type_id)),
    ):
        if not mine or not theirs:
            continue
        try:
            same = type_shape(obj, mine) == type_shape(live, theirs)
            if not same:
                parts.append(
                    f"{what} type {type_decl(live, theirs)} (object: {type_decl(obj, mine)})"
                )
        except BtfFormatError:
            continue
    return ", ".join(parts)


def _map_type_name(t: int) -> str:
    try:
        return MapType(t).name.lower()
    except ValueError:
        return str(t)


def _check_configs(spec: CollectionSpec, config: dict[str, Any]) -> None:
    known = spec.configs
    unknown = [k for k in config if k not in known]
    if unknown:
        raise ConfigError(
            error(
                "unknown-config",
                f"unknown config {', '.join(map(repr, unknown))}",
                hint="configs of this object: " + (", ".join(sorted(known)) or "none"),
            )
        )


def _create_data_map(coll: Collection, ds: DataSection, config: dict[str, Any]) -> None:
    data = bytearray(ds.data)
    if ds.name == ".rodata":
        for k, v in config.items():
            var = ds.vars[k]
            try:
                raw = objconfig.config_bytes(coll.spec, k, v)
            except objconfig.ConfigError as e:
                raise ConfigError(e.diagnostics) from None
            data[var.offset : var.offset + var.size] = raw
    flags = BPF_F_RDONLY_PROG if ds.readonly else 0
    m = MapSpec(ds.name, MapType.ARRAY, 4, len(data), 1, flags, value_type_id=ds.btf_id)
    try:
        fd = _map_create(coll, ds.name[:15], m, 1)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise _map_error(m, 1, e) from None
    coll.maps[ds.name] = LoadedMap(ds.name, fd, None, 4, len(data), 1, MapType.ARRAY)
    S.map_update(fd, bytes(4), bytes(data))
    if ds.readonly:
        S.map_freeze(fd)


def _load_program(
    coll: Collection,
    p: ProgramSpec,
    log_level: int,
    log_size: int,
    key: str | None = None,
    ifindex: int = 0,
) -> None:
    """Load ``p`` into ``coll.programs[key]``: ``key`` is its name in ``spec.programs``,
    which is ``section/name`` when a function name repeats (two entries under ``p.name``
    would lose the first fd, found by tests/fuzz/objects.py)."""
    if p.kind is None:
        raise _fail(
            "unknown-section",
            f"program '{p.name}': section '{p.section}' is not a program type bpfdsl loads",
            hint="sections: xdp, xdp.frags, xdp/cpumap, xdp/devmap, sk_msg, sockops",
        )
    insns = list(p.insns)  # a copy: the spec stays as read
    for r in p.relocations:
        x = insns[r.insn_idx]
        if r.kind == "kfunc":  # libbpf RELO_EXTERN_CALL: the FUNC's id in vmlinux, off 0
            try:
                tid = kfunc_btf_id(p.name, r.symbol)
            except DiagnosticError as e:
                raise LoadError(e.diagnostics) from None
            insns[r.insn_idx] = Insn(x.opcode, x.dst, BPF_PSEUDO_KFUNC_CALL, 0, tid)
        elif r.kind == "map":
            fd = int(coll.maps[r.symbol].fd)
            insns[r.insn_idx] = Insn(x.opcode, x.dst, BPF_PSEUDO_MAP_FD, x.off, fd)
        else:
            fd = int(coll.maps[r.symbol].fd)
            v = (fd & 0xFFFFFFFF) | ((r.offset & 0xFFFFFFFF) << 32)
            imm = v - (1 << 64) if v >> 63 else v
            insns[r.insn_idx] = Insn(x.opcode, x.dst, BPF_PSEUDO_MAP_VALUE, x.off, imm)
    kw: dict[str, Any] = {}
    if coll.btf_fd is not None:
        kw["btf_fd"] = int(coll.btf_fd)
        func_info = coll.func_info.get(key or p.name, p.func_info)
        kw["func_info"] = b"".join(struct.pack("<II", f.insn_off, f.type_id) for f in func_info)
        kw["line_info"] = b"".join(
            struct.pack("<IIII", li.insn_off, li.file_name_off, li.line_off, li.line << 10 | li.col)
            for li in p.line_info
        )
    flags = p.kind.prog_flags
    bound = needs_dev_bound(p)
    if bound:
        if not ifindex:
            raise _fail(
                "dev-bound-needs-device",
                f"program '{p.name}' calls {', '.join(bound)}: it must be loaded for the "
                "device it reads the RX hints of (device-bound), and no device was given",
                hint="give the device: `bpfdsl attach PROG --dev IFACE`, `bpfdsl load FILE "
                "--dev IFACE`, `bpfdsl run FILE --dev IFACE` (to test-run the object's other "
                "programs), load_collection(spec, ifindex=...) from Python",
            )
        flags |= BPF_F_XDP_DEV_BOUND_ONLY
        kw["ifindex"] = ifindex
    name = "".join(c if c.isalnum() or c in "_." else "_" for c in p.name)[:15]
    try:
        prog_fd, log = S.prog_load(
            p.kind.program_type,
            encode(insns),
            coll.spec.license or "",
            name=name,
            expected_attach_type=p.kind.attach_type or 0,
            prog_flags=flags,
            log_level=log_level,
            log_size=log_size,
            **kw,
        )
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        if bound and not e.log and e.errno in (E.EOPNOTSUPP, E.EINVAL, E.ENODEV):
            # kernel/bpf/offload.c bpf_prog_dev_bound_init: no such device, or a driver
            # without XDP (no ndo_bpf) cannot take a device-bound program
            try:
                where = f"interface {socket.if_indextoname(ifindex)} (ifindex {ifindex})"
            except OSError:
                where = f"ifindex {ifindex} (no such interface in this network namespace)"
            raise _fail(
                "dev-bound-device",
                f"program '{p.name}' calls {', '.join(bound)}: the kernel refused to bind it "
                f"to {where}: {os.strerror(e.errno)}",
                hint="give an interface whose driver runs XDP natively (veth, mlx5, ice, "
                "...; not lo), in this network namespace",
            ) from None
        if not e.log:
            raise _fail(
                "prog-load-failed",
                f"program '{p.name}' ({p.section}): the kernel "
                f"refused it without a log: {os.strerror(e.errno)}",
            ) from None

        raise VerifierError(p.name, summarize(e.log, p), e.log, e.errno) from None
    coll.programs[key or p.name] = LoadedProgram(p.name, prog_fd, p, log)


def _fill_initial_values(coll: Collection) -> None:
    for m in coll.spec.maps.values():
        for idx, target in m.values.items():
            obj = coll.programs.get(target) or coll.maps.get(target)
            if obj is None:
                raise _fail("bad-map-value", f"map '{m.name}' slot {idx}: unknown '{target}'")
            try:
                S.map_update(
                    coll.maps[m.name].fd, struct.pack("<I", idx), struct.pack("<I", int(obj.fd))
                )
            except S.BpfError as e:
                raise _fail(
                    "bad-map-value",
                    f"map '{m.name}' slot {idx} = '{target}': {os.strerror(e.errno)}",
                ) from None
