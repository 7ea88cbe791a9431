"""Loader (kernel side): CollectionSpec -> live maps and programs, as libbpf loads objects.

Steps (bpf_object__load): BTF (fixed-up DATASECs, B13) -> maps (pinned-by-name reuse,
cpumap clamp B09) -> data sections as internal array maps (``--set`` configs applied,
.rodata frozen) -> programs (ld_imm64 patched on a COPY, BTF func/line info) -> initial
prog-array / map-in-map slots.  Errors: :class:`LoadError` naming the map/program/BTF part,
:class:`VerifierError` with the trimmed verifier log; PermissionError passes through.
Any failure closes every fd opened and removes every pin made by this call.
"""

from __future__ import annotations

import errno as E
import os
import struct

from bpfdsl import syscall as S
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.insn import Insn, encode
from bpfdsl.objfile import CollectionSpec, DataSection, ProgramSpec
from bpfdsl.objfile_maps import PIN_BY_NAME, MapSpec
from bpfdsl.record import Record
from bpfdsl.uapi import BPF_F_RDONLY_PROG, BPF_PSEUDO_MAP_FD, BPF_PSEUDO_MAP_VALUE, MapType

TYPE_CHECKING = False  # typing costs import time on the load path
if TYPE_CHECKING:  # pragma: no cover
    from typing import Any

DEFAULT_PIN_ROOT = "/sys/fs/bpf"  # libbpf's default for LIBBPF_PIN_BY_NAME


class LoadError(DiagnosticError):
    """The object could not be loaded (BTF, map, program, config); exit code 1."""


class VerifierError(LoadError):
    """The verifier rejected ``program``: ``log`` (whole), ``details`` (failing path)."""

    def __init__(self, program: str, summary, log: str, errno: int):
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


class ConfigError(LoadError, UsageError):
    """A ``--set`` config that is unknown or does not fit its type; exit code 2 (usage)."""

    exit_code = 2


def _config_fail(msg: str, hint: str | None = None) -> ConfigError:
    return ConfigError(error("bad-config", msg, hint=hint))


def _fail(code: str, msg: str, hint: str | None = None) -> LoadError:
    return LoadError(error(code, msg, hint=hint))


class LoadedMap(Record):
    """A live map: ``fd``, its spec (None for internal data-section maps), ``pinned`` path
    when pinned by name, ``reused`` when an existing pin was opened."""

    name: str
    fd: S.Fd
    spec: MapSpec | None
    key_size: int
    value_size: int
    max_entries: int
    map_type: int
    pinned: str | None
    reused: bool

    __slots__ = (
        "name",
        "fd",
        "spec",
        "key_size",
        "value_size",
        "max_entries",
        "map_type",
        "pinned",
        "reused",
    )

    def __init__(
        self,
        name: str,
        fd: S.Fd,
        spec: MapSpec | None,
        key_size: int,
        value_size: int,
        max_entries: int,
        map_type: int,
        pinned: str | None = None,
        reused: bool = False,
    ) -> None:
        self.name = name
        self.fd = fd
        self.spec = spec
        self.key_size = key_size
        self.value_size = value_size
        self.max_entries = max_entries
        self.map_type = map_type
        self.pinned = pinned
        self.reused = reused


class LoadedProgram(Record):
    """A live program: ``fd``, its spec and the verifier log (empty unless log_level>0)."""

    name: str
    fd: S.Fd
    spec: ProgramSpec
    log: str

    __slots__ = ("name", "fd", "spec", "log")

    def __init__(self, name: str, fd: S.Fd, spec: ProgramSpec, log: str = "") -> None:
        self.name = name
        self.fd = fd
        self.spec = spec
        self.log = log


class Collection(Record):
    """Everything one load made.  Context manager: ``close()`` closes all fds (pins stay)."""

    spec: CollectionSpec
    maps: dict[str, LoadedMap]
    programs: dict[str, LoadedProgram]
    btf_fd: S.Fd | None
    warnings: list[str]
    pins: list[str]  # pins made by this load (pinning by name)

    __slots__ = ("spec", "maps", "programs", "btf_fd", "warnings", "pins")

    def __init__(
        self,
        spec: CollectionSpec,
        maps: dict[str, LoadedMap] | None = None,
        programs: dict[str, LoadedProgram] | None = None,
        btf_fd: S.Fd | None = None,
        warnings: list[str] | None = None,
        pins: list[str] | None = None,
    ) -> None:
        self.spec = spec
        self.maps = {} if maps is None else maps
        self.programs = {} if programs is None else programs
        self.btf_fd = btf_fd
        self.warnings = [] if warnings is None else warnings
        self.pins = [] if pins is None else pins

    def close(self) -> None:
        for p in self.programs.values():
            p.fd.close()
        for m in self.maps.values():
            m.fd.close()
        if self.btf_fd is not None:
            self.btf_fd.close()

    def __enter__(self) -> Collection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def load_collection(
    spec: CollectionSpec,
    *,
    config: dict[str, Any] | None = None,
    pin_dir: str | None = None,
    log_level: int = 0,
    log_size: int = 1 << 20,
) -> Collection:
    """Load ``spec``; ``config`` maps .rodata VAR names to int/bytes/str values;
    ``pin_dir`` is where maps with ``pinning: LIBBPF_PIN_BY_NAME`` live (default
    /sys/fs/bpf).  Raises LoadError, VerifierError, PermissionError (BpfPermissionError)."""
    coll = Collection(spec)
    try:
        _check_license(spec)
        _load_btf(coll)
        for m in spec.maps.values():
            _create_map(coll, m, pin_dir or DEFAULT_PIN_ROOT)
        _check_configs(spec, config or {})
        for ds in spec.data_sections.values():
            _create_data_map(coll, ds, config or {})
        for key, p in spec.programs.items():
            _load_program(coll, p, log_level, log_size, key)
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


def _load_btf(coll: Collection) -> None:
    spec = coll.spec
    if spec.btf is None:
        return
    if spec.btf_error:
        raise _fail("bad-btf", f"{spec.path}: BTF cannot be fixed up: {spec.btf_error}")
    try:
        coll.btf_fd, _ = S.btf_load(spec.btf.to_bytes())
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
                hint="rebuild with a current compiler; `bpftool btf dump file OBJ` shows the types",
            )
        ) from None


def _btf_ids(coll: Collection, key_id: int, value_id: int) -> dict[str, int]:
    if coll.btf_fd is None or not (key_id or value_id):
        return {}
    return {"btf_fd": int(coll.btf_fd), "btf_key_type_id": key_id, "btf_value_type_id": value_id}


def _map_create(coll: Collection, name: str, m: MapSpec, max_entries: int, **kw) -> S.Fd:
    """BPF_MAP_CREATE; with BTF first, again without it if the kernel refuses (as libbpf)."""
    args = dict(map_flags=m.map_flags, name=name, numa_node=m.numa_node, map_extra=m.map_extra)
    btf = _btf_ids(coll, m.key_type_id, m.value_type_id)
    try:
        return S.map_create(m.map_type, m.key_size, m.value_size, max_entries, **args, **btf, **kw)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        if not btf or e.errno not in (E.EINVAL, E.EOPNOTSUPP, 524):  # 524: ENOTSUPP
            raise
    return S.map_create(m.map_type, m.key_size, m.value_size, max_entries, **args, **kw)


def _create_map(coll: Collection, m: MapSpec, pin_root: str) -> None:
    max_entries = m.max_entries
    if m.map_type == MapType.CPUMAP:
        from bpfdsl import cpumap  # noqa: PLC0415 (only objects with a cpumap)

        if m.key_size != 4 or m.value_size not in (4, 8):
            raise _fail(
                "bad-map",
                f"cpumap '{m.name}': key must be 4 bytes and value 4 (qsize) or"
                f" 8 bytes (struct bpf_cpumap_val), got {m.key_size}/{m.value_size}",
            )
        max_entries, warn = cpumap.clamp_max_entries(m.max_entries, m.name)
        if warn:
            coll.warnings.append(warn)
    path = os.path.join(pin_root, m.name) if m.pinning == PIN_BY_NAME else None
    if path and pin_root.startswith(DEFAULT_PIN_ROOT):
        from bpfdsl.attach import ensure_bpffs  # noqa: PLC0415 (netlink import only when pinning)

        ensure_bpffs(DEFAULT_PIN_ROOT)
    if path and os.path.exists(path):
        fd = _reuse_pinned(path, m, max_entries)
        coll.maps[m.name] = LoadedMap(
            m.name, fd, m, m.key_size, m.value_size, max_entries, m.map_type, path, reused=True
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
            from bpfdsl import cpumap  # noqa: PLC0415

            raise cpumap.explain_create_error(e, m.name, m.max_entries) from None
        raise _map_error(m, max_entries, e) from None
    finally:
        if inner is not None:
            inner.close()
    coll.maps[m.name] = LoadedMap(m.name, fd, m, m.key_size, m.value_size, max_entries, m.map_type)
    if path:
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
    return _fail(
        "map-create-failed",
        f"map '{m.name}' ({m.type_name}, key {m.key_size} B, value {m.value_size} B, "
        f"max_entries {max_entries}): the kernel refused it: {os.strerror(e.errno)}",
        hint=_MAP_HINTS.get(e.errno),
    )


def _reuse_pinned(path: str, m: MapSpec, max_entries: int) -> S.Fd:
    """Open the map pinned at ``path`` if it matches ``m`` (libbpf map_is_reuse_compat)."""
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
    if want != got:
        fd.close()
        names = ("type", "key_size", "value_size", "max_entries", "map_flags")
        diff = ", ".join(
            f"{n} {g} (object: {w})" for n, w, g in zip(names, want, got, strict=True) if w != g
        )
        raise _fail(
            "pin-incompatible",
            f"map '{m.name}': the map pinned at {path} is incompatible: {diff}",
            hint=f"remove the old pin: rm {path}",
        )
    return fd


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


def config_bytes(spec: CollectionSpec, name: str, value: Any) -> bytes:
    """Bytes of config ``name`` for ``value`` (int, bytes, or text parsed by its BTF type)."""
    from bpfdsl.btf_values import encode_value, int_range, parse_value  # noqa: PLC0415 (--set)

    var = spec.configs[name]
    try:
        if isinstance(value, bytes | bytearray):
            raw = bytes(value)
        elif spec.btf is not None and var.type_id:
            f = parse_value if isinstance(value, str) else encode_value
            raw = f(spec.btf, var.type_id, value)
        else:
            v = int(value, 0) if isinstance(value, str) else int(value)
            lo, hi = int_range(var.size, signed=False)  # no BTF: unsigned, nothing wraps
            if not lo <= v <= hi:
                raise ValueError(f"{v} does not fit in {var.size} bytes ({lo}..{hi})")
            raw = v.to_bytes(var.size, "little")
    except (ValueError, OverflowError) as e:
        raise _config_fail(f"config '{name}': {e}") from None
    if len(raw) != var.size:
        raise _config_fail(f"config '{name}' is {var.size} bytes, got {len(raw)}")
    return raw


def _create_data_map(coll: Collection, ds: DataSection, config: dict[str, Any]) -> None:
    data = bytearray(ds.data)
    if ds.name == ".rodata":
        for k, v in config.items():
            var = ds.vars[k]
            data[var.offset : var.offset + var.size] = config_bytes(coll.spec, k, v)
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
    coll: Collection, p: ProgramSpec, log_level: int, log_size: int, key: str | None = None
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
        if r.kind == "map":
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
        kw["func_info"] = b"".join(struct.pack("<II", f.insn_off, f.type_id) for f in p.func_info)
        kw["line_info"] = b"".join(
            struct.pack("<IIII", li.insn_off, li.file_name_off, li.line_off, li.line << 10 | li.col)
            for li in p.line_info
        )
    name = "".join(c if c.isalnum() or c in "_." else "_" for c in p.name)[:15]
    try:
        fd, log = S.prog_load(
            p.kind.program_type,
            encode(insns),
            coll.spec.license or "",
            name=name,
            expected_attach_type=p.kind.attach_type or 0,
            prog_flags=p.kind.prog_flags,
            log_level=log_level,
            log_size=log_size,
            **kw,
        )
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        if not e.log:
            raise _fail(
                "prog-load-failed",
                f"program '{p.name}' ({p.section}): the kernel "
                f"refused it without a log: {os.strerror(e.errno)}",
            ) from None
        from bpfdsl.loader_log import summarize  # noqa: PLC0415 (only on a rejection)

        raise VerifierError(p.name, summarize(e.log, p), e.log, e.errno) from None
    coll.programs[key or p.name] = LoadedProgram(p.name, fd, p, log)


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
