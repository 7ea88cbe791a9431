"""A live map is reused only under the same key and value *types*, not just the same sizes:
an edited program whose value changed from ``struct { hits: u32, last_len: u32 }`` to
``struct { total_bytes: u64 }`` (8 bytes both) would read the old bytes as the new type
(wrong verdicts, wrong `map dump`).  Refused for a program update (`attach` over the same
pin dir: ``map-incompatible``) and for a map pinned by name (``pin-incompatible``), naming
the map and showing both types; a program whose types did not change keeps its state."""

from __future__ import annotations

import os
import shutil
import struct

import pytest
from support.netns import bpffs_dir, veth_net

from bpfdsl.abi.btf.shape import type_decl, type_shape
from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object

V1 = """license "GPL"
struct stats { hits: u32, last_len: u32 }
map st: array<u32, stats>(max_entries: 1PIN)
xdp fn count(ctx) {
    if ctx.len != 61 { return XDP_PASS }  // the test's frames only, not the veth's own
    let s = st.lookup(0) else { return XDP_PASS }
    s.hits += 1
    s.last_len = ctx.len as u32
    return XDP_PASS
}
"""

V2 = """license "GPL"
struct stats { total_bytes: u64 }
map st: array<u32, stats>(max_entries: 1PIN)
xdp fn count(ctx) {
    if ctx.len != 61 { return XDP_PASS }
    let s = st.lookup(0) else { return XDP_PASS }
    s.total_bytes += ctx.len
    return XDP_PASS
}
"""

# same sizes and member layout as V1, one member renamed: a changed meaning
V1_RENAMED = V1.replace("last_len", "first_len")
# the key's byte order changed (u32 -> be32): same 4 bytes, other values
V1_BE_KEY = V1.replace("array<u32, stats>", "hash<be32, stats>").replace(
    "lookup(0)", "lookup(10.0.0.1)"
)


def _value_shape(src: str):
    spec = read_object(compile_source(src.replace("PIN", "")).obj)
    m = spec.maps["st"]
    return spec.btf, m.key_type_id, m.value_type_id


def test_shapes_tell_same_sizes_apart_and_keep_equal_types_equal():
    b1, k1, v1 = _value_shape(V1)
    b2, _, v2 = _value_shape(V2)
    assert b1 is not None and b2 is not None
    assert type_shape(b1, v1) != type_shape(b2, v2)
    assert type_decl(b1, v1) == "struct stats { hits: u32, last_len: u32 }"
    assert type_decl(b2, v2) == "struct stats { total_bytes: u64 }"
    b3, _, v3 = _value_shape(V1_RENAMED)
    assert type_shape(b1, v1) != type_shape(b3, v3)
    b4, k4, _ = _value_shape(V1_BE_KEY)
    assert type_shape(b1, k1) != type_shape(b4, k4)
    again, ka, va = _value_shape(V1)  # a second compile: other BTF object, same shapes
    assert type_shape(b1, v1) == type_shape(again, va)
    assert type_shape(b1, k1) == type_shape(again, ka)


def _value(pin: str) -> bytes:
    with syscall.obj_get(f"{pin}/maps/st") as m:
        got = syscall.map_lookup(m, struct.pack("<I", 0), 8)
    assert got is not None
    return got


@pytest.mark.kernel
def test_update_with_a_changed_value_type_is_refused_and_changes_nothing(tmp_path):
    v1, v2 = tmp_path / "v1.bpfd", tmp_path / "v2.bpfd"
    v1.write_text(V1.replace("PIN", ""))
    v2.write_text(V2.replace("PIN", ""))
    pin = bpffs_dir("mrt_")
    with veth_net("mt") as net:
        r = net.bpfdsl("attach", "xdp", str(v1), "--dev", net.xdp_dev, "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        try:
            with syscall.obj_get(f"{pin}/progs/count") as p:
                for _ in range(3):
                    syscall.prog_test_run(p, bytes(61))
            before = _value(pin)
            assert struct.unpack("<II", before) == (3, 61)
            listing = sorted(os.listdir(pin))
            r = net.bpfdsl("attach", "xdp", str(v2), "--dev", net.xdp_dev, "--pin-dir", pin)
            assert r.returncode == 1
            assert "error[map-incompatible]: map 'st'" in r.stderr
            assert "value type struct stats { hits: u32, last_len: u32 }" in r.stderr
            assert "(object: struct stats { total_bytes: u64 })" in r.stderr
            assert "--fresh-maps" in r.stderr
            assert sorted(os.listdir(pin)) == listing and _value(pin) == before
            # the same types (a recompiled V1) keep the state
            r = net.bpfdsl("attach", "xdp", str(v1), "--dev", net.xdp_dev, "--pin-dir", pin)
            assert r.returncode == 0, r.stderr
            assert _value(pin) == before
            # --fresh-maps is the way out: a new, empty map of the new type
            r = net.bpfdsl(
                "attach", "xdp", str(v2), "--dev", net.xdp_dev, "--pin-dir", pin, "--fresh-maps"
            )
            assert r.returncode == 0, r.stderr
            assert _value(pin) == bytes(8)
        finally:
            net.bpfdsl("detach", "--dev", net.xdp_dev)
    assert not os.path.exists(pin)


@pytest.mark.kernel
def test_pin_by_name_with_a_changed_value_type_is_refused(tmp_path, capsys):
    root = bpffs_dir("mrr_")
    os.mkdir(root)
    dirs = [bpffs_dir("mrd_"), bpffs_dir("mrd_")]
    pin = ", pinning: LIBBPF_PIN_BY_NAME"
    v1, v2 = tmp_path / "v1.bpfd", tmp_path / "v2.bpfd"
    v1.write_text(V1.replace("PIN", pin))
    v2.write_text(V2.replace("PIN", pin))
    try:
        assert main(["load", str(v1), "--pin-dir", dirs[0], "--pin-root", root]) == 0
        capsys.readouterr()
        assert main(["load", str(v2), "--pin-dir", dirs[1], "--pin-root", root]) == 1
        err = capsys.readouterr().err
        assert "error[pin-incompatible]: map 'st'" in err
        assert "value type struct stats { hits: u32, last_len: u32 }" in err
        assert f"rm {root}/st" in err
        assert not os.path.exists(dirs[1])
    finally:
        for d in dirs:
            if os.path.exists(d):
                main(["unload", d])
        shutil.rmtree(root, ignore_errors=True)
