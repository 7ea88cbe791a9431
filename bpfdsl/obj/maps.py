"""BTF-defined maps: the ``.maps`` DATASEC of an object -> :class:`MapSpec` per map (pure).

Encoding as libbpf's bpf_helpers.h defines it (and libbpf ``parse_btf_map_def`` reads it):
each map is a VAR of an anonymous struct whose members are ``__uint(name, N)`` =
``int (*name)[N]`` (type, max_entries, map_flags, numa_node, key_size, value_size,
pinning, map_extra), ``__type(name, T)`` = ``T *name`` (key, value) and
``__array(values, T)`` = ``T *values[]`` (inner map definition / prog array slots,
initial entries from relocations in ``.rel.maps``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bpfdsl.abi.btf.core import Btf, BtfFormatError, BtfType, Kind
from bpfdsl.abi.limits import MAX_RESOLVE_DEPTH
from bpfdsl.abi.map_types import MapType, is_map_in_map
from bpfdsl.obj.reader import ObjectReader

PIN_NONE, PIN_BY_NAME = 0, 1  # libbpf enum libbpf_pin_type
_INT_FIELDS = (
    "type",
    "max_entries",
    "map_flags",
    "numa_node",
    "key_size",
    "value_size",
    "pinning",
    "map_extra",
)


@dataclass(slots=True)
class MapSpec:
    """A map to create.  Sizes in bytes; ``map_type`` is map_types.MapType when known (else the
    raw int); ``key_type_id``/``value_type_id`` are BTF ids (0 = none); ``pinning`` is
    PIN_NONE or PIN_BY_NAME; ``inner`` the inner map of a map-in-map; ``values`` initial
    slots (index -> program or map name, from ``.rel.maps``)."""

    name: str
    map_type: int
    key_size: int
    value_size: int
    max_entries: int
    map_flags: int = 0
    pinning: int = PIN_NONE
    numa_node: int = 0
    map_extra: int = 0
    key_type_id: int = 0
    value_type_id: int = 0
    inner: MapSpec | None = None
    values: dict[int, str] = field(default_factory=dict)
    offset: int = 0  # byte offset of the definition in .maps
    size: int = 0  # bytes of the definition in .maps
    spin_lock_off: int = -1  # byte offset of the value's struct bpf_spin_lock (-1: none)

    @property
    def type_name(self) -> str:
        try:
            return MapType(self.map_type).name.lower()
        except ValueError:
            return f"type#{self.map_type}"


def _ptr_target(btf: Btf, tid: int, what: str) -> BtfType:
    t = btf.resolve(tid)
    if t.kind != Kind.PTR:
        raise BtfFormatError(f"{what} is not a pointer ({t.kind.name}): not a libbpf __uint/__type")
    return btf[t.type]


def parse_map_def(btf: Btf, name: str, tid: int) -> MapSpec:
    """One map definition struct (type id ``tid``) -> MapSpec.  Raises BtfFormatError."""
    st = btf.resolve(tid)
    if st.kind != Kind.STRUCT:
        raise BtfFormatError(f"map '{name}': definition is a {st.kind.name}, expected a struct")
    vals: dict[str, int] = {}
    spec = MapSpec(name, 0, 0, 0, 0)
    for m in st.members:
        what = f"map '{name}' field '{m.name}'"
        if m.name in _INT_FIELDS:
            arr = btf.resolve(_ptr_target(btf, m.type, what).id)
            if arr.kind != Kind.ARRAY:
                raise BtfFormatError(f"{what}: expected __uint(...) (pointer to array)")
            vals[m.name] = arr.nelems
        elif m.name in ("key", "value"):
            target = _ptr_target(btf, m.type, what)
            size = btf.size_of(target.id)
            setattr(spec, f"{m.name}_type_id", target.id)
            vals[f"{m.name}_size_btf"] = size
        elif m.name == "values":
            arr = btf.resolve(m.type)
            if arr.kind != Kind.ARRAY:
                raise BtfFormatError(f"{what}: expected __array(values, ...)")
            elem = _ptr_target(btf, arr.type, what)
            if btf.resolve(elem.id).kind == Kind.STRUCT:
                spec.inner = parse_map_def(btf, f"{name}.inner", elem.id)
        else:
            raise BtfFormatError(f"map '{name}': unknown field '{m.name}'")
    if "type" not in vals:
        raise BtfFormatError(f"map '{name}': missing __uint(type, ...)")
    try:
        spec.map_type = MapType(vals["type"])
    except ValueError:
        spec.map_type = vals["type"]
    for k in ("key", "value"):
        btf_size, explicit = vals.get(f"{k}_size_btf"), vals.get(f"{k}_size")
        if btf_size is not None and explicit is not None and btf_size != explicit:
            raise BtfFormatError(
                f"map '{name}': {k}_size {explicit} conflicts with __type({k}) of {btf_size} bytes"
            )
        setattr(spec, f"{k}_size", explicit if explicit is not None else btf_size or 0)
    spec.max_entries = vals.get("max_entries", 0)
    spec.map_flags = vals.get("map_flags", 0)
    spec.pinning = vals.get("pinning", PIN_NONE)
    spec.numa_node = vals.get("numa_node", 0)
    spec.map_extra = vals.get("map_extra", 0)
    if spec.pinning not in (PIN_NONE, PIN_BY_NAME):
        raise BtfFormatError(
            f"map '{name}': unsupported pinning {spec.pinning} (0 = none, 1 = LIBBPF_PIN_BY_NAME)"
        )
    if spec.value_type_id:
        spec.spin_lock_off = spin_lock_offset(btf, spec.value_type_id)
    if spec.inner is not None and is_map_in_map(spec.map_type):
        spec.value_size = spec.value_size or 4  # inner map fd
    elif spec.map_type == MapType.PROG_ARRAY:
        spec.value_size = spec.value_size or 4
    return spec


def spin_lock_offset(btf: Btf, value_type_id: int) -> int:
    """Byte offset of the ``struct bpf_spin_lock`` of a map value type, or -1 when it has
    none (kernel/bpf/btf.c btf_parse_fields -> btf_find_struct_field/btf_find_field_one):
    a member of the value struct whose type, past modifiers, is the struct named
    bpf_spin_lock, or such a member of a struct member, at any depth (btf_find_nested_struct,
    since 6.10), through arrays of one element (a lock repeated by a longer array is an
    error for the kernel: btf_repeat_fields).  Union members are not searched."""
    st = btf.resolve(value_type_id)
    if st.kind != Kind.STRUCT:
        return -1
    return _find_lock(btf, st, 0, 0)


def _find_lock(btf: Btf, st: BtfType, base: int, level: int) -> int:
    if level >= MAX_RESOLVE_DEPTH:
        return -1
    for m in st.members:
        t = btf.resolve(m.type)
        nelems, depth = 1, 0
        while t.kind == Kind.ARRAY and depth < MAX_RESOLVE_DEPTH:
            nelems *= t.nelems
            t = btf.resolve(t.type)
            depth += 1
        if nelems != 1 or t.kind != Kind.STRUCT:
            continue
        off = base + m.bit_offset // 8
        if t.name == "bpf_spin_lock":
            return off
        found = _find_lock(btf, t, off, level + 1)
        if found >= 0:
            return found
    return -1


def read_maps(reader: ObjectReader, btf: Btf | None) -> dict[str, MapSpec]:
    """All maps of the object's ``.maps`` section (needs BTF; raises UsageError otherwise)."""
    if btf is None:
        raise reader.fail(
            "'.maps' section without .BTF: map definitions cannot be read",
            hint="compile with -g (BTF) as libbpf requires",
        )
    sec = btf.find(".maps", Kind.DATASEC)
    if sec is None:
        raise reader.fail("'.maps' section has no DATASEC in .BTF")
    maps: dict[str, MapSpec] = {}
    for m in sec.members:
        var = btf[m.type]
        if var.kind != Kind.VAR:
            raise reader.fail(f"'.maps' DATASEC entry {m.type} is not a VAR")
        spec = parse_map_def(btf, var.name, var.type)
        spec.offset, spec.size = m.offset, m.size or btf.size_of(var.type)
        maps[var.name] = spec
    _initial_values(reader, btf, maps)
    return maps


def _initial_values(reader: ObjectReader, btf: Btf, maps: dict[str, MapSpec]) -> None:
    """``.rel.maps`` entries: slot i of a ``values`` array points at a map or program."""
    for r_off, sym_idx, _rtype in reader.relocations_for(".maps"):
        owner = next((s for s in maps.values() if s.offset <= r_off < s.offset + s.size), None)
        if owner is None:
            raise reader.fail(f"'.rel.maps' relocation at {r_off} is outside every map")
        var = btf.find(owner.name, Kind.VAR)
        assert var is not None  # owner was read from this VAR of the .maps DATASEC
        st = btf.resolve(var.type)
        vm = next((x for x in st.members if x.name == "values"), None)
        if vm is None:
            raise reader.fail(f"map '{owner.name}': relocation but no 'values' field")
        rel = r_off - owner.offset - vm.bit_offset // 8
        if rel < 0 or rel % 8:
            raise reader.fail(f"map '{owner.name}': misaligned 'values' relocation at {r_off}")
        owner.values[rel // 8] = reader.symbol(sym_idx).name
