"""The bpfdsl names the fuzzers use, imported in this one place: when the stage packages
move a module (bpfdsl/kernel/syscall.py -> bpfdsl/kernel/..., ...), only this file changes."""

from __future__ import annotations

from bpfdsl.abi.map_types import MapType
from bpfdsl.cli import main as cli_main
from bpfdsl.compiler import MAX_SOURCE_BYTES, compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError, universal_newlines
from bpfdsl.interp import InterpError
from bpfdsl.interp import program as interp_program
from bpfdsl.kernel import libc
from bpfdsl.kernel.syscall import map_create, obj_pin
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.kfuncs import needs_dev_bound
from bpfdsl.runtime.loader import load_collection
from bpfdsl.testing.pytest_plugin import BpfProgram, kernel_unavailable_reason

__all__ = [
    "MAX_SOURCE_BYTES",
    "BpfProgram",
    "DiagnosticError",
    "InterpError",
    "MapType",
    "cli_main",
    "compile_file",
    "compile_source",
    "interp_program",
    "kernel_unavailable_reason",
    "libc",
    "load_collection",
    "map_create",
    "needs_dev_bound",
    "obj_pin",
    "read_object",
    "universal_newlines",
]
