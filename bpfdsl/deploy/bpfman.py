"""bpfman's bytecode image format and program types, as bpfman v0.6.0 reads them (pure).

Sources (bpfman v0.6.0, github.com/bpfman/bpfman tag v0.6.0):

- ``bpfman/src/oci_utils/image_manager.rs``: the image config's ``config.Labels`` must hold
  ``io.ebpf.programs`` and ``io.ebpf.maps``, each a JSON object of name -> type (string
  values); the bytecode is the *first* layer, pulled only with media type
  ``application/vnd.oci.image.layer.v1.tar+gzip`` (or Docker's ``...rootfs.diff.tar.gzip``),
  gunzipped, and the data of the *first tar entry* is the object (so the layer holds exactly
  one entry: the ``.o`` at the root, no directory entries); the object's ELF byte order must
  match the host's.
- ``bpfman/src/bin/cli/image.rs`` (``build_bpf_info_image_labels``): program label values
  are ``BpfProgType``'s Display (``bpfman/src/types.rs``: the kernel's ``bpf_prog_type``
  name in lower case, ``kprobe`` -> ``probe``, ``sched_cls`` -> ``tc``); map label values
  are ``MapType``'s Display (``bpf_map_type`` in lower case, ``percpu`` -> ``per_cpu``);
  maps whose name contains ``.rodata``, ``.bss`` or ``.data`` are left out.
- ``Containerfile.bytecode``: ``FROM scratch``, the two labels, ``COPY $BYTECODE_FILE /``.
- bpfman-operator v0.6.0 ``config/crd/bases/bpfman.io_clusterbpfapplications.yaml``: the
  program types a ClusterBpfApplication attaches (``XDP``, ``TC``, ``TCX``, ``FEntry``,
  ``FExit``, ``KProbe``, ``KRetProbe``, ``UProbe``, ``URetProbe``, ``TracePoint``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import DiagnosticError, Span, error

if TYPE_CHECKING:  # pragma: no cover
    from bpfdsl.obj.spec import CollectionSpec, ProgramSpec

BPFMAN_VERSION = "v0.6.0"  # the bpfman and bpfman-operator release this module follows

LABEL_PROGRAMS = "io.ebpf.programs"
LABEL_MAPS = "io.ebpf.maps"

# OCI image-spec v1.1 media types (opencontainers/image-spec specs-go/v1/mediatype.go).
MEDIA_INDEX = "application/vnd.oci.image.index.v1+json"
MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
MEDIA_LAYER_TAR_GZIP = "application/vnd.oci.image.layer.v1.tar+gzip"  # one bpfman pulls

# Label spellings that are not the kernel enum name in lower case (bpfman types.rs Display).
_PROG_LABEL_NAMES = {ProgramType.KPROBE: "probe", ProgramType.SCHED_CLS: "tc"}

# Every CR program type of the operator's CRD (ClusterBpfApplication), by what it attaches.
CR_PROGRAM_TYPES = (
    "XDP",
    "TC",
    "TCX",
    "FEntry",
    "FExit",
    "KProbe",
    "KRetProbe",
    "UProbe",
    "URetProbe",
    "TracePoint",
)


@dataclass(frozen=True, slots=True)
class Attachable:
    """How bpfman attaches programs of one kernel program type: ``cr_types`` (the CR's
    ``type`` values, first = default) and ``kind`` (the ``--kind`` words, same order)."""

    program_type: ProgramType
    attach_types: frozenset[AttachType | None]
    cr_types: tuple[str, ...]
    kinds: tuple[str, ...]


# Programs bpfdsl objects can hold that bpfman attaches to an interface.  XDP programs of
# the cpumap/devmap attach types run as map entries, never on an interface; sk_msg and
# sock_ops have no bpfman program type at all (CRD enum above).
ATTACHABLE: tuple[Attachable, ...] = (
    Attachable(ProgramType.XDP, frozenset({AttachType.XDP}), ("XDP",), ("xdp",)),
    Attachable(ProgramType.SCHED_CLS, frozenset({None}), ("TC", "TCX"), ("tc", "tcx")),
)

# What the error lists as supported (bpfman's load types, bpfman/src/bin/cli/load.rs).
SUPPORTED_WORDS = "xdp, tc, tcx, tracepoint, kprobe, uprobe, fentry, fexit"

ATTACH_NOTE = (
    "bpfman attaches programs of section xdp as --kind xdp and of section tc/classifier as "
    f"--kind tc or tcx (its other types: {SUPPORTED_WORDS}); xdp/cpumap and xdp/devmap "
    "programs run from map entries, sk_msg and sock_ops programs are no bpfman type"
)


def program_label(ptype: ProgramType | int) -> str:
    """``io.ebpf.programs`` value of a kernel program type (bpfman ``BpfProgType`` Display)."""
    try:
        pt = ProgramType(ptype)
    except ValueError:
        return "unspec"
    return _PROG_LABEL_NAMES.get(pt, pt.name.lower())


def map_label(mtype: MapType | int) -> str:
    """``io.ebpf.maps`` value of a kernel map type (bpfman ``MapType`` Display)."""
    try:
        mt = MapType(mtype)
    except ValueError:
        return "unspec"
    return mt.name.lower().replace("percpu", "per_cpu")


def labels(spec: CollectionSpec) -> dict[str, str]:
    """The two image labels for ``spec``: JSON text (keys sorted, no spaces, as Go's
    ``json.Marshal`` of a map writes them) of program name -> type and map name -> type."""
    progs = {
        name: program_label(p.program_type) if p.program_type is not None else "unspec"
        for name, p in spec.programs.items()
    }
    maps = {
        name: map_label(m.map_type)
        for name, m in spec.maps.items()
        if not any(s in name for s in (".rodata", ".bss", ".data"))
    }
    return {
        LABEL_MAPS: json.dumps(maps, sort_keys=True, separators=(",", ":")),
        LABEL_PROGRAMS: json.dumps(progs, sort_keys=True, separators=(",", ":")),
    }


def attachable(p: ProgramSpec) -> Attachable | None:
    """The :class:`Attachable` entry of program ``p``, or None when bpfman cannot attach it."""
    for a in ATTACHABLE:
        if p.program_type == a.program_type and p.attach_type in a.attach_types:
            return a
    return None


def describe(p: ProgramSpec) -> str:
    """``udp_filter (section xdp)``: a program as errors name it."""
    return f"{p.name} (section {p.section})"


def program_span(p: ProgramSpec, path: str) -> Span:
    """Where ``p`` starts in its source: the earliest line of its line info in the file of
    its first instruction (the function's first line), else the object file."""
    if p.line_info:
        first = min(p.line_info, key=lambda x: x.insn_off)
        li = min((x for x in p.line_info if x.file == first.file), key=lambda x: (x.line, x.col))
        return Span(li.file or path, li.line, max(1, li.col))
    return Span(path, 1, 1)


def require_attachable(spec: CollectionSpec, path: str) -> list[str]:
    """Names of the programs of ``spec`` bpfman can attach; DiagnosticError
    ``not-attachable`` (exit 1) at the first program when there is none."""
    ok = [n for n, p in spec.programs.items() if attachable(p) is not None]
    if ok:
        return ok
    if not spec.programs:
        raise DiagnosticError(
            error(
                "not-attachable",
                f"{path}: the object holds no program",
                Span(path, 1, 1),
                hint=f"bpfman attaches programs of type {SUPPORTED_WORDS}",
            )
        )
    first = next(iter(spec.programs.values()))
    names = ", ".join(
        f"{describe(p)}: {program_label(p.program_type or 0)}" for p in spec.programs.values()
    )
    raise DiagnosticError(
        error(
            "not-attachable",
            f"no program bpfman can attach in {path}: {names}",
            program_span(first, path),
            note=ATTACH_NOTE,
            hint="add an `xdp fn` program, or deploy this object another way",
        ),
    )
