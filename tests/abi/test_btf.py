"""BTF reader/writer, DATASEC fix-ups (B13) and values by BTF type, on clang-19 objects."""

from __future__ import annotations

import struct

import pytest
from elftools.elf.elffile import ELFFile
from support.objbuild import all_c_fixtures, build, source

from bpfdsl.abi.btf.core import BtfFormatError, Kind, parse_btf
from bpfdsl.abi.btf.ext import parse_btf_ext
from bpfdsl.abi.btf.values import encode_value, format_value, parse_value
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object


def _sections(path) -> dict[str, bytes]:
    with open(path, "rb") as f:
        e = ELFFile(f)
        return {s.name: s.data() for s in e.iter_sections() if s.header.sh_type != "SHT_NOBITS"}


def _symbols(path) -> dict[str, int]:
    with open(path, "rb") as f:
        e = ELFFile(f)
        return {s.name: s.entry.st_value for s in e.get_section_by_name(".symtab").iter_symbols()}


@pytest.mark.parametrize("name", all_c_fixtures())
def test_parse_btf_roundtrips_clang_objects(name):
    raw = _sections(build(name))[".BTF"]
    btf = parse_btf(raw)
    assert btf.to_bytes() == raw
    assert btf.find("LICENSE", Kind.VAR) is not None


def test_fixup_datasecs_uses_section_sizes_and_symbol_values():
    path = build("compat_maps")
    secs, syms = _sections(path), _symbols(path)
    raw = parse_btf(secs[".BTF"])
    assert all(d.size == 0 for d in raw.datasecs())  # clang leaves them for the loader (B13)
    btf = read_object(path).btf
    for d in btf.datasecs():
        assert d.size == len(secs[d.name]), d.name
        offs = [m.offset for m in d.members]
        assert offs == sorted(offs)
        for m in d.members:
            assert m.offset == syms[btf[m.type].name]


def test_fixup_names_the_datasec_it_cannot_fix():
    btf = parse_btf(_sections(build("xdp_pass"))[".BTF"])
    with pytest.raises(BtfFormatError, match="DATASEC 'license'"):
        btf.fixup_datasecs(lambda name: None, lambda sec, var: 0)


@pytest.mark.kernel
def test_kernel_takes_fixed_btf_and_refuses_raw():
    path = build("compat_maps")
    raw = _sections(path)[".BTF"]
    with pytest.raises(S.BpfError) as ei:
        S.btf_load(raw)
    assert "size" in ei.value.log.lower() or ei.value.errno == 22
    fd, log = S.btf_load(read_object(path).btf.to_bytes(), log_level=1)
    with fd:
        assert S.btf_info(fd).btf_size > 0


def test_line_info_text_matches_the_c_source():
    path = build("compat_maps")
    secs = _sections(path)
    btf = parse_btf(secs[".BTF"])
    ext = parse_btf_ext(secs[".BTF.ext"], btf)
    src = source("compat_maps").read_text().splitlines()
    lines = ext.line_info["xdp"]
    assert len(lines) > 10
    for li in lines:
        assert li.file.endswith("compat_maps.c")
        assert li.text.strip() == src[li.line - 1].strip()
    assert [f.insn_off for f in ext.func_info["xdp"]] == [0]


def test_truncated_btf_is_a_format_error():
    raw = _sections(build("compat_maps"))[".BTF"]
    for cut in (0, 10, 24, 40, len(raw) - 5):
        with pytest.raises(BtfFormatError):
            parse_btf(raw[:cut])
    bad_kind = bytearray(raw)
    struct.pack_into("<I", bad_kind, 24 + 4, 31 << 24)  # first type: kind 31
    with pytest.raises(BtfFormatError, match="unknown kind"):
        parse_btf(bytes(bad_kind))


@pytest.fixture(scope="module")
def typed():
    spec = read_object(build("typed_values"))
    return spec.btf, spec.maps["typed"]


def test_value_roundtrip_by_btf_type(typed):
    btf, m = typed
    v = {
        "port": 53,
        "flags": 5,
        "kind": 17,
        "src6": "2001:db8::1",
        "dst": "10.1.2.3",
        "c": "GREEN",
        "label": "hello",
        "delta": -3,
        "counts": [1, 2],
    }
    raw = encode_value(btf, m.value_type_id, v)
    assert len(raw) == m.value_size == 56
    assert raw[0:2] == b"\x00\x35"  # be16 in network order
    assert raw[2] == 5 | 17 << 3  # bitfields share a byte
    assert raw[4:20] == bytes.fromhex("20010db8000000000000000000000001")
    assert raw[20:24] == bytes([10, 1, 2, 3])
    assert struct.unpack_from("<I", raw, 24)[0] == 2  # GREEN
    assert raw[28:36] == b"hello\0\0\0"
    assert struct.unpack_from("<iQQ", raw, 36) == (-3, 1, 2)
    assert format_value(btf, m.value_type_id, raw) == v


def test_parse_lpm_key_and_errors(typed):
    btf, m = typed
    assert parse_value(btf, m.key_type_id, "10.0.0.0/8") == struct.pack("<I", 8) + bytes(
        [10, 0, 0, 0]
    )
    assert (
        format_value(btf, m.key_type_id, struct.pack("<I", 24) + bytes([192, 168, 1, 0]))
        == "192.168.1.0/24"
    )
    with pytest.raises(ValueError, match="no field"):
        parse_value(btf, m.value_type_id, '{"nope": 1}')
    with pytest.raises(ValueError, match="does not fit"):
        parse_value(btf, m.value_type_id, '{"port": 70000}')
    with pytest.raises(ValueError, match="expected an IPv4 address like 10.0.0.1"):
        parse_value(btf, m.value_type_id, '{"dst": "10.1"}')


def test_sanitize_makes_extern_funcs_and_vars_static():
    from bpfdsl.abi.btf.core import BTF_FUNC_EXTERN, BTF_VAR_GLOBAL_EXTERN, BtfType

    btf = parse_btf(_sections(build("xdp_pass"))[".BTF"])
    func = next(t for t in btf.types if t.kind == Kind.FUNC)
    var = next(t for t in btf.types if t.kind == Kind.VAR)
    func.linkage, var.linkage = BTF_FUNC_EXTERN, BTF_VAR_GLOBAL_EXTERN
    changes = btf.sanitize()
    assert len(changes) == 2 and func.linkage == 0 and var.linkage == 0
    again = parse_btf(btf.to_bytes())
    assert isinstance(again[func.id], BtfType) and again[func.id].linkage == 0
