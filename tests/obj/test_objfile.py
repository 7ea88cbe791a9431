"""read_object on clang-19 libbpf-style objects: programs, subprogram linking, maps, configs,
relocations, legacy maps (B12) and corrupt input (never a traceback)."""

from __future__ import annotations

import random
import struct
import time

import pytest
from support.objbuild import all_c_fixtures, build, source
from support.paths import DATA

from bpfdsl.abi.insn import slot_offsets
from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.opcodes import BPF_PSEUDO_CALL
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.diagnostics import UsageError
from bpfdsl.obj.collection import LEGACY_MAPS_MSG, read_object


@pytest.mark.parametrize("name", all_c_fixtures())
def test_every_c_fixture_reads(name):
    spec = read_object(build(name))
    assert spec.license == "GPL"
    assert spec.programs and spec.btf is not None and spec.btf_error is None
    for p in spec.programs.values():
        assert p.kind is not None, p.section
        assert p.func_info and p.func_info[0].insn_off == 0
        assert p.insns[-1].is_exit or any(x.is_exit for x in p.insns)


def test_subprogram_is_appended_and_call_repointed():
    spec = read_object(build("compat_multi"))
    assert set(spec.programs) == {"count_pass", "count_drop"}
    for p in spec.programs.values():
        assert p.subprograms == ["bump"]
        slots = slot_offsets(p.insns)
        calls = [i for i, x in enumerate(p.insns) if x.is_call and x.src == BPF_PSEUDO_CALL]
        assert len(calls) == 1
        i = calls[0]
        main_len = 4  # count_pass/count_drop are 4 slots each (see llvm-objdump)
        assert slots[i] + 1 + p.insns[i].imm == main_len
        assert [(f.insn_off, f.name) for f in p.func_info] == [(0, p.name), (main_len, "bump")]
        assert all(li.insn_off < slots[-1] + 1 for li in p.line_info)
        kinds = sorted((r.kind, r.symbol) for r in p.relocations)
        assert kinds == [("data", ".rodata"), ("map", "hits")]
        for r in p.relocations:
            assert p.insns[r.insn_idx].is_ld_imm64


def test_maps_from_btf_definitions():
    maps = read_object(build("compat_maps")).maps
    want = {
        "config_echo": (MapType.ARRAY, 4, 8, 4),
        "short_frames": (MapType.ARRAY, 4, 8, 1),
        "by_proto": (MapType.HASH, 2, 8, 64),
        "pkts": (MapType.PERCPU_ARRAY, 4, 8, 1),
        "bytes_by_len": (MapType.PERCPU_HASH, 4, 8, 64),
    }
    got = {n: (m.map_type, m.key_size, m.value_size, m.max_entries) for n, m in maps.items()}
    assert got == want
    lpm = [m for m in read_object(build("xdp_acl")).maps.values() if m.map_type == 11]
    assert lpm and all(m.map_flags & 1 for m in lpm)  # LPM tries need BPF_F_NO_PREALLOC
    cpu = [
        m
        for m in read_object(build("xdp_cpumap_steer")).maps.values()
        if m.map_type == MapType.CPUMAP
    ]
    assert [(m.key_size, m.value_size) for m in cpu] == [(4, 8)]  # struct bpf_cpumap_val
    assert read_object(build("pinned_map")).maps["shared_count"].pinning == 1


def test_configs_and_rodata_contents():
    spec = read_object(build("compat_maps"))
    cfg = spec.configs
    assert {n: v.size for n, v in cfg.items()} == {"min_len": 4, "verdict": 1, "tag": 2, "magic": 8}
    ro = spec.rodata.data
    assert struct.unpack_from("<I", ro, cfg["min_len"].offset)[0] == 60
    assert ro[cfg["verdict"].offset] == 2
    assert struct.unpack_from("<H", ro, cfg["tag"].offset)[0] == 0x1234
    assert struct.unpack_from("<Q", ro, cfg["magic"].offset)[0] == 0x1122334455667788
    offs = {r.offset for r in spec.programs["compat_maps"].relocations if r.kind == "data"}
    assert offs == {v.offset for v in cfg.values()}


def test_section_kinds_and_attach_types():
    by_section = {p.section: p for p in read_object(build("xdp_cpumap_steer")).programs.values()}
    assert by_section["xdp/cpumap"].attach_type == AttachType.XDP_CPUMAP
    assert by_section["xdp"].attach_type == AttachType.XDP
    sk = {p.section: p for p in read_object(build("sk_msg_redirect_ingress")).programs.values()}
    assert sk["sockops"].program_type == ProgramType.SOCK_OPS
    assert sk["sk_msg"].program_type == ProgramType.SK_MSG


def test_line_info_points_at_source():
    spec = read_object(build("compat_maps"))
    p = spec.programs["compat_maps"]
    src = source("compat_maps").read_text().splitlines()
    li = p.line_at(len(p.insns) - 1)
    assert li is not None and li.text.strip() == src[li.line - 1].strip()
    slots = slot_offsets(p.insns)
    for i in range(len(p.insns)):  # list index and slot views agree (ld_imm64 = 2 slots)
        assert p.line_at_index(i) == p.line_at(slots[i])


def test_legacy_maps_section_is_refused():
    with pytest.raises(UsageError) as ei:
        read_object(build("legacy_maps"))
    assert LEGACY_MAPS_MSG in str(ei.value)


def test_missing_license_is_not_an_object_error():
    assert read_object(build("no_license")).license is None


def _expect_usage(data, match: str):
    with pytest.raises(UsageError) as ei:
        read_object(data)
    assert match in str(ei.value)


def test_bad_input_messages(tmp_path):
    good = build("xdp_pass").read_bytes()
    _expect_usage(tmp_path / "missing.o", "cannot read")
    _expect_usage(b"hello", "not an ELF")
    _expect_usage(good[:40], "corrupt ELF")
    x86 = bytearray(good)
    struct.pack_into("<H", x86, 18, 62)  # e_machine = EM_X86_64
    _expect_usage(bytes(x86), "wrong machine")
    c32 = bytearray(good)
    c32[4] = 1  # ELFCLASS32
    with pytest.raises(UsageError):
        read_object(bytes(c32))


def test_fuzzed_objects_raise_only_usage_errors():
    """A few hundred mutated objects: each reads or raises UsageError, never anything else."""
    rng = random.Random(1234)
    bases = [build(n).read_bytes() for n in ("compat_multi", "compat_maps", "xdp_acl")]
    deadline = time.monotonic() + 600  # a hang guard, not a speed test
    outcomes = {"ok": 0, "usage": 0}
    for n in range(400):
        assert time.monotonic() < deadline, "fuzz loop took too long"
        data = bytearray(rng.choice(bases))
        mode = n % 4
        if mode == 0:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif mode == 1:
            data = data[: rng.randrange(64, len(data))]
        elif mode == 2:  # corrupt the section header table
            shoff = struct.unpack_from("<Q", data, 0x28)[0]
            for _ in range(4):
                at = shoff + rng.randrange(max(1, len(data) - shoff))
                if at < len(data):
                    data[at] = rng.randrange(256)
        else:  # corrupt the middle (BTF, relocations, symbols)
            at = rng.randrange(len(data) // 4, len(data))
            data[at : at + 4] = rng.randbytes(4)
        try:
            read_object(bytes(data))
            outcomes["ok"] += 1
        except UsageError:
            outcomes["usage"] += 1
    assert outcomes["usage"] > 50


def _bad_objects() -> dict[str, str]:
    import importlib.util

    make = DATA / "bad_objects" / "make.py"
    spec = importlib.util.spec_from_file_location("bad_objects_make", make)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return {str(make.parent / name): msg for name, msg in mod.EXPECTED.items()}


@pytest.mark.parametrize(
    ("path", "message"),
    sorted(_bad_objects().items()),
    ids=lambda v: v.rsplit("/", 1)[-1] if "/" in v else "",
)
def test_hand_made_bad_objects(path, message):
    """Checked-in broken objects (tests/data/bad_objects/make.py): UsageError naming the file."""
    with pytest.raises(UsageError) as ei:
        read_object(path)
    assert message in str(ei.value) and path in str(ei.value)


def _summary(spec) -> tuple:
    progs = {
        n: (p.section, p.insns, p.relocations, p.func_info, p.line_info, p.subprograms)
        for n, p in spec.programs.items()
    }
    data = {n: (d.data, d.vars, d.readonly) for n, d in spec.data_sections.items()}
    return progs, spec.maps, data, spec.license, spec.btf_error, spec.btf_fixups


def _objects() -> list:
    from support.paths import PROGS

    from bpfdsl.compiler import compile_file

    objs = [build(n).read_bytes() for n in all_c_fixtures()]
    return objs + [compile_file(str(p)).obj for p in sorted(PROGS.glob("*.bpfd"))]


def _pyelftools_view(raw: bytes) -> tuple:
    """Sections, symbols and REL entries of ``raw`` as pyelftools reads them."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(raw))
    secs, syms, rels = [], [], []
    for s in elf.iter_sections():
        h = s.header
        # pyelftools has no name for LLVM's SHT_LLVM_ADDRSIG (llvm/BinaryFormat/ELF.h)
        sh_type = "SHT_LLVM_ADDRSIG" if h.sh_type == 0x6FFF4C03 else h.sh_type
        secs.append((s.name, sh_type, h.sh_flags, h.sh_offset, h.sh_size, h.sh_link,
                     h.sh_info, s.data() if h.sh_type != "SHT_NOBITS" else b""))  # fmt: skip
        if h.sh_type == "SHT_SYMTAB":
            syms = [(y.name, y["st_info"]["type"], y["st_info"]["bind"], y["st_shndx"],
                     y["st_value"], y["st_size"]) for y in s.iter_symbols()]  # fmt: skip
        if h.sh_type == "SHT_REL":
            rels.append([(r["r_offset"], r["r_info_sym"], r["r_info_type"])
                         for r in s.iter_relocations()])  # fmt: skip
    return elf.header.e_machine, secs, syms, rels


def _our_view(raw: bytes) -> tuple:
    """The same as :func:`_pyelftools_view`, read by bpfdsl.obj.elf."""
    from bpfdsl.obj.elf import ElfFile

    elf = ElfFile(raw)
    secs, syms, rels = [], [], []
    for s in elf.iter_sections():
        h = s.header
        secs.append((s.name, h.sh_type, h.sh_flags, h.sh_offset, h.sh_size, h.sh_link,
                     h.sh_info, s.data() if h.sh_type != "SHT_NOBITS" else b""))  # fmt: skip
        if h.sh_type == "SHT_SYMTAB":
            syms = [(y.name, y["st_info"]["type"], y["st_info"]["bind"], y.entry.st_shndx,
                     y.entry.st_value, y.entry.st_size) for y in s.iter_symbols()]  # fmt: skip
        if h.sh_type == "SHT_REL":
            rels.append([(r["r_offset"], r["r_info_sym"], r["r_info_type"])
                         for r in s.iter_relocations()])  # fmt: skip
    machine = {247: "EM_BPF"}.get(elf.header.e_machine, elf.header.e_machine)
    return machine, secs, syms, rels


def test_elf_reader_agrees_with_pyelftools():
    """bpfdsl.obj.elf (the one reader of objects) and pyelftools, an independent reader,
    see the same sections (name, type, flags, offset, size, link, info, bytes), symbols and
    relocations in every C fixture and every progs/*.bpfd object."""
    objs = _objects()
    ours = [_our_view(o) for o in objs]
    theirs = [_pyelftools_view(o) for o in objs]
    assert len(objs) > 20 and all(v[1] and v[2] for v in ours)
    for i, (a, b) in enumerate(zip(ours, theirs, strict=True)):
        assert a == b, f"object {i}"


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        ((4, 1), "this is a 32-bit little-endian object"),  # EI_CLASS = ELFCLASS32
        ((5, 2), "this is a 64-bit big-endian object"),  # EI_DATA = ELFDATA2MSB
    ],
)
def test_a_host_or_bpfeb_object_is_refused_with_what_to_do(edit, message):
    """An ELF that is not ELF64 little endian is refused by the one reader with what it is
    and how to build an eBPF object (no second reader is tried)."""
    raw = bytearray(build("xdp_pass").read_bytes())
    raw[edit[0]] = edit[1]
    with pytest.raises(UsageError) as ei:
        read_object(bytes(raw), name="host.o")
    text = ei.value.render()
    assert "host.o: not a 64-bit little-endian ELF" in text and message in text
    assert "clang -target bpf" in text


def test_fast_elf_reader_skips_pyelftools_import():
    import subprocess
    import sys

    code = (
        "import sys; from bpfdsl.obj.collection import read_object; "
        f"read_object(open({str(build('compat_maps'))!r}, 'rb').read()); "
        "print(any(m.startswith('elftools') for m in sys.modules))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr
