"""bpfdsl: a small language for eBPF networking programs, compiled to standard eBPF ELF objects.

The public API (everything else is internal and may move).  Each name is imported on first
use, so ``import bpfdsl`` imports no stage until one is asked for::

    import bpfdsl

    res = bpfdsl.compile_file("filter.bpfd")          # CompileResult: .obj (ELF bytes), .warnings
    spec = bpfdsl.read_object(res.obj)                # CollectionSpec: programs, maps, configs
    report = bpfdsl.check_object(spec)                # CheckResult: .ok, per-program errors
    for r in bpfdsl.run(spec, [frame], engine="interp"):   # or engine="kernel" (root)
        print(r.verdict, r.data_out.hex())
    coll = bpfdsl.load_collection(spec)               # kernel objects (root): .programs, .maps
    att = bpfdsl.attach_xdp(coll.programs["udp_filter"].fd, "veth0", link_pin="/sys/fs/bpf/x/link")

Stages: ``compile_source``/``compile_file`` (source text -> ELF bytes, the checker included),
``read_object`` (ELF bytes or path -> CollectionSpec; pure, no kernel), ``check_object``
(verifier-like analysis of a CollectionSpec, also of clang's objects; how it checks -- target
kernel, unprivileged loader, time, margin -- is a :class:`CheckOptions`:
``check_object(spec, options=CheckOptions(kernel=(6, 1)))``), ``load_collection``
(BPF_MAP_CREATE/BPF_PROG_LOAD: maps, configs, programs), ``attach_xdp``/``detach_xdp``
(BPF links or netlink), ``run`` (a program on frames: the kernel's BPF_PROG_TEST_RUN or the
userspace interpreter), ``open_events`` (the records a loaded program sends through a ringbuf
or perf_event_array map: ``with bpfdsl.open_events("/sys/fs/bpf/x:samples") as ev:
ev.poll(1.0)`` -> list of :class:`Event`, decoded by BTF type; ``ev.poll_batches(1.0)`` ->
a :class:`RecordBatch` per ring, decoded only when asked: ``.array()`` a numpy structured
array, ``.rows()`` tuples, ``.json_lines()``, ``.events()``), ``open_map`` (a live map,
typed by its BTF: ``get``/``set``/``remove``, ``items()`` and ``update_batch``/``delete_batch``
through the kernel's BPF_MAP_*_BATCH commands).  Errors: every stage raises :class:`DiagnosticError` (file, line,
column, hints; :class:`UsageError` for unusable input); the loader's ``LoadError`` and
``VerifierError`` are DiagnosticErrors too; ``str()`` is the one-line form and
``render()`` the full one.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it (imported on first access, PEP 562)
_PUBLIC: dict[str, str] = {
    "compile_source": "bpfdsl.compiler",
    "compile_file": "bpfdsl.compiler",
    "CompileResult": "bpfdsl.compiler",
    "read_object": "bpfdsl.obj.collection",
    "CollectionSpec": "bpfdsl.obj.spec",
    "ProgramSpec": "bpfdsl.obj.spec",
    "check_object": "bpfdsl.checker",
    "CheckOptions": "bpfdsl.checker",
    "CheckResult": "bpfdsl.checker.report",
    "load_collection": "bpfdsl.runtime.loader",
    "Collection": "bpfdsl.runtime.loader",
    "LoadError": "bpfdsl.runtime.loader",
    "VerifierError": "bpfdsl.runtime.loader",
    "attach_xdp": "bpfdsl.runtime.attach",
    "detach_xdp": "bpfdsl.runtime.attach",
    "open_events": "bpfdsl.runtime.events",
    "open_map": "bpfdsl.runtime.mapview",
    "MapView": "bpfdsl.runtime.mapview",
    "EventStream": "bpfdsl.runtime.events",
    "Event": "bpfdsl.runtime.events",
    "RecordBatch": "bpfdsl.runtime.events",
    "PacketResult": "bpfdsl.runtime.testrun",
    "Span": "bpfdsl.diagnostics",
    "Diagnostic": "bpfdsl.diagnostics",
    "DiagnosticError": "bpfdsl.diagnostics",
    "UsageError": "bpfdsl.diagnostics",
}

__all__ = [
    "CheckOptions",
    "CheckResult",
    "Collection",
    "CollectionSpec",
    "CompileResult",
    "Diagnostic",
    "DiagnosticError",
    "Event",
    "EventStream",
    "LoadError",
    "MapView",
    "PacketResult",
    "ProgramSpec",
    "RecordBatch",
    "Span",
    "UsageError",
    "VerifierError",
    "__version__",
    "attach_xdp",
    "check_object",
    "compile_file",
    "compile_source",
    "detach_xdp",
    "load_collection",
    "open_events",
    "open_map",
    "read_object",
    "run",
]

if TYPE_CHECKING:  # for type checkers and IDEs; at run time names come from __getattr__
    from bpfdsl.checker import CheckOptions, check_object
    from bpfdsl.checker.report import CheckResult
    from bpfdsl.compiler import CompileResult, compile_file, compile_source
    from bpfdsl.diagnostics import Diagnostic, DiagnosticError, Span, UsageError
    from bpfdsl.obj.collection import read_object
    from bpfdsl.obj.spec import CollectionSpec, ProgramSpec
    from bpfdsl.runtime.attach import attach_xdp, detach_xdp
    from bpfdsl.runtime.loader import Collection, LoadError, VerifierError, load_collection
    from bpfdsl.runtime.mapview import MapView, open_map
    from bpfdsl.runtime.testrun import PacketResult


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'bpfdsl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return __all__


def run(
    obj: Any,
    frames: Iterable[bytes],
    *,
    program: str | None = None,
    engine: str = "kernel",
    config: dict[str, Any] | None = None,
    repeat: int = 1,
) -> list[PacketResult]:
    """Run one program of ``obj`` on each Ethernet frame of ``frames`` (wire-order bytes).

    ``obj``: a CollectionSpec, ELF bytes, or a path to a ``.o`` or ``.bpfd`` file (compiled
    first).  ``program``: its name or section, needed when the object holds several.
    ``engine``: ``"kernel"`` (BPF_PROG_TEST_RUN; root) or ``"interp"`` (the userspace
    interpreter; no privileges).  ``config``: ``.rodata`` config values by name.
    ``repeat``: runs per frame (``duration_ns`` is their mean, kernel engine only).
    Returns one :class:`PacketResult` per frame, in order (``verdict`` like ``"XDP_DROP"``,
    ``retval``, ``data_out``, ``changes``; ``skipped`` says why a frame was not run).
    Raises UsageError (unknown program, unreadable file), DiagnosticError (compile errors),
    LoadError/VerifierError (kernel engine: the object does not load).
    """
    import os

    from bpfdsl.obj.collection import read_object
    from bpfdsl.obj.spec import CollectionSpec, choose_program
    from bpfdsl.runtime import inventory, testrun

    if isinstance(obj, CollectionSpec):
        spec = obj
    elif isinstance(obj, bytes | bytearray):
        spec = read_object(bytes(obj))
    elif os.fspath(obj).endswith(".bpfd"):
        from bpfdsl.compiler import compile_file

        res = compile_file(obj)
        spec = res.spec or read_object(res.obj)
    else:
        spec = read_object(inventory.object_bytes(os.fspath(obj)))
    name, kind = choose_program(spec, program)
    eng = testrun.open_engine(engine, spec, config=config)
    try:
        return testrun.run_packets(eng, name, kind, enumerate(frames, 1), repeat=repeat)
    finally:
        eng.close()
