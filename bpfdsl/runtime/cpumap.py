"""cpumap entries (kernel side): which CPUs an XDP program may redirect to.

Takes an open cpumap fd and writes ``struct bpf_cpumap_val`` entries (include/uapi/linux/bpf.h:
``__u32 qsize; union { int fd; __u32 id; } bpf_prog``) keyed by CPU number; reads them back
(the kernel reports the program id).  Kernel rules (kernel/bpf/cpumap.c, 6.x): key size 4,
value size 4 or 8, max_entries at most NR_CPUS (E2BIG) -- loaders size it from the possible
CPUs, as libbpf users and cilium/ebpf#1627 do (FIELD-BUGS B09); qsize 0 means *delete*;
the optional program must be XDP loaded with expected_attach_type BPF_XDP_CPUMAP, else the
kernel answers ENOMEM.  Every kernel errno is turned into a DiagnosticError saying what to do.

Also here, shared with :mod:`bpfdsl.runtime.devmap`: :func:`xdp_attach_type` (which XDP flavour a
loaded program is) and :func:`refuse_on_interface` for the XDP attach path.
"""

from __future__ import annotations

import errno as E
import struct
from collections.abc import Collection
from dataclasses import dataclass

from bpfdsl.abi.flags import BPF_F_TEST_XDP_LIVE_FRAMES
from bpfdsl.abi.limits import CPUMAP_QSIZE_MAX, TEST_XDP_MAX_BATCH
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import DiagnosticError, UsageError, error
from bpfdsl.kernel import syscall as S


@dataclass(frozen=True, slots=True)
class CpumapEntry:
    """One cpumap slot: ``cpu`` (key), ``qsize`` (frames queued towards that CPU),
    ``prog_id`` (kernel id of the on-CPU program, 0 when none)."""

    cpu: int
    qsize: int
    prog_id: int = 0


def possible_cpus() -> int:
    """Number of possible CPUs of this host (/sys/devices/system/cpu/possible, as libbpf)."""
    return S.possible_cpus()


def clamp_max_entries(declared: int, map_name: str) -> tuple[int, str | None]:
    """max_entries to create a cpumap with: ``min(declared, possible CPUs)``.

    Returns ``(max_entries, warning or None)``.  FIELD-BUGS B09: a cpumap declared larger than
    the host's CPU limit fails with E2BIG at creation; slots above the possible CPUs can never
    be filled anyway (the kernel refuses them with ENODEV), so clamping loses nothing.
    """
    n = possible_cpus()
    if declared <= n:
        return declared, None
    return n, (
        f"cpumap '{map_name}': max_entries {declared} clamped to {n}, "
        f"the number of possible CPUs of this host (/sys/devices/system/cpu/possible)"
    )


def explain_create_error(err: S.BpfError, map_name: str, declared: int) -> DiagnosticError:
    """A DiagnosticError for BPF_MAP_CREATE of a cpumap failing with ``err`` (E2BIG/EINVAL)."""
    if err.errno == E.E2BIG:
        return DiagnosticError(
            error(
                "cpumap-too-large",
                f"cpumap '{map_name}': max_entries {declared} is above this kernel's CPU limit",
                hint=f"declare max_entries <= {possible_cpus()} (possible CPUs of this host)",
            )
        )
    return DiagnosticError(
        error(
            "cpumap-invalid",
            f"cpumap '{map_name}': the kernel refused the definition ({err})",
            hint="a cpumap has u32 keys and values of 4 (qsize) or 8 bytes (bpf_cpumap_val)",
        )
    )


def create_cpumap(
    map_name: str, max_entries: int, value_size: int = 8, *, clamp: bool = True
) -> tuple[S.Fd, str | None]:
    """BPF_MAP_CREATE of a cpumap (u32 keys, ``value_size`` 4 or 8) -> (Fd, warning or None).

    With ``clamp`` max_entries is cut to the possible CPUs (see :func:`clamp_max_entries`);
    without, an oversized declaration fails.  Kernel refusals become DiagnosticError naming
    the map, the declared size and the host limit (FIELD-BUGS B09).
    """
    if value_size not in (4, 8):
        raise UsageError(
            error(
                "cpumap-invalid",
                f"cpumap '{map_name}': value size {value_size}, expected 4 (qsize) or 8 "
                "(struct bpf_cpumap_val)",
            )
        )
    n, warning = clamp_max_entries(max_entries, map_name) if clamp else (max_entries, None)
    try:
        return S.map_create(MapType.CPUMAP, 4, value_size, n, name=map_name), warning
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise explain_create_error(e, map_name, max_entries) from None


def xdp_attach_type(prog_fd: int) -> AttachType | None:
    """The expected attach type of a loaded XDP program: XDP, XDP_CPUMAP or XDP_DEVMAP.

    ``bpf_prog_info`` does not report it, so this asks BPF_PROG_TEST_RUN with an oversized
    live-frames batch: net/bpf/test_run.c refuses cpumap/devmap programs with EINVAL
    before it checks the batch size (E2BIG for a plain XDP program).  The program never
    runs.  A device-bound program (prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY, which
    ``bpf_prog_info`` does not show either) is refused with EINVAL too: throw-away
    devmap and cpumap entries tell the three apart (:func:`_entry_kind`).  Returns None
    for a program that is not XDP.
    """
    info = S.prog_info(prog_fd)
    if info.type != ProgramType.XDP:
        return None
    try:
        S.prog_test_run(
            prog_fd, bytes(64), flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=TEST_XDP_MAX_BATCH + 1
        )
    except S.BpfError as e:
        if e.errno == E.E2BIG:
            return AttachType.XDP
        if e.errno == E.EINVAL:
            return _entry_kind(prog_fd)
        raise
    return AttachType.XDP  # pragma: no cover - the kernel ran it: a plain XDP program


def is_dev_bound(prog_fd: int) -> bool:
    """True when the loaded program ``prog_fd`` is a device-bound XDP program
    (prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY): a test run refuses it (EINVAL) and neither
    a devmap nor a cpumap entry takes it (see :func:`xdp_attach_type`)."""
    if S.prog_info(prog_fd).type != ProgramType.XDP:
        return False
    try:
        S.prog_test_run(
            prog_fd, bytes(64), flags=BPF_F_TEST_XDP_LIVE_FRAMES, batch_size=TEST_XDP_MAX_BATCH + 1
        )
    except S.BpfError as e:
        return e.errno == E.EINVAL and _entry_kind(prog_fd) == AttachType.XDP
    return False  # pragma: no cover - the kernel ran it


def refuse_dev_bound(prog_fd: int, prog_name: str, dev: str, mode: str) -> None:
    """Raise DiagnosticError when the kernel refused (EINVAL) to attach a device-bound
    program to ``dev``: net/core/dev.c dev_xdp_attach takes it only on the interface it was
    loaded for ("Program bound to different device") and not in generic mode ("Can't
    attach device-bound programs in generic mode")."""
    if not is_dev_bound(prog_fd):
        return
    what = (
        f"program '{prog_name}' is device-bound (it calls the XDP metadata kfuncs and was "
        "loaded for one interface)"
    )
    if mode == "generic":
        raise DiagnosticError(
            error(
                "attach-failed",
                f"{what}: the kernel attaches device-bound programs in native mode only",
                hint=f"attach it with --mode native (the default) to {dev}",
            )
        )
    raise DiagnosticError(
        error(
            "attach-failed",
            f"{what}: the kernel attaches it only to that interface, which is not {dev}",
            hint=f"load it for {dev}: `bpfdsl attach FILE --dev {dev}` or "
            f"`bpfdsl load FILE --dev {dev}`",
        )
    )


def _entry_kind(prog_fd: int) -> AttachType:
    """BPF_XDP_DEVMAP, BPF_XDP_CPUMAP or (neither entry takes it: a device-bound plain
    program) BPF_XDP: a throw-away 1-slot devmap entry for ``lo`` (ifindex 1 in every
    network namespace) accepts only the first (kernel/bpf/devmap.c), a 1-slot cpumap entry
    (qsize 1) only the second (kernel/bpf/cpumap.c __cpu_map_load_bpf_program)."""
    with S.map_create(MapType.DEVMAP, 4, 8, 1, name="bpfdsl_probe") as m:
        try:
            S.map_update(m, struct.pack("<I", 0), struct.pack("<Ii", 1, int(prog_fd)))
        except S.BpfError:
            pass
        else:
            return AttachType.XDP_DEVMAP
    with S.map_create(MapType.CPUMAP, 4, 8, 1, name="bpfdsl_probe") as m:
        try:
            S.map_update(m, struct.pack("<I", 0), struct.pack("<Ii", 1, int(prog_fd)))
        except S.BpfError:
            return AttachType.XDP
        return AttachType.XDP_CPUMAP


_FLAVOUR: dict[AttachType | None, str] = {
    AttachType.XDP: "xdp (attach to an interface)",
    AttachType.XDP_CPUMAP: "xdp(cpumap) (section xdp/cpumap)",
    AttachType.XDP_DEVMAP: "xdp(devmap) (section xdp/devmap)",
}


def entry_value(
    info: S.MapInfo,
    first: int,
    prog_fd: int | None,
    want: AttachType,
    map_name: str,
    prog_name: str = "",
) -> bytes:
    """Value bytes of a cpumap/devmap entry: ``struct bpf_cpumap_val`` {qsize, bpf_prog.fd} or
    ``struct bpf_devmap_val`` {ifindex, bpf_prog.fd} (include/uapi/linux/bpf.h), cut to the
    map's value_size (4 = no program slot).  Checks the program's expected attach type.

    Raises UsageError when a program is given but the map has 4-byte values, and
    DiagnosticError when the program lacks the ``want`` attach type."""
    kind = "cpumap" if want == AttachType.XDP_CPUMAP else "devmap"
    if prog_fd is not None:
        if info.value_size < 8:
            what = "qsize" if kind == "cpumap" else "ifindex"
            prog = "an on-CPU program" if kind == "cpumap" else "a devmap program"
            raise UsageError(
                error(
                    f"{kind}-no-program-slot",
                    f"{kind} '{map_name}' has {info.value_size}-byte values ({what} only); "
                    f"{prog} needs struct bpf_{kind}_val (8 bytes)",
                )
            )
        require_entry_program(prog_fd, want, map_name, prog_name or "?")
    value = struct.pack("<Ii", first, int(prog_fd) if prog_fd is not None else 0)
    return value[: info.value_size]


def require_entry_program(prog_fd: int, want: AttachType, map_name: str, prog_name: str) -> None:
    """Raise DiagnosticError unless ``prog_fd`` is an XDP program of attach type ``want``.

    ``want`` is XDP_CPUMAP for cpumap entries, XDP_DEVMAP for devmap entries (the kernel
    answers a bare ENOMEM / EINVAL otherwise).
    """
    got = xdp_attach_type(prog_fd)
    if got == want:
        return
    kind = "cpumap" if want == AttachType.XDP_CPUMAP else "devmap"
    what = _FLAVOUR.get(got, f"not an XDP program (type {S.prog_info(prog_fd).type})")
    raise DiagnosticError(
        error(
            f"{kind}-wrong-program",
            f"{kind} '{map_name}': program '{prog_name}' is {what}, "
            f"but a {kind} entry runs only programs loaded for {_FLAVOUR[want]}",
            hint=f"declare the program as `xdp({kind}) fn {prog_name}(ctx)` "
            f'(C: SEC("xdp/{kind}")) and load it again',
        )
    )


def refuse_on_interface(prog_fd: int, prog_name: str, dev: str) -> None:
    """Raise DiagnosticError when a cpumap/devmap program is about to be attached to ``dev``.

    The kernel refuses it with EINVAL (net/core/dev.c dev_xdp_attach); this says why first.
    """
    got = xdp_attach_type(prog_fd)
    if got in (AttachType.XDP_CPUMAP, AttachType.XDP_DEVMAP):
        kind = "cpumap" if got == AttachType.XDP_CPUMAP else "devmap"
        raise DiagnosticError(
            error(
                "entry-program-on-interface",
                f"program '{prog_name}' is an xdp({kind}) program: it runs on {kind} entries "
                f"and cannot be attached to interface {dev}",
                hint=f"attach a plain `xdp` program to {dev}; give '{prog_name}' to a {kind} "
                f"entry (`bpfdsl {kind} set ... --prog {prog_name}`)",
            )
        )


def require_map(map_fd: int | S.Fd, want: Collection[MapType], map_name: str) -> S.MapInfo:
    """The map's ``bpf_map_info``; UsageError (``wrong-map-kind``) unless its type is in
    ``want`` (a tuple, or a set of :mod:`bpfdsl.abi.map_types` such as ``DEVMAP_TYPES``)."""
    info = S.map_info(map_fd)
    if info.type not in want:
        names = " or ".join(t.name.lower() for t in sorted(want))
        try:
            have = MapType(info.type).name.lower()
        except ValueError:
            have = str(info.type)
        raise UsageError(
            error("wrong-map-kind", f"map '{map_name}' is of kind {have}, not {names}")
        )
    return info


def check_slot(info: S.MapInfo, key: int, map_name: str, code: str, what: str) -> None:
    """UsageError ``code`` unless ``key`` is a slot 0..max_entries-1 of the array-like map
    ``info`` (cpumap, devmap: the kernel refuses others with EINVAL or E2BIG); ``what``
    names the key in the message ("CPU", "slot")."""
    n = info.max_entries
    if not 0 <= key < n:
        kind = MapType(info.type).name.lower()
        raise UsageError(
            error(
                code,
                f"{kind} '{map_name}': {what} {key} is outside the map's slots 0..{n - 1} "
                f"(max_entries {n} as created)",
                hint=f"pick a {what} below {n}",
            )
        )


def cpumap_set(
    map_fd: int | S.Fd,
    cpu: int,
    qsize: int,
    prog_fd: int | None = None,
    *,
    map_name: str = "cpumap",
    prog_name: str = "",
) -> None:
    """Put CPU ``cpu`` into the cpumap: a queue of ``qsize`` frames (1..16384) and optionally
    the on-CPU program ``prog_fd`` (XDP, loaded with BPF_XDP_CPUMAP).

    Raises DiagnosticError (qsize 0 -- which the kernel takes as *delete* --, CPU not possible
    or beyond max_entries, wrong program flavour, map value too small for a program).
    """
    info = require_map(map_fd, (MapType.CPUMAP,), map_name)
    if qsize <= 0:
        raise UsageError(
            error(
                "cpumap-qsize-zero",
                f"cpumap '{map_name}': qsize must be 1..{CPUMAP_QSIZE_MAX} (the kernel treats qsize 0 "
                "as deleting the entry)",
                hint="use `bpfdsl cpumap delete` to remove a CPU; a typical qsize is 192..2048",
            )
        )
    if qsize > CPUMAP_QSIZE_MAX:
        raise UsageError(
            error("cpumap-qsize", f"cpumap '{map_name}': qsize {qsize} is above {CPUMAP_QSIZE_MAX}")
        )
    n = possible_cpus()
    if not 0 <= cpu < min(n, info.max_entries):
        raise UsageError(
            error(
                "cpumap-cpu",
                f"cpumap '{map_name}': CPU {cpu} is not usable (possible CPUs 0..{n - 1}, "
                f"map slots 0..{info.max_entries - 1})",
                hint=f"pick a CPU below {min(n, info.max_entries)}",
            )
        )
    value = entry_value(info, qsize, prog_fd, AttachType.XDP_CPUMAP, map_name, prog_name)
    try:
        S.map_update(map_fd, struct.pack("<I", cpu), value)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise _update_error(e, map_name, cpu) from None


def _update_error(e: S.BpfError, map_name: str, cpu: int) -> DiagnosticError:
    why = {
        E.ENODEV: f"CPU {cpu} is not a possible CPU of this host",
        E.E2BIG: f"CPU {cpu} is beyond the map's max_entries",
        E.ENOMEM: "the kernel could not set up the entry (out of memory, or the program "
        "was not loaded for BPF_XDP_CPUMAP)",
        E.EINVAL: "the kernel refused the entry value",
    }.get(e.errno, str(e))
    return DiagnosticError(error("cpumap-update", f"cpumap '{map_name}' CPU {cpu}: {why}"))


def cpumap_delete(map_fd: int | S.Fd, cpu: int, *, map_name: str = "cpumap") -> bool:
    """Remove CPU ``cpu`` from the cpumap; False when the slot was already empty.

    The kernel's delete of a cpumap slot succeeds whether or not the slot was filled
    (kernel/bpf/cpumap.c cpu_map_delete_elem), so the slot is looked up first
    (:func:`bpfdsl.kernel.syscall.map_delete_slot`).  Raises
    UsageError (``cpumap-cpu``) for a CPU outside the map's slots 0..max_entries-1 (the
    kernel's EINVAL), naming the slots the map has -- a loader may have created it smaller
    than declared (clamped to the possible CPUs, FIELD-BUGS B09)."""
    info = require_map(map_fd, (MapType.CPUMAP,), map_name)
    check_slot(info, cpu, map_name, "cpumap-cpu", "CPU")
    key = struct.pack("<I", cpu)
    try:
        return S.map_delete_slot(map_fd, key, info.type, info.value_size)
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise _update_error(e, map_name, cpu) from None


def cpumap_entries(map_fd: int, *, map_name: str = "cpumap") -> list[CpumapEntry]:
    """The filled slots of the cpumap, by CPU (program ids as the kernel reports them)."""
    info = require_map(map_fd, (MapType.CPUMAP,), map_name)
    out = []
    for cpu in range(min(info.max_entries, possible_cpus())):
        raw = S.map_lookup(map_fd, struct.pack("<I", cpu), info.value_size)
        if raw is None:
            continue
        raw = raw.ljust(8, b"\0")
        qsize, prog_id = struct.unpack("<II", raw[:8])
        out.append(CpumapEntry(cpu, qsize, prog_id))
    return out
