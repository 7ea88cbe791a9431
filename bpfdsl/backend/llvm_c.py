"""A lean ctypes binding to llvmlite's own ``libllvmlite.so``: only what bpfdsl.backend.target needs.

Stage: back end (layer 4), used by :mod:`bpfdsl.backend.target` only.  ``import llvmlite.binding``
costs 75-85 ms per process (its package imports ~58 modules and sets up ~414 ctypes
prototypes); bpfdsl calls 20 of the library's ``LLVMPY_*`` functions.  This module dlopens the
same file (found with ``importlib.util.find_spec("llvmlite")``, without executing llvmlite)
and declares argtypes/restype for those functions only.

Source of every prototype and calling convention: llvmlite 0.50.0's Python sources
(``llvmlite/binding/{ffi,initfini,options,context,module,targets,newpassmanagers}.py``):
error texts come back through a ``char **`` out-parameter that the caller frees with
``LLVMPY_DisposeString`` (ffi.OutputString); emitted code comes back in an LLVM
MemoryBuffer (``LLVMPY_GetBufferStart``/``GetBufferSize``/``DisposeMemoryBuffer``); modules
live in the global context (``LLVMPY_GetGlobalContext``, never disposed); a module run through
a pass manager stays owned by the caller.  The prototypes are valid only for the llvmlite
versions in :data:`SUPPORTED`: :func:`load` returns None for any other version, a missing
library or symbol, or when ``BPFDSL_LLVM=llvmlite`` is set, and target.py then uses
``llvmlite.binding`` (same library file, hence the same dlopen handle and LLVM global state).

Not thread-safe (llvmlite.binding serialises calls with a lock; bpfdsl compiles on one thread).
"""

from __future__ import annotations

import ctypes
import os
import sys
from ctypes import POINTER, byref, c_bool, c_char_p, c_int, c_size_t, c_void_p
from importlib.util import find_spec

SUPPORTED = frozenset({"0.50.0"})  # llvmlite versions whose prototypes are copied below
ENV = "BPFDSL_LLVM"  # "llvmlite": always use llvmlite.binding


def _opaque(name: str) -> type:
    """``POINTER`` to an opaque struct, as llvmlite's ffi._make_opaque_ref."""
    return POINTER(type(name, (ctypes.Structure,), {}))


ContextRef = _opaque("LLVMContext")
ModuleRef = _opaque("LLVMModule")
TargetRef = _opaque("LLVMTarget")
TargetMachineRef = _opaque("LLVMTargetMachine")
MemoryBufferRef = _opaque("LLVMMemoryBuffer")
PTORef = _opaque("LLVMPipeLineTuningOptions")
ModulePassManagerRef = _opaque("LLVMModulePassManager")
PassBuilderRef = _opaque("LLVMPassBuilder")
_OUT = POINTER(c_char_p)  # char **: an error/print string the caller disposes

# name -> (argtypes, restype); None = ctypes' default (as llvmlite leaves it)
_PROTOS: dict[str, tuple[list | None, object]] = {
    # initfini.py
    "LLVMPY_GetVersionInfo": (None, ctypes.c_uint),
    "LLVMPY_InitializeAllTargetInfos": (None, c_int),
    "LLVMPY_InitializeAllTargets": (None, c_int),
    "LLVMPY_InitializeAllTargetMCs": (None, c_int),
    "LLVMPY_InitializeAllAsmPrinters": (None, c_int),
    # options.py
    "LLVMPY_SetCommandLine": ([c_char_p, c_char_p], c_int),
    # ffi.py (OutputString.close: argtypes unset, called with the c_char_p)
    "LLVMPY_DisposeString": (None, c_int),
    # context.py
    "LLVMPY_GetGlobalContext": (None, ContextRef),
    # module.py
    "LLVMPY_ParseAssembly": ([ContextRef, c_char_p, _OUT], ModuleRef),
    "LLVMPY_DisposeModule": ([ModuleRef], c_int),
    "LLVMPY_PrintModuleToString": ([ModuleRef, _OUT], c_int),
    "LLVMPY_VerifyModule": ([ModuleRef, _OUT], c_bool),
    "LLVMPY_SetDataLayout": ([ModuleRef, c_char_p], c_int),
    "LLVMPY_SetTarget": ([ModuleRef, c_char_p], c_int),
    # targets.py
    "LLVMPY_GetTargetFromTriple": ([c_char_p, _OUT], TargetRef),
    "LLVMPY_CreateTargetMachine": (
        # target, triple, cpu, features, opt, reloc, codemodel, printmc, jit, abiname
        [TargetRef, *[c_char_p] * 3, c_int, c_char_p, c_char_p, c_int, c_int, c_char_p],
        TargetMachineRef,
    ),
    "LLVMPY_TargetMachineEmitToMemory": (
        [TargetMachineRef, ModuleRef, c_int, _OUT],
        MemoryBufferRef,
    ),
    "LLVMPY_GetBufferStart": ([MemoryBufferRef], c_void_p),
    "LLVMPY_GetBufferSize": ([MemoryBufferRef], c_size_t),
    "LLVMPY_DisposeMemoryBuffer": ([MemoryBufferRef], c_int),
    # newpassmanagers.py
    "LLVMPY_CreatePipelineTuningOptions": (None, PTORef),
    "LLVMPY_DisposePipelineTuningOptions": ([PTORef], c_int),
    "LLVMPY_CreatePassBuilder": ([TargetMachineRef, PTORef], PassBuilderRef),
    "LLVMPY_DisposePassBuilder": ([PassBuilderRef], c_int),
    "LLVMPY_buildPerModuleDefaultPipeline": ([PassBuilderRef, c_int], ModulePassManagerRef),
    "LLVMPY_RunNewModulePassManager": (
        [ModulePassManagerRef, ModuleRef, PassBuilderRef],
        c_int,
    ),
    "LLVMPY_DisposeNewModulePassManger": ([ModulePassManagerRef], c_int),
}


def llvmlite_dir() -> str | None:
    """The installed llvmlite package directory, found without importing llvmlite: the
    first ``sys.path`` entry holding ``llvmlite/__init__.py`` (as the path finder resolves
    a regular package; a stat per entry, where ``PathFinder.find_spec`` lists directories:
    ~1 ms), else ``importlib.util.find_spec`` (import hooks)."""
    for entry in sys.path:
        pkg = os.path.join(entry or os.curdir, "llvmlite")
        if os.path.isfile(os.path.join(pkg, "__init__.py")):
            return os.path.abspath(pkg)

    spec = find_spec("llvmlite")
    locs = spec.submodule_search_locations if spec else None
    return locs[0] if locs else None


def llvmlite_version(pkg_dir: str) -> str | None:
    """llvmlite's version string as written in ``<pkg_dir>/_version.py``
    (``version_version = '0.50.0'``, versioneer), or None if unreadable."""
    try:
        with open(os.path.join(pkg_dir, "_version.py"), encoding="utf-8") as f:
            for line in f:
                if line.startswith("version_version"):
                    return line.split("=", 1)[1].strip().strip("'\"")
    except OSError:
        return None
    return None


class Lib:
    """libllvmlite.so with the prototypes of :data:`_PROTOS`; functions are attributes.

    Raises OSError (cannot dlopen) or AttributeError (a symbol is missing) on construction."""

    def __init__(self, path: str) -> None:
        self.path = path
        cdll = ctypes.CDLL(path)
        for name, (argtypes, restype) in _PROTOS.items():
            fn = getattr(cdll, name)
            if argtypes is not None:
                fn.argtypes = argtypes
            fn.restype = restype
            setattr(self, name, fn)
        self._ctx = self.LLVMPY_GetGlobalContext()

    def _take(self, out: c_char_p) -> str:
        """The text of an out-string, disposed (ffi.OutputString: str() then close())."""
        if not out:
            return ""
        try:
            return (out.value or b"").decode("utf-8")
        finally:
            self.LLVMPY_DisposeString(out)

    def initialize(self) -> None:
        """initialize_all_targets() + initialize_all_asmprinters() (initfini.py)."""
        self.LLVMPY_InitializeAllTargetInfos()
        self.LLVMPY_InitializeAllTargets()
        self.LLVMPY_InitializeAllTargetMCs()
        self.LLVMPY_InitializeAllAsmPrinters()

    def set_option(self, name: str, option: str) -> None:
        """Set an LLVM cl::opt, as ``llvm.set_option`` (once per option per process)."""
        self.LLVMPY_SetCommandLine(name.encode("utf-8"), option.encode("utf-8"))

    def target_machine(self, triple: str, cpu: str, opt: int = 2) -> TargetMachine:
        """``Target.from_triple(triple).create_target_machine(cpu=cpu, opt=opt)`` with
        llvmlite's defaults (features '', reloc 'default', codemodel 'jitdefault', abi '')."""
        err = c_char_p(None)
        target = self.LLVMPY_GetTargetFromTriple(triple.encode("utf-8"), byref(err))
        msg = self._take(err)
        if not target:
            raise RuntimeError(msg)
        tm = self.LLVMPY_CreateTargetMachine(
            target, triple.encode(), cpu.encode(), b"", opt, b"default", b"jitdefault", 0, 0, b""
        )
        if not tm:
            raise RuntimeError("Cannot create target machine")
        return TargetMachine(self, tm)

    def parse_assembly(self, text: str) -> Module:
        """``llvm.parse_assembly(text)`` in the global context; RuntimeError
        ``"LLVM IR parsing error\\n<LLVM message>"`` on failure."""
        err = c_char_p(None)
        ptr = self.LLVMPY_ParseAssembly(self._ctx, c_char_p(text.encode("utf-8")), byref(err))
        if err:
            msg = self._take(err)
            if ptr:
                self.LLVMPY_DisposeModule(ptr)
            raise RuntimeError(f"LLVM IR parsing error\n{msg}")
        return Module(self, ptr)

    def run_default_pipeline(self, mod: Module, tm: TargetMachine, speed_level: int) -> None:
        """``PassBuilder(tm, PipelineTuningOptions(speed_level)).getModulePassManager()
        .run(mod, pb)`` (newpassmanagers.py): LLVM's default O``speed_level`` module pipeline
        with ``tm``'s IR passes; ``mod`` is changed in place and stays owned by the caller."""
        if not 0 <= speed_level <= 3:
            raise ValueError("Optimization level for speed should be 0, 1, 2, or 3")
        pto = self.LLVMPY_CreatePipelineTuningOptions()
        pb = self.LLVMPY_CreatePassBuilder(tm.ptr, pto)
        try:
            mpm = self.LLVMPY_buildPerModuleDefaultPipeline(pb, speed_level)
            try:
                self.LLVMPY_RunNewModulePassManager(mpm, mod.ptr, pb)
            finally:
                self.LLVMPY_DisposeNewModulePassManger(mpm)
        finally:
            self.LLVMPY_DisposePassBuilder(pb)
            self.LLVMPY_DisposePipelineTuningOptions(pto)


class Module:
    """An LLVM module (``llvm.ModuleRef`` subset): ``str()`` prints its IR; disposed when
    garbage-collected or by :meth:`close`."""

    def __init__(self, lib: Lib, ptr: object) -> None:
        self._lib, self.ptr = lib, ptr

    @property
    def triple(self) -> str:
        raise AttributeError("write-only here: bpfdsl sets the triple, never reads it")

    @triple.setter
    def triple(self, value: str) -> None:
        self._lib.LLVMPY_SetTarget(self.ptr, ctypes.create_string_buffer(value.encode()))

    @property
    def data_layout(self) -> str:
        raise AttributeError("write-only here: bpfdsl sets the data layout, never reads it")

    @data_layout.setter
    def data_layout(self, value: str) -> None:
        self._lib.LLVMPY_SetDataLayout(self.ptr, ctypes.create_string_buffer(value.encode()))

    def verify(self) -> None:
        """LLVM's module verifier; RuntimeError with its message if the IR is invalid."""
        err = c_char_p(None)
        bad = self._lib.LLVMPY_VerifyModule(self.ptr, byref(err))
        msg = self._lib._take(err)
        if bad:
            raise RuntimeError(msg)

    def __str__(self) -> str:
        out = c_char_p(None)
        self._lib.LLVMPY_PrintModuleToString(self.ptr, byref(out))
        return self._lib._take(out)

    def close(self) -> None:
        """Dispose of the LLVM module (idempotent)."""
        ptr, self.ptr = self.ptr, None
        if ptr:
            self._lib.LLVMPY_DisposeModule(ptr)

    def __del__(self) -> None:
        if getattr(self, "ptr", None):
            self.close()


class TargetMachine:
    """An LLVM TargetMachine (``llvm.TargetMachine`` subset); kept for the process."""

    def __init__(self, lib: Lib, ptr: object) -> None:
        self._lib, self.ptr = lib, ptr

    def _emit(self, mod: Module, use_object: bool) -> bytes:
        lib, err = self._lib, c_char_p(None)
        mb = lib.LLVMPY_TargetMachineEmitToMemory(self.ptr, mod.ptr, int(use_object), byref(err))
        msg = lib._take(err)
        if not mb:
            raise RuntimeError(msg)
        try:
            return ctypes.string_at(lib.LLVMPY_GetBufferStart(mb), lib.LLVMPY_GetBufferSize(mb))
        finally:
            lib.LLVMPY_DisposeMemoryBuffer(mb)

    def emit_object(self, mod: Module) -> bytes:
        """ELF relocatable object bytes for ``mod``."""
        return self._emit(mod, True)

    def emit_assembly(self, mod: Module) -> str:
        """Assembly text for ``mod``."""
        return self._emit(mod, False).decode("utf-8")


_loaded: list[Lib | None] = []  # [] = not tried yet


def load() -> Lib | None:
    """The lean binding, or None when llvmlite.binding must be used instead: ``BPFDSL_LLVM=
    llvmlite``, llvmlite not installed, its version not in :data:`SUPPORTED`, or the library
    cannot be opened or lacks a symbol.  Tried once per process."""
    if not _loaded:
        lib = None
        if os.environ.get(ENV, "") != "llvmlite":
            mod = sys.modules.get("llvmlite")  # imported already by codegen (llvmlite.ir)?
            if mod is not None and getattr(mod, "__path__", None):
                pkg, version = mod.__path__[0], getattr(mod, "__version__", None)
            else:
                pkg = llvmlite_dir()
                version = llvmlite_version(pkg) if pkg else None
            if pkg and version in SUPPORTED:
                try:
                    lib = Lib(os.path.join(pkg, "binding", "libllvmlite.so"))
                except (OSError, AttributeError):
                    lib = None
        _loaded.append(lib)
    return _loaded[0]
