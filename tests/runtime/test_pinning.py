"""Maps pinned by name (`pinning: LIBBPF_PIN_BY_NAME`, libbpf's semantics): the BTF map
definition carries ``pinning``; the map lives at PIN_ROOT/NAME (default /sys/fs/bpf) and
every load of a matching definition shares it -- bpftool (libbpf) loading bpfdsl's object
and bpfdsl's loader loading clang's, and bpfdsl loads across `unload`; a pin whose
definition differs is refused with the map and the field named (exit 1) and a failed load
leaves nothing pinned."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import uuid

import pytest
from support.netns import bpffs_dir
from support.paths import DATA

from bpfdsl.abi.btf.core import Kind
from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import loader

C_SRC = DATA / "loader" / "pinned_map.c"


def source(name: str, max_entries: int = 8, pinning: str = "LIBBPF_PIN_BY_NAME") -> str:
    """The bpfdsl twin of tests/data/loader/pinned_map.c, its map named ``name``."""
    return (
        'license "GPL"\n'
        f"map {name}: hash<u32, u64>(max_entries: {max_entries}, pinning: {pinning})\n"
        "xdp fn count_shared(ctx) {\n"
        f"    {name}[0] += 1\n"
        "    return XDP_PASS\n"
        "}\n"
    )


def counter(fd) -> int:
    raw = syscall.map_lookup(fd, bytes(4), 8)
    return 0 if raw is None else struct.unpack("<Q", raw)[0]


def test_pinning_is_in_the_btf_map_definition():
    spec = read_object(compile_source(source("shared"), "p.bpfd").obj)
    assert spec.maps["shared"].pinning == 1  # LIBBPF_PIN_BY_NAME
    st = spec.btf.resolve(spec.btf.find("shared", Kind.VAR).type)
    assert [m.name for m in st.members] == ["type", "key", "value", "max_entries", "pinning"]
    none = read_object(compile_source(source("shared", pinning="LIBBPF_PIN_NONE"), "p.bpfd").obj)
    assert none.maps["shared"].pinning == 0


def test_pinning_takes_the_libbpf_names_only():
    with pytest.raises(DiagnosticError) as ei:
        compile_source(source("shared", pinning="true"), "p.bpfd")
    (d,) = ei.value.diagnostics
    assert (d.code, d.span.line, d.span.col) == ("map-args", 2, 53)
    assert "LIBBPF_PIN_BY_NAME" in d.message and "/sys/fs/bpf/shared" in d.hints[0]


@pytest.fixture
def clang_object(tmp_path):
    """clang-19's pinned_map.c with its map renamed: (map name, object path)."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    name = f"bdpin_{uuid.uuid4().hex[:8]}"
    arch = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    out = tmp_path / "pinned.o"
    cmd = ["clang-19", "-O2", "-g", "-target", "bpf", f"-I/usr/include/{arch}",
           f"-Dshared_count={name}", "-c", str(C_SRC), "-o", str(out)]  # fmt: skip
    subprocess.run(cmd, check=True, timeout=120)
    return name, out


@pytest.mark.kernel
def test_bpftool_pins_our_map_and_our_loader_reuses_it_for_clangs_object(clang_object, tmp_path):
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool not installed")
    name, c_obj = clang_object
    ours = tmp_path / "ours.o"
    ours.write_bytes(compile_source(source(name), "ours.bpfd").obj)
    pin_path = f"/sys/fs/bpf/{name}"  # libbpf's PIN_ROOT: bpftool has no other
    progs = bpffs_dir("bdpt_")
    try:
        r = subprocess.run(["bpftool", "prog", "loadall", str(ours), progs],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert os.path.exists(pin_path)  # libbpf pinned our map by name
        with syscall.obj_get(pin_path) as m:
            info = syscall.map_info(m)
            assert (info.type, info.key_size, info.value_size, info.max_entries) == (1, 4, 8, 8)
            with syscall.obj_get(f"{progs}/count_shared") as p:
                syscall.prog_test_run(p, bytes(64))  # bpftool's copy of our program
            with loader.load_collection(read_object(c_obj)) as coll:  # clang's object
                lm = coll.maps[name]
                assert lm.reused and lm.pinned == pin_path and not coll.pins
                assert syscall.map_info(lm.fd).id == info.id  # one map
                syscall.prog_test_run(coll.programs["count_shared"].fd, bytes(64))
            assert counter(m) == 2  # both programs counted in it
    finally:
        shutil.rmtree(progs, ignore_errors=True)
        if os.path.lexists(pin_path):
            os.unlink(pin_path)


@pytest.mark.kernel
def test_state_survives_unload_and_the_next_load_reuses_it(tmp_path):
    root = bpffs_dir("bdpr_")
    os.mkdir(root)
    src = tmp_path / "count.bpfd"
    src.write_text(source("hits"))
    dirs = [bpffs_dir("bdpd_"), bpffs_dir("bdpd_")]
    try:
        for i, d in enumerate(dirs):
            assert main(["load", str(src), "--pin-dir", d, "--pin-root", root]) == 0
            with syscall.obj_get(f"{d}/progs/count_shared") as p:
                for _ in range(3):
                    syscall.prog_test_run(p, bytes(64))
            assert main(["unload", d]) == 0
            assert not os.path.exists(d)
            assert os.listdir(root) == ["hits"]  # pinned by name: stays after unload
            with syscall.obj_get(f"{root}/hits") as m:
                assert counter(m) == 3 * (i + 1)  # the second load went on counting
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)


@pytest.mark.kernel
def test_incompatible_pin_is_refused_and_a_failed_load_pins_nothing(tmp_path, capsys):
    root = bpffs_dir("bdpi_")
    os.mkdir(root)
    try:
        with syscall.map_create(1, 4, 8, 16, name="hits") as old:  # max_entries 16, not 8
            syscall.obj_pin(old, f"{root}/hits")
        two = tmp_path / "two.bpfd"  # a new map pinned first, then the one that differs
        two.write_text(source("hits").replace(
            "map hits", "map fresh: array<u32, u64>(max_entries: 1, pinning: "
            "LIBBPF_PIN_BY_NAME)\nmap hits",
        ))  # fmt: skip
        d = bpffs_dir("bdpd_")
        assert main(["load", str(two), "--pin-dir", d, "--pin-root", root]) == 1
        err = capsys.readouterr().err
        assert "error[pin-incompatible]: map 'hits'" in err
        assert "max_entries 16 (object: 8)" in err and f"rm {root}/hits" in err
        assert sorted(os.listdir(root)) == ["hits"]  # `fresh` was pinned, then removed
        assert not os.path.exists(d)
        with syscall.obj_get(f"{root}/hits") as m:
            assert syscall.map_info(m).max_entries == 16  # the old pin is left alone
    finally:
        shutil.rmtree(root, ignore_errors=True)
