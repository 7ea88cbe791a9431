"""A lean ctypes binding to llvmlite's own ``libllvmlite.so``: only what bpfdsl.backend.target needs.

Stage: back end, used by :mod:`bpfdsl.backend.target` only, which falls back to
``llvmlite.binding`` (the documented API) whenever this binding is not usable.  bpfdsl
calls a few of the library's ``LLVMPY_*`` functions (:data:`_PROTOS`); this module dlopens the file
``llvmlite.binding`` would open (``<llvmlite package>/binding/libllvmlite.so``) and declares
argtypes/restype for those functions only, without importing ``llvmlite.binding``.

Source of every prototype and calling convention: llvmlite 0.50.0's Python sources
(``llvmlite/binding/{ffi,initfini,options,context,module,targets,newpassmanagers}.py``):
error texts come back through a ``char **`` out-parameter that the caller frees with
``LLVMPY_DisposeString`` (ffi.OutputString); emitted code comes back in an LLVM
MemoryBuffer (``LLVMPY_GetBufferStart``/``GetBufferSize``/``DisposeMemoryBuffer``); modules
live in the global context (``LLVMPY_GetGlobalContext``, never disposed); a module run through
a pass manager stays owned by the caller.  The prototypes are valid only for the llvmlite
versions in :data:`SUPPORTED`: :func:`load` returns None for any other version (pyproject
allows llvmlite >= 0.44), a missing library or symbol, or when ``BPFDSL_LLVM=llvmlite`` is
set, and :func:`fallback_reason` says which; target.py then uses ``llvmlite.binding`` (same
library file, hence the same dlopen handle and LLVM global state).

Not thread-safe (llvmlite.binding serialises calls with a lock; bpfdsl compiles on one thread).
"""

from __future__ import annotations

import ctypes
import os
from ctypes import POINTER, byref, c_bool, c_char_p, c_int, c_size_t, c_void_p
from typing import TYPE_CHECKING, Any

import llvmlite

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


class Lib:
    """libllvmlite.so with the prototypes of :data:`_PROTOS`; functions are attributes.

    Raises OSError (cannot dlopen) or AttributeError (a symbol is missing) on construction."""

    if TYPE_CHECKING:  # the ctypes functions of _PROTOS, set as attributes by __init__

        def __getattr__(self, name: str) -> Any: ...

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

    def llvm_version(self) -> tuple[int, int, int]:
        """The LLVM version of the library, as ``llvm.llvm_version_info`` (initfini.py:
        ``LLVMPY_GetVersionInfo`` packs major << 16 | minor << 8 | patch)."""
        v = int(self.LLVMPY_GetVersionInfo())
        return (v >> 16) & 0xFF, (v >> 8) & 0xFF, v & 0xFF

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
_why: list[str] = []  # why load() gave None


def library_path() -> str:
    """The ``libllvmlite.so`` of the installed llvmlite package (the file llvmlite.binding's
    ffi loads on Linux)."""
    return os.path.join(os.path.dirname(llvmlite.__file__), "binding", "libllvmlite.so")


def load() -> Lib | None:
    """The lean binding, or None when llvmlite.binding must be used instead: ``BPFDSL_LLVM=
    llvmlite``, an llvmlite version not in :data:`SUPPORTED`, or the library cannot be opened
    or lacks a symbol (:func:`fallback_reason` says which).  Tried once per process."""
    if not _loaded:
        lib, why = None, ""
        if os.environ.get(ENV, "") == "llvmlite":
            why = f"{ENV}=llvmlite"
        elif llvmlite.__version__ not in SUPPORTED:
            why = (
                f"llvmlite {llvmlite.__version__} is not a version the lean binding is "
                f"declared for ({', '.join(sorted(SUPPORTED))})"
            )
        else:
            try:
                lib = Lib(library_path())
            except (OSError, AttributeError) as e:
                why = f"lean binding unusable: {e}"
        _loaded.append(lib)
        _why[:] = [why]
    return _loaded[0]


def fallback_reason() -> str:
    """Why :func:`load` gave None ("" if it did not, or was not asked)."""
    return _why[0] if _why and not (_loaded and _loaded[0] is not None) else ""
