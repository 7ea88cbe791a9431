"""One ELF reader, one BTF fix-up: the back end's post-emission fix-up of ``.BTF`` DATASECs
(bpfdsl.obj.elf.fixup_btf_datasecs) is the loader's own (Btf.fixup_datasecs), and the kernel
accepts the ``.BTF`` it writes as it is, the way iproute2 uploads it (FIELD-BUGS B13)."""

from __future__ import annotations

import pytest
from support.objbuild import build
from support.paths import DATA

from bpfdsl.abi.btf.core import parse_btf
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.elf import ElfFile, fixup_btf_datasecs

FIXTURES = sorted(p.stem for p in (DATA / "c").glob("*.c"))


def _btf_section(obj: bytes) -> bytes:
    return ElfFile(obj).section_by_name(".BTF").data()


def _datasecs(raw_btf: bytes) -> list[tuple[str, int, list[tuple[int, int, int]]]]:
    btf = parse_btf(raw_btf)
    return [
        (t.name, t.size, [(m.type, m.offset, m.size) for m in t.members]) for t in btf.datasecs()
    ]


@pytest.mark.parametrize("name", FIXTURES)
def test_emitted_object_fixup_is_the_loader_fixup(name):
    """clang-19 leaves DATASEC sizes 0: fixing the object gives every DATASEC the size and
    VAR offsets the loader computes when it reads the raw object; nothing else changes."""
    raw = build(name).read_bytes()
    assert any(size == 0 for _, size, _ in _datasecs(_btf_section(raw)))
    fixed = fixup_btf_datasecs(raw)
    assert len(fixed) == len(raw) and fixup_btf_datasecs(fixed) == fixed
    loader = read_object(raw, name=name).btf
    assert _datasecs(_btf_section(fixed)) == _datasecs(loader.to_bytes())
    sections = {s.name: s.header.sh_size for s in ElfFile(fixed).iter_sections()}
    assert all(size == sections[sec] for sec, size, _ in _datasecs(_btf_section(fixed)))
    btf = ElfFile(raw).section_by_name(".BTF").header
    outside = [i for i, (a, b) in enumerate(zip(raw, fixed, strict=True)) if a != b]
    assert outside and all(btf.sh_offset <= i < btf.sh_offset + btf.sh_size for i in outside)


@pytest.mark.kernel
@pytest.mark.parametrize("name", FIXTURES)
def test_kernel_takes_the_fixed_btf_as_it_is_and_refuses_the_raw_one(name):
    raw = build(name).read_bytes()
    with pytest.raises(S.BpfError):
        S.btf_load(_btf_section(raw))
    fd, log = S.btf_load(_btf_section(fixup_btf_datasecs(raw)), log_level=1)
    fd.close()
    assert "Invalid" not in log
