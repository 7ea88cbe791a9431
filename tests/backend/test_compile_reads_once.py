"""One ``compile`` reads the ELF object it emitted once (issue #26): the section table
LLVM's object is read into by the back end serves the size check, the stack depths, the
BTF datasec fix-up, the checker's CollectionSpec and ``--stats``; the spec is handed on
(``CompileResult.spec``), so a caller need not read the object again."""

from __future__ import annotations

from pathlib import Path

import pytest

from bpfdsl.compiler import compile_file
from bpfdsl.obj import elf as elf_mod
from bpfdsl.obj.collection import read_object

PROGS = Path(__file__).resolve().parents[2] / "progs"


@pytest.mark.parametrize("name", ["xdp_router", "xdp_dispatch", "sk_msg_redirect_ingress"])
def test_compile_reads_its_object_once(name, monkeypatch):
    reads = []
    real = elf_mod.ElfFile.__init__

    def counting(self, raw):
        reads.append(len(raw))
        real(self, raw)

    monkeypatch.setattr(elf_mod.ElfFile, "__init__", counting)
    res = compile_file(PROGS / f"{name}.bpfd", stats=True)
    assert len(reads) == 1, reads
    monkeypatch.undo()

    # what was handed on is what a fresh read of the bytes gives
    again = read_object(res.obj)
    assert res.spec is not None
    assert sorted(res.spec.programs) == sorted(again.programs)
    for p, q in zip(
        (res.spec.programs[n] for n in sorted(again.programs)),
        (again.programs[n] for n in sorted(again.programs)),
        strict=True,
    ):
        assert p.insns == q.insns and p.section == q.section
    assert sorted(res.spec.maps) == sorted(again.maps)
    # --stats: 8-byte slots per program (ld_imm64 counts 2), as decoding them gives
    whole = [st for st in res.stats if not again.programs[st.name].subprograms]
    assert whole and len(res.stats) == len(res.programs)
    for st in whole:
        assert st.insns == sum(i.width for i in again.programs[st.name].insns), st
