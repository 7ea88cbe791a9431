"""The object of a .bpfd source as the back end emits it, without the compiler's own checks
after LLVM (the call-chain stack of bpfdsl.backend.stackchain, the checker): what tests
hand to the checker and the kernel to see that they refuse it too."""

from __future__ import annotations

from llvmlite.ir import Module

from bpfdsl.backend import target
from bpfdsl.backend.codegen.debug import DebugAdapter
from bpfdsl.backend.codegen.generator import generate
from bpfdsl.compiler import front_end


def emit_unchecked(src: str, filename: str = "unchecked.bpfd") -> bytes:
    """ELF object bytes of ``src`` (front end, code generation with debug info, LLVM and
    the BTF fix-up: bpfdsl.backend.target.emit), not checked further."""
    checked = front_end(src, filename)
    module = Module(name=filename)
    module = generate(checked, DebugAdapter(module, filename, src, {}), module)
    return target.emit(str(module)).obj
