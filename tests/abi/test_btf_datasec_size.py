"""A DATASEC whose ELF section (or VAR symbol) lies beyond what BTF's 32-bit fields hold is a
BtfFormatError naming it, so loading the object is error[bad-btf]; it was a struct.error
traceback from writing the fixed-up BTF (found by tests/fuzz/objects.py: a clang object
with one bit of a section header's sh_size flipped)."""

from __future__ import annotations

import struct

import pytest
from support.objbuild import build

from bpfdsl.abi.btf.core import BtfFormatError, parse_btf
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object


def _section(data: bytes, name: str) -> tuple[int, int, int]:
    """(header offset, sh_offset, sh_size) of section ``name`` (64-bit LE ELF)."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    _, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    strtab = struct.unpack_from("<Q", data, shoff + shstrndx * 64 + 24)[0]
    for i in range(shnum):
        h = shoff + i * 64
        n = struct.unpack_from("<I", data, h)[0]
        if data[strtab + n : data.index(b"\0", strtab + n)] == name.encode():
            off, size = struct.unpack_from("<QQ", data, h + 24)
            return h, off, size
    raise KeyError(name)


def test_datasec_size_over_u32() -> None:
    data = build("xdp_udp_filter").read_bytes()  # clang: DATASEC sizes left 0
    _, off, size = _section(data, ".BTF")
    btf = parse_btf(data[off : off + size])
    with pytest.raises(BtfFormatError, match="more than BTF can describe"):
        btf.fixup_datasecs(lambda name: 1 << 40, lambda sec, var: 0)
    btf = parse_btf(data[off : off + size])
    with pytest.raises(BtfFormatError, match="offset 4294967296"):
        btf.fixup_datasecs(lambda name: 64, lambda sec, var: 1 << 32)


@pytest.mark.kernel
def test_object_with_huge_maps_section_is_bad_btf() -> None:
    from bpfdsl.runtime.loader import load_collection

    data = bytearray(build("xdp_udp_filter").read_bytes())
    hdr, _, size = _section(bytes(data), ".maps")
    struct.pack_into("<Q", data, hdr + 32, size | 1 << 44)  # sh_size of .maps
    spec = read_object(bytes(data))
    assert "more than BTF can describe" in (spec.btf_error or "")
    with pytest.raises(DiagnosticError) as ei:
        with load_collection(spec):
            pass
    assert ei.value.diagnostics[0].code == "bad-btf"
