"""The programs under test: an object (bpfdsl's or clang's) loaded once for a whole
benchmark, its programs picked by kind, its maps filled as the user asked (:func:`fill_user_maps`).

An object is given as ELF bytes (the CLI compiles ``.bpfd`` sources first) and loaded by
:func:`bpfdsl.runtime.loader.load_collection` without pinning, so a benchmark leaves
nothing on bpffs.  Programs are picked by their kind (the ELF section, as libbpf): the
plain ``xdp`` program attached to the interface (``--prog`` when there are several), the
``xdp/cpumap`` or ``xdp/devmap`` program that runs on a redirect map's entries, the
``sk_msg`` and ``sockops`` pair of a socket benchmark.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import overload

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import UsageError, error
from bpfdsl.kernel import syscall as S
from bpfdsl.obj import collection as objfile
from bpfdsl.obj.config import parse_config
from bpfdsl.runtime import loader, runinfo
from bpfdsl.runtime.loader import Collection


@dataclass(slots=True)
class ObjectUnderTest:
    """One object given to ``bpfdsl bench``: ``label`` (how tables name it), ``path``,
    its ELF bytes, ``--set NAME=VALUE`` configs and ``--map NAME KEY VALUE`` entries
    (filled after loading, before each run's own entries)."""

    label: str
    path: str
    data: bytes = field(repr=False)
    sets: list[str] = field(default_factory=list)
    maps: list[tuple[str, str, str]] = field(default_factory=list)
    prog: str | None = None


class _MapFiller:
    """What :func:`bpfdsl.runtime.runinfo.fill_maps` writes through: a loaded collection."""

    def __init__(self, coll: Collection):
        self.coll = coll
        self.ncpus = S.possible_cpus()

    def set_map(self, name: str, key: bytes, value: bytes) -> None:
        S.map_update(self.coll.maps[name].fd, key, value)


@dataclass(slots=True)
class LoadedTarget:
    """An :class:`ObjectUnderTest` loaded: the collection and the programs picked."""

    obj: ObjectUnderTest
    coll: Collection
    main: str | None = None  # the program attached to the interface / the sk_msg program
    entry: str | None = None  # xdp/cpumap, xdp/devmap or sockops program

    @overload
    def fd(self, name: str) -> int: ...
    @overload
    def fd(self, name: None) -> None: ...
    @overload
    def fd(self, name: str | None) -> int | None: ...
    def fd(self, name: str | None) -> int | None:
        return None if name is None else int(self.coll.programs[name].fd)

    def maps_of(self, *types: int) -> list[str]:
        """Names of the object's maps of these kernel map types, in object order."""
        return [n for n, m in self.coll.maps.items() if m.spec is not None and m.map_type in types]

    def close(self) -> None:
        self.coll.close()


def _of_type(coll: Collection, ptype: int, attach: AttachType | None = None) -> list[str]:
    out = []
    for name, p in coll.programs.items():
        if p.spec.program_type != ptype:
            continue
        if attach is not None and p.spec.attach_type != attach:
            continue
        out.append(name)
    return out


def load_target(obj: ObjectUnderTest, *, want: str) -> LoadedTarget:
    """Load ``obj`` and pick its programs for a benchmark of kind ``want``: ``xdp`` (a plain
    XDP program, plus the xdp/cpumap or xdp/devmap program when there is exactly one) or
    ``sk_msg`` (an sk_msg program and a sock_ops program).
    Raises UsageError naming what is missing; LoadError/VerifierError from the loader.
    """
    spec = objfile.read_object(obj.data, name=obj.path)
    config = parse_config(obj.sets, spec.configs)
    coll = loader.load_collection(spec, config=config, pinning=False)
    try:
        t = LoadedTarget(obj, coll)
        if want == "xdp":
            t.main = _pick(obj, _of_type(coll, ProgramType.XDP, AttachType.XDP), "xdp", obj.prog)
            entries = [
                *_of_type(coll, ProgramType.XDP, AttachType.XDP_CPUMAP),
                *_of_type(coll, ProgramType.XDP, AttachType.XDP_DEVMAP),
            ]
            t.entry = entries[0] if len(entries) == 1 else None
        else:
            t.main = _pick(obj, _of_type(coll, ProgramType.SK_MSG), "sk_msg", obj.prog)
            t.entry = _pick(obj, _of_type(coll, ProgramType.SOCK_OPS), "sock_ops", None)
    except BaseException:
        coll.close()
        raise
    return t


def fill_user_maps(t: LoadedTarget) -> None:
    """Write the user's ``--map NAME KEY VALUE`` entries (after the benchmark's own, so
    they win); keys and values parsed by the map's BTF types as ``bpfdsl map update``."""
    if t.obj.maps:
        runinfo.fill_maps(
            _MapFiller(t.coll), t.coll.spec, runinfo.map_entries(list(t.obj.maps)), {}
        )


def _pick(obj: ObjectUnderTest, names: list[str], kind: str, wanted: str | None) -> str:
    if wanted is not None:
        if wanted in names:
            return wanted
        raise UsageError(
            error(
                "bench-program",
                f"{obj.path}: no {kind} program named {wanted!r}",
                hint=f"{kind} programs: {', '.join(names) or 'none'}",
            )
        )
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(
            error(
                "bench-program",
                f"{obj.path} holds no {kind} program",
                hint=_KIND_HINT[kind],
            )
        )
    raise UsageError(
        error(
            "bench-program",
            f"{obj.path} holds {len(names)} {kind} programs",
            hint=f"pick one with --prog: {', '.join(names)}",
        )
    )


_KIND_HINT = {
    "xdp": 'declare one as `xdp fn NAME(ctx)` (C: SEC("xdp"))',
    "sk_msg": 'the skmsg benchmark needs `sk_msg fn NAME(msg)` (C: SEC("sk_msg"))',
    "sock_ops": "the skmsg benchmark needs a `sock_ops fn NAME(skops)` that fills the "
    'sockmap/sockhash (C: SEC("sockops"))',
}


def one_map(t: LoadedTarget, types: tuple[int, ...], what: str, hint: str) -> str:
    """The object's only map of one of ``types``; UsageError when it has none or several."""
    names = t.maps_of(*types)
    if len(names) == 1:
        return names[0]
    if not names:
        raise UsageError(error("bench-map", f"{t.obj.path} has no {what}", hint=hint))
    raise UsageError(
        error(
            "bench-map",
            f"{t.obj.path} has {len(names)} {what}s ({', '.join(names)}); the benchmark fills one",
            hint="benchmark an object with one, or fill the others with --map",
        )
    )


REDIRECT_MAPS = {
    "cpumap": (MapType.CPUMAP,),
    "devmap": (MapType.DEVMAP, MapType.DEVMAP_HASH),
    "xskmap": (MapType.XSKMAP,),
    "sockmap": (MapType.SOCKMAP, MapType.SOCKHASH),
}
