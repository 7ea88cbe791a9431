"""Kernel functions at load time: the BTF id of each kfunc a program calls, from the running
kernel's BTF (/sys/kernel/btf/vmlinux), and whether the program must be loaded
device-bound (abi.kfuncs).  libbpf does the same in bpf_object__resolve_ksym_func_btf_id;
kfuncs of modules (split BTF in /sys/kernel/btf/MODULE, passed through fd_array) are not
resolved yet: the error says so."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from bpfdsl.abi.btf.core import find_func_id
from bpfdsl.abi.kfuncs import BY_NAME
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.obj.spec import ProgramSpec

VMLINUX_BTF = Path("/sys/kernel/btf/vmlinux")
MODULE_BTF = Path("/sys/kernel/btf")


@lru_cache(maxsize=1)
def _vmlinux() -> bytes:
    return VMLINUX_BTF.read_bytes()


def _release() -> str:
    return os.uname().release


def kfunc_btf_id(program: str, name: str) -> int:
    """The id of FUNC ``name`` in the kernel's BTF, for the call's insn.imm (off 0: vmlinux).
    Raises DiagnosticError ``kfunc-missing`` naming the kfunc and the kernel release."""
    try:
        data = _vmlinux()
    except OSError as e:
        raise DiagnosticError(
            [error("kfunc-missing", f"program '{program}' calls the kernel function {name}, "
                   f"but the kernel's BTF cannot be read ({VMLINUX_BTF}: {e.strerror})",
                   hint="kfuncs need a kernel built with CONFIG_DEBUG_INFO_BTF")]
        ) from None  # fmt: skip
    tid = find_func_id(data, name)
    if tid is not None:
        return tid
    k = BY_NAME.get(name)
    since = f" (added in Linux {k.since})" if k else ""
    mods = []
    try:
        mods = [
            p.name
            for p in MODULE_BTF.iterdir()
            if p.name != "vmlinux" and find_func_id_split(p, name)
        ]
    except OSError:
        pass
    hint = (
        f"it is in the BTF of module {mods[0]}: kfuncs of modules are not loaded yet"
        if mods
        else "run it on a kernel that has it, or leave the call out"
    )
    raise DiagnosticError(
        [error("kfunc-missing",
               f"program '{program}' calls the kernel function {name}{since}, which this "
               f"kernel (Linux {_release()}) does not have", hint=hint)]
    )  # fmt: skip


def find_func_id_split(path: Path, name: str) -> bool:
    """True when the split BTF at ``path`` (a module's) names a function ``name``: a string
    match only, enough to say where a kfunc lives."""
    try:
        return (b"\0" + name.encode() + b"\0") in path.read_bytes()
    except OSError:
        return False


def needs_dev_bound(p: ProgramSpec) -> list[str]:
    """The kfuncs ``p`` calls that need a device-bound load (abi.kfuncs), in call order."""
    out: list[str] = []
    for r in p.relocations:
        k = BY_NAME.get(r.symbol) if r.kind == "kfunc" else None
        if k is not None and k.dev_bound and k.name not in out:
            out.append(k.name)
    return out
