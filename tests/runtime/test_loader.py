"""Loader on the real kernel: clang-19 libbpf-style objects load and behave; configs, pinning,
cpumap clamp (B09), BTF fix-ups (B13), verifier errors with source lines, and hygiene: a
failed load leaves no fd and no pin behind."""

from __future__ import annotations

import copy
import os
import shutil
import struct
import uuid

import pytest
from support.objbuild import all_c_fixtures, build, source
from support.paths import ROOT

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import LoadError, VerifierError, load_collection

pytestmark = pytest.mark.kernel


@pytest.fixture
def pin_dir():
    d = f"/sys/fs/bpf/bpfdsl_test_{uuid.uuid4().hex[:10]}"
    os.mkdir(d)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def _fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("name", all_c_fixtures())
def test_clang_objects_load(name):
    spec = read_object(build(name))
    with load_collection(spec) as coll:
        assert set(coll.programs) == set(spec.programs)
        for p in coll.programs.values():
            info = S.prog_info(p.fd)
            assert info.type == p.spec.program_type
            assert info.nr_line_info == len(p.spec.line_info) > 0  # BTF line info reached it
        for name_, m in spec.maps.items():
            info = S.map_info(coll.maps[name_].fd)
            assert (info.type, info.key_size, info.value_size) == (
                m.map_type,
                m.key_size,
                m.value_size,
            )


def test_configs_reach_the_program():
    spec = read_object(build("compat_maps"))
    prog_default = load_collection(spec)
    with prog_default as coll:
        fd = coll.programs["compat_maps"].fd
        assert S.prog_test_run(fd, bytes(59)).retval == XdpAction.DROP  # min_len 60
        assert S.prog_test_run(fd, bytes(60)).retval == XdpAction.PASS
    cfg = {"min_len": 100, "verdict": "1", "tag": 0x55, "magic": b"\x07" + bytes(7)}
    with load_collection(spec, config=cfg) as coll:
        fd = coll.programs["compat_maps"].fd
        assert S.prog_test_run(fd, bytes(99)).retval == XdpAction.DROP
        assert S.prog_test_run(fd, bytes(128)).retval == XdpAction.DROP  # verdict = 1
        echo = coll.maps["config_echo"].fd
        got = [
            struct.unpack("<Q", S.map_lookup(echo, struct.pack("<I", i), 8))[0] for i in range(4)
        ]
        assert got == [100, 1, 0x55, 7]
        with pytest.raises(S.BpfError):  # .rodata is frozen
            S.map_update(coll.maps[".rodata"].fd, bytes(4), bytes(16))


def test_unknown_config_lists_known_ones():
    spec = read_object(build("compat_maps"))
    with pytest.raises(LoadError) as ei:
        load_collection(spec, config={"min_lenn": 1})
    d = ei.value.diagnostics[0]
    assert "min_lenn" in d.message and "min_len" in d.hints[0] and "magic" in d.hints[0]


def test_subprogram_calls_work():
    spec = read_object(build("compat_multi"))
    with load_collection(spec, config={"step": 5}) as coll:
        assert S.prog_test_run(coll.programs["count_pass"].fd, bytes(64)).retval == 2
        assert S.prog_test_run(coll.programs["count_drop"].fd, bytes(64), repeat=3).retval == 1
        hits = coll.maps["hits"].fd
        vals = [
            struct.unpack("<Q", S.map_lookup(hits, struct.pack("<I", i), 8))[0] for i in range(2)
        ]
        assert vals == [5, 15]


def test_verifier_error_names_source_line():
    spec = read_object(build("reject_bounds"))
    bad_line = next(
        i
        for i, ln in enumerate(source("reject_bounds").read_text().splitlines(), 1)
        if "BAD" in ln and "if" in ln
    )
    with pytest.raises(VerifierError) as ei:
        load_collection(spec)
    e = ei.value
    d = e.diagnostics[0]
    assert "outside of the packet" in d.message and "no_bounds" in d.message
    assert d.span is not None and d.span.line == bad_line
    assert "eth->h_proto" in e.details and "(71)" in e.details
    assert "processed" in e.log


def test_missing_license_is_a_clear_error():
    with pytest.raises(LoadError, match="no license"):
        load_collection(read_object(build("no_license")))


def test_cpumap_clamped_to_possible_cpus():
    spec = read_object(build("cpumap_big"))
    assert spec.maps["big_cpu_map"].max_entries == 4096
    with load_collection(spec) as coll:
        info = S.map_info(coll.maps["big_cpu_map"].fd)
        assert info.max_entries == S.possible_cpus()
        assert any("4096" in w and "clamped" in w for w in coll.warnings)
        # empty slot: redirect falls back to XDP_PASS
        assert S.prog_test_run(coll.programs["to_cpu0"].fd, bytes(64)).retval == XdpAction.PASS


def test_pinned_by_name_map_is_reused(pin_dir):
    spec = read_object(build("pinned_map"))
    with load_collection(spec, pin_dir=pin_dir) as a:
        assert a.maps["shared_count"].pinned == f"{pin_dir}/shared_count"
        S.prog_test_run(a.programs["count_shared"].fd, bytes(64))
        with load_collection(spec, pin_dir=pin_dir) as b:
            assert b.maps["shared_count"].reused and not b.pins
            assert (
                S.map_info(a.maps["shared_count"].fd).id == S.map_info(b.maps["shared_count"].fd).id
            )
            S.prog_test_run(b.programs["count_shared"].fd, bytes(64))
        raw = S.map_lookup(a.maps["shared_count"].fd, bytes(4), 8)
        assert struct.unpack("<Q", raw)[0] == 2


def test_incompatible_pin_is_refused(pin_dir):
    with S.map_create(MapType.HASH, 4, 16, 8) as other:
        S.obj_pin(other, f"{pin_dir}/shared_count")
    with pytest.raises(LoadError) as ei:
        load_collection(read_object(build("pinned_map")), pin_dir=pin_dir)
    assert "value_size 16 (object: 8)" in str(ei.value)
    assert os.listdir(pin_dir) == ["shared_count"]  # the foreign pin is left alone


def _failing_specs(pin_dir: str):
    """(label, spec, kwargs) failing at different stages of load_collection."""
    out = [("no license", read_object(build("no_license")), {})]
    bad_btf = read_object(build("compat_maps"))
    bad_btf.btf = copy.deepcopy(bad_btf.btf)
    bad_btf.btf.datasecs()[0].size = 1  # vars now lie outside: kernel refuses the BTF
    out.append(("btf", bad_btf, {}))
    bad_map = read_object(build("compat_maps"))
    list(bad_map.maps.values())[-1].max_entries = 0  # EINVAL after other maps exist
    out.append(("map", bad_map, {}))
    out.append(("config", read_object(build("compat_maps")), {"config": {"x": 1}}))
    out.append(
        (
            "pin then config",
            read_object(build("pinned_map")),
            {"pin_dir": pin_dir, "config": {"x": 1}},
        )
    )
    out.append(("verifier", read_object(build("reject_bounds")), {}))
    second = read_object(build("compat_multi"))
    second.programs["count_drop"].insns = second.programs["count_drop"].insns[:-1]
    out.append(("second program", second, {}))
    return out


def test_failed_loads_leave_nothing_behind(pin_dir):
    cases = _failing_specs(pin_dir)
    fds_before = _fds()
    seen = set()
    for i in range(500):
        label, spec, kw = cases[i % len(cases)]
        with pytest.raises((LoadError, VerifierError)):
            load_collection(spec, **kw)
        seen.add(label)
    assert seen == {c[0] for c in cases}
    assert _fds() == fds_before
    assert os.listdir(pin_dir) == []  # (/sys/fs/bpf itself is shared with other tests)


PROGS = sorted((ROOT / "progs").glob("*.bpfd"))


@pytest.mark.parametrize("src", PROGS, ids=[p.stem for p in PROGS])
def test_our_compiled_progs_load(src):
    from bpfdsl.compiler import compile_file

    spec = read_object(compile_file(str(src)).obj, name=str(src))
    assert not spec.btf_fixups or all("size 0" not in f for f in spec.btf_fixups)  # B13
    with load_collection(spec) as coll:
        for p in coll.programs.values():
            assert S.prog_info(p.fd).nr_line_info == len(p.spec.line_info) > 0
            assert p.spec.line_info[0].file.endswith(".bpfd")


def test_static_global_and_callback_subprograms():
    """Calls via the .text section symbol, via a function symbol and a bpf_loop callback
    (ld_imm64 BPF_PSEUDO_FUNC) are all linked; the kernel runs them."""
    spec = read_object(build("subprogs"))
    assert set(spec.programs["sum_prog"].subprograms) == {"loop_cb", "add_three", "add_ten"}
    with load_collection(spec) as coll:
        assert S.prog_test_run(coll.programs["sum_prog"].fd, bytes(64)).retval == 19
        assert S.prog_test_run(coll.programs["twice_prog"].fd, bytes(64)).retval == 42


def test_prog_array_and_map_in_map_initial_values():
    spec = read_object(build("initial_values"))
    assert spec.maps["outer"].values == {0: "inner_a", 1: "inner_b"}
    assert spec.maps["outer"].inner.map_type == MapType.ARRAY
    assert spec.maps["jumps"].values == {1: "tail_target"}
    with load_collection(spec) as coll:
        S.map_update(coll.maps["inner_b"].fd, bytes(4), struct.pack("<I", XdpAction.TX))
        run = {n: S.prog_test_run(p.fd, bytes(64)).retval for n, p in coll.programs.items()}
    assert run == {"tail_target": XdpAction.DROP, "tail_entry": XdpAction.DROP, "mim": XdpAction.TX}


def test_data_and_bss_are_writable_maps_and_statics_are_not_configs():
    spec = read_object(build("globals"))
    assert spec.configs == {}  # the printk format string is a static .rodata var
    assert not spec.data_sections[".data"].readonly and spec.rodata.readonly
    with load_collection(spec) as coll:
        S.prog_test_run(coll.programs["accumulate"].fd, bytes(64), repeat=3)
        assert S.map_lookup(coll.maps[".bss"].fd, bytes(4), 8) == struct.pack("<Q", 15)
        S.map_update(coll.maps[".data"].fd, bytes(4), struct.pack("<Q", 100))  # writable
        S.prog_test_run(coll.programs["accumulate"].fd, bytes(64))
        assert S.map_lookup(coll.maps[".bss"].fd, bytes(4), 8) == struct.pack("<Q", 115)


def test_load_does_not_change_the_spec():
    """ld_imm64 fds are patched on a copy: the same spec loads twice, its insns untouched."""
    from bpfdsl.abi.insn import encode

    spec = read_object(build("compat_maps"))
    before = {n: encode(p.insns) for n, p in spec.programs.items()}
    for _ in range(2):
        with load_collection(spec):
            pass
    assert {n: encode(p.insns) for n, p in spec.programs.items()} == before


def test_map_create_error_names_the_map():
    spec = read_object(build("compat_maps"))
    spec.maps["by_proto"].value_size = 1 << 24  # above the kernel's hash value limit
    with pytest.raises(LoadError) as ei:
        load_collection(spec)
    d = ei.value.diagnostics[0]
    assert d.code == "map-create-failed"
    assert "map 'by_proto' (hash, key 2 B, value 16777216 B, max_entries 64)" in d.message
    assert "too long" in d.message  # E2BIG; the hint names the rule (map_types.MAP_LIMITS)
    assert d.hints == ["hash key and value together are at most 4194255 bytes, not 16777218"]
