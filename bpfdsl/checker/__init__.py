"""The checker: a verifier-like static analysis of eBPF programs (ours or clang's).

Input is an object read by bpfdsl.obj.collection (``CollectionSpec``/``ProgramSpec``); output is
a :class:`CheckResult` with, per program, the errors the kernel verifier would reject on
(in its wording, with the source line from ``.BTF.ext`` and the failing register state)
and warnings for what the kernel accepts but is a bug.  Never imports the front end.

    check_object(spec, options=CheckOptions(...))           -> CheckResult
    check_program(prog_spec, maps, ..., options=...)        -> ProgramResult
    check_insns(insns, prog_type, ..., options=...)         -> ProgramResult

The entry points and :class:`CheckOptions` live in bpfdsl/checker/check.py; this module
only picks the compiled or the pure-Python modules (bpfdsl/checker/native.py) and exports.
"""

from __future__ import annotations

# First of the package: installs the finder that picks the compiled or the pure-Python
# modules (bpfdsl/checker/native.py) before any of them is imported.
import bpfdsl.checker.native as native
from bpfdsl.checker.analyzer import INSN_LIMIT
from bpfdsl.checker.check import (
    DEFAULT_OPTIONS,
    LIMIT_FRACTION,
    LIMIT_FRACTION_OTHER_KERNEL,
    MODEL_KERNEL,
    CheckOptions,
    DataMap,
    check_insns,
    check_object,
    check_program,
    limit_fraction,
    map_refs_for,
)
from bpfdsl.checker.report import CheckError, CheckResult, ProgramResult

__all__ = [
    "DEFAULT_OPTIONS",
    "INSN_LIMIT",
    "LIMIT_FRACTION",
    "LIMIT_FRACTION_OTHER_KERNEL",
    "MODEL_KERNEL",
    "NATIVE",
    "NATIVE_REASON",
    "CheckError",
    "CheckOptions",
    "CheckResult",
    "DataMap",
    "ProgramResult",
    "check_insns",
    "check_object",
    "check_program",
    "limit_fraction",
    "map_refs_for",
]

# Whether the checker modules in use are the mypyc-compiled ones, and why (native.REASON).
NATIVE: bool = native.NATIVE
NATIVE_REASON: str = native.REASON
