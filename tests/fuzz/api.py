"""The bpfdsl names the fuzzers use, imported in this one place: when the stage packages
move a module (bpfdsl/syscall.py -> bpfdsl/kernel/..., ...), only this file changes."""

from __future__ import annotations

from bpfdsl.cli import main as cli_main
from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.interp import InterpError
from bpfdsl.interp import program as interp_program
from bpfdsl.loader import load_collection
from bpfdsl.objfile import read_object
from bpfdsl.pytest_plugin import BpfProgram, kernel_unavailable_reason
from bpfdsl.syscall import libc, map_create, obj_pin
from bpfdsl.uapi import MapType

__all__ = [
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
    "obj_pin",
    "read_object",
]
