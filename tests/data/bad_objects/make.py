"""Regenerate the hand-made bad objects of this directory (run from the repo root):

    python3 tests/data/bad_objects/make.py

Each .o is a clang-19 build of a small C file (tests/data/loader/ or here) with one defect
put in by hand, so tests and the checker's bad-input fuzzing have fixed inputs that need no
compiler.  EXPECTED (also read by tests/obj/test_objfile.py) maps each file to the message part
``read_object`` must give.
"""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
LOADER = HERE.parent / "loader"
C_REF = HERE.parent / "c"

EXPECTED = {
    "wrong_machine.o": "wrong machine",
    "elf32.o": "not a 64-bit little-endian ELF",
    "truncated.o": "corrupt ELF",
    "not_elf.o": "not an ELF file",
    "legacy_maps.o": "legacy 'maps' section",
    "extern_var.o": "extern variables",
    "btf_bad_kind.o": "unknown kind",
    "misaligned_text.o": "not a multiple of 8",
}


def clang(src: Path, out: Path) -> bytes:
    arch = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    subprocess.run(
        [
            "clang-19",
            "-O2",
            "-g",
            "-target",
            "bpf",
            f"-I/usr/include/{arch}",
            "-c",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
    )
    return out.read_bytes()


def section_header(data: bytes, name: str) -> tuple[int, int, int]:
    """(header offset, sh_offset, sh_size) of section ``name`` in a 64-bit LE ELF."""
    (shoff,) = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    str_off = struct.unpack_from("<Q", data, shoff + shstrndx * shentsize + 0x18)[0]
    for i in range(shnum):
        h = shoff + i * shentsize
        n = struct.unpack_from("<I", data, h)[0]
        end = data.index(b"\0", str_off + n)
        if data[str_off + n : end].decode() == name:
            return h, *struct.unpack_from("<QQ", data, h + 0x18)
    raise KeyError(name)


def main() -> int:
    tmp = HERE / "_tmp.o"
    good = clang(C_REF / "xdp_pass.c", tmp)
    x = bytearray(good)
    struct.pack_into("<H", x, 18, 62)  # e_machine = EM_X86_64
    (HERE / "wrong_machine.o").write_bytes(x)
    x = bytearray(good)
    x[4] = 1  # EI_CLASS = ELFCLASS32
    (HERE / "elf32.o").write_bytes(x)
    (HERE / "truncated.o").write_bytes(good[:48])
    (HERE / "not_elf.o").write_bytes(b"#!/bin/sh\necho this is not an object\n")
    (HERE / "legacy_maps.o").write_bytes(clang(LOADER / "legacy_maps.c", tmp))
    (HERE / "extern_var.o").write_bytes(clang(HERE / "extern_var.c", tmp))
    x = bytearray(good)
    _, btf_off, _ = section_header(x, ".BTF")
    hdr_len = struct.unpack_from("<I", x, btf_off + 4)[0]
    struct.pack_into("<I", x, btf_off + hdr_len + 4, 31 << 24)  # type 1: kind 31
    (HERE / "btf_bad_kind.o").write_bytes(x)
    x = bytearray(good)
    h, _, size = section_header(x, "xdp")
    struct.pack_into("<Q", x, h + 0x20, size - 3)  # program section not whole insns
    (HERE / "misaligned_text.o").write_bytes(x)
    tmp.unlink()
    print(f"wrote {len(EXPECTED)} objects in {HERE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
