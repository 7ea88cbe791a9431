"""Two programs with one function name (in different sections: the object reader keys the
second as ``section/name``) load under their keys, and a failed load closes both fds: the
loader stored them under the function name, so the first fd was overwritten and leaked and
the second key was missing (found by tests/fuzz/objects.py on a corrupted string table)."""

from __future__ import annotations

import os

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

SRC = """license "GPL"
xdp fn aa(ctx) { return XDP_DROP }
xdp(frags) fn ab(ctx) { return XDP_PASS }
xdp(devmap) fn cc(ctx) { return XDP_PASS }
"""


def _same_names() -> bytes:
    """The object of SRC with the symbol `ab` named `aa` (its st_name set to aa's)."""
    import io
    import struct

    from elftools.elf.elffile import ELFFile

    obj = bytearray(compile_source(SRC, "names.bpfd").obj)
    symtab = ELFFile(io.BytesIO(bytes(obj))).get_section_by_name(".symtab")
    names = {s.name: (i, s["st_name"]) for i, s in enumerate(symtab.iter_symbols())}
    at = symtab["sh_offset"] + names["ab"][0] * symtab["sh_entsize"]  # Elf64_Sym.st_name
    struct.pack_into("<I", obj, at, names["aa"][1])
    return bytes(obj)


def _bpf_fds() -> set[int]:
    out = set()
    for n in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{n}").startswith("anon_inode:bpf"):
                out.add(int(n))
        except OSError:
            pass
    return out


def test_reader_keys_the_repeated_name_by_section() -> None:
    spec = read_object(_same_names())
    assert {k: p.name for k, p in spec.programs.items()} == {
        "aa": "aa",
        "xdp.frags/aa": "aa",
        "cc": "cc",
    }


@pytest.mark.kernel
def test_both_load_under_their_keys_and_close() -> None:
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    before = _bpf_fds()
    with load_collection(read_object(_same_names())) as coll:
        assert set(coll.programs) == {"aa", "xdp.frags/aa", "cc"}
        assert syscall.prog_test_run(coll.programs["aa"].fd, bytes(64)).retval == 1  # DROP
        assert syscall.prog_test_run(coll.programs["xdp.frags/aa"].fd, bytes(64)).retval == 2
    assert _bpf_fds() == before


@pytest.mark.kernel
def test_a_failed_load_leaves_no_fd() -> None:
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(_same_names())
    assert list(spec.programs)[-1] == "cc"  # loaded after both `aa`
    bad = spec.programs["cc"]
    bad.insns = bad.insns[:-1]  # no exit: the verifier refuses it
    before = _bpf_fds()
    with pytest.raises(DiagnosticError):
        load_collection(spec)
    assert _bpf_fds() == before
