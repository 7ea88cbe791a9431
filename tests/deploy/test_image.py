"""`bpfdsl image build`: bpfman bytecode images as OCI image layouts.

The layer and labels are read back the way bpfman v0.6.0 reads them
(bpfman/src/oci_utils/image_manager.rs: config.Labels io.ebpf.programs / io.ebpf.maps as
JSON name -> type; the first layer, tar+gzip, the first tar entry's data is the object);
skopeo and umoci take the layout; the extracted object loads with bpfdsl's loader and with
`bpftool prog loadall`, and both test runs give the verdicts the source says.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import secrets
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from scapy.all import IP, UDP, Ether, raw
from support.bpfman import blob, bpfman_read
from support.paths import PROGS

from bpfdsl.cli import main
from bpfdsl.compiler import compile_file
from bpfdsl.obj.collection import read_object

FILTER = PROGS / "xdp_udp_filter.bpfd"
XDP_DROP, XDP_PASS = 1, 2


def _tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        if os.environ.get("BPFDSL_REQUIRE_KERNEL") == "1":
            pytest.fail(f"{name} is not installed (scripts/test.sh installs it)")
        pytest.skip(f"{name} is not installed")
    return path


def _build(tmp_path: Path, *args: str) -> int:
    return main(["image", "build", *args])


def test_image_has_bpfman_labels_and_layer(tmp_path: Path) -> None:
    out = tmp_path / "img"
    assert _build(tmp_path, str(FILTER), "-o", str(out), "--tag", "v1") == 0
    programs, maps, data = bpfman_read(out, "v1")
    assert programs == {"udp_filter": "xdp"}
    assert maps == {"drops": "per_cpu_array", "passes": "per_cpu_array"}
    assert data == compile_file(FILTER).obj
    assert json.loads((out / "oci-layout").read_text()) == {"imageLayoutVersion": "1.0.0"}
    # one entry: the object at the root of the layer (Containerfile.bytecode: COPY $FILE /)
    index = json.loads((out / "index.json").read_text())
    manifest = json.loads(blob(out, index["manifests"][0]["digest"]))
    layer = gzip.decompress(blob(out, manifest["layers"][0]["digest"]))
    with tarfile.open(fileobj=io.BytesIO(layer)) as tf:
        assert [(m.name, m.isfile()) for m in tf.getmembers()] == [("xdp_udp_filter.o", True)]


def test_labels_spell_types_as_bpfman(tmp_path: Path) -> None:
    # Values as bpfman's BpfProgType / MapType Display (bpfman/src/types.rs, v0.6.0).
    objs = [
        PROGS / "xdp_cpumap_steer.bpfd",
        PROGS / "xdp_acl.bpfd",
        PROGS / "xdp_xsk_redirect.bpfd",
    ]
    out = tmp_path / "img"
    assert _build(tmp_path, *map(str, objs), "-o", str(out)) == 0
    p, m, _ = bpfman_read(out, "xdp_cpumap_steer-latest")
    assert p == {"steer": "xdp", "on_cpu": "xdp"}
    assert m == {"cpus": "array", "cpu_map": "cpumap", "on_cpu_count": "per_cpu_array"}
    _, m, _ = bpfman_read(out, "xdp_acl-latest")
    assert m == {"v4_block": "lpm_trie", "v6_block": "lpm_trie", "dropped": "per_cpu_array"}
    _, m, data = bpfman_read(out, "xdp_xsk_redirect-latest")
    assert "xskmap" in m.values()
    assert data == compile_file(objs[2]).obj


def test_build_is_reproducible(tmp_path: Path) -> None:
    obj = tmp_path / "f.o"
    obj.write_bytes(compile_file(FILTER).obj)
    for n in ("a", "b"):
        assert (
            _build(tmp_path, str(obj), "-o", str(tmp_path / n), "--archive", f"{tmp_path / n}.tar")
            == 0
        )
    files_a = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*"))
    files_b = sorted(p.relative_to(tmp_path / "b") for p in (tmp_path / "b").rglob("*"))
    # oci-layout, index.json, blobs/, blobs/sha256/, and the layer, config, manifest blobs
    assert files_a == files_b and len(files_a) == 7
    for rel in files_a:
        if (tmp_path / "a" / rel).is_file():
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes()
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    with tarfile.open(tmp_path / "a.tar") as tf:
        assert all(m.mtime == 0 and m.uid == 0 and m.uname == "" for m in tf.getmembers())


def test_skopeo_and_umoci_take_the_image(tmp_path: Path) -> None:
    skopeo, umoci = _tool("skopeo"), _tool("umoci")
    out, tar = tmp_path / "img", tmp_path / "img.tar"
    assert _build(tmp_path, str(FILTER), "-o", str(out), "--archive", str(tar), "--tag", "v2") == 0
    for ref in (f"oci:{out}:v2", f"oci-archive:{tar}:v2"):
        r = subprocess.run([skopeo, "inspect", ref], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        assert json.loads(doc["Labels"]["io.ebpf.programs"]) == {"udp_filter": "xdp"}
        r = subprocess.run(
            [skopeo, "inspect", "--raw", ref], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr
        manifest = json.loads(r.stdout)  # what a registry serves for the tag
        assert [x["mediaType"] for x in manifest["layers"]] == [
            "application/vnd.oci.image.layer.v1.tar+gzip"
        ]
        assert doc["Layers"] == [x["digest"] for x in manifest["layers"]]
        assert doc["Os"] == "linux"
    r = subprocess.run(
        [umoci, "stat", "--image", f"{out}:v2", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    if os.geteuid() != 0:
        pytest.skip("umoci unpack without --rootless needs root")
    bundle = tmp_path / "bundle"
    r = subprocess.run(
        [umoci, "unpack", "--image", f"{out}:v2", str(bundle)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    assert (bundle / "rootfs" / "xdp_udp_filter.o").read_bytes() == compile_file(FILTER).obj


def _udp(dport: int) -> bytes:
    return raw(Ether() / IP(src="10.0.0.1", dst="10.0.0.2") / UDP(dport=dport) / (b"x" * 32))


@pytest.mark.kernel
def test_extracted_object_loads_and_runs_in_loader_and_bpftool(tmp_path: Path) -> None:
    from bpfdsl.runtime.testrun import open_engine

    out = tmp_path / "img"
    assert _build(tmp_path, str(FILTER), "-o", str(out)) == 0
    _, _, data = bpfman_read(out, "latest")
    obj = tmp_path / "extracted.o"
    obj.write_bytes(data)

    # bpfdsl's loader: port 9999 (the source's default) is dropped, 53 passes; --set port=53
    spec = read_object(data, name=str(obj))
    for config, verdicts in (
        ({}, {9999: XDP_DROP, 53: XDP_PASS}),
        ({"port": 53}, {53: XDP_DROP, 9999: XDP_PASS}),
    ):
        eng = open_engine("kernel", spec, config=config)
        try:
            assert {p: eng.run("udp_filter", _udp(p)).retval for p in verdicts} == verdicts
        finally:
            eng.close()

    # libbpf through bpftool: loadall, then BPF_PROG_TEST_RUN of the pinned program
    bpftool = _tool("bpftool")
    pin = Path(f"/sys/fs/bpf/bpfdsl_image_{secrets.token_hex(4)}")
    try:
        r = subprocess.run(
            [bpftool, "prog", "loadall", str(obj), str(pin)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        for port, verdict in ((9999, XDP_DROP), (53, XDP_PASS)):
            pkt = tmp_path / f"pkt{port}"
            pkt.write_bytes(_udp(port))
            r = subprocess.run(
                [
                    bpftool,
                    "-j",
                    "prog",
                    "run",
                    "pinned",
                    str(pin / "udp_filter"),
                    "data_in",
                    str(pkt),
                ],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert r.returncode == 0, r.stderr
            assert json.loads(r.stdout)["retval"] == verdict
    finally:
        shutil.rmtree(pin, ignore_errors=True)


def test_object_without_attachable_program_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "img"
    rc = _build(tmp_path, str(PROGS / "sk_msg_policy.bpfd"), "-o", str(out))
    err = capsys.readouterr().err
    assert rc == 1
    assert "error[not-attachable]" in err and "sk_msg_policy.bpfd:12:1" in err
    assert "policy (section sk_msg)" in err and "xdp, tc, tcx, tracepoint" in err
    assert os.listdir(tmp_path) == []  # no image, no temporary directory


def test_unwritable_output_leaves_nothing(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    assert _build(tmp_path, str(FILTER), "-o", str(blocker / "img")) == 1
    assert "error[unwritable-output]" in capsys.readouterr().err
    # the archive cannot be written: the layout is not left behind either
    rc = _build(
        tmp_path, str(FILTER), "-o", str(tmp_path / "img"), "--archive", str(blocker / "x.tar")
    )
    assert rc == 1 and "error[unwritable-output]" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["file"]
    # an existing directory that is not an image layout is left alone
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    assert _build(tmp_path, str(FILTER), "-o", str(keep)) == 1
    assert os.listdir(keep) == ["notes.txt"]
    assert "is not an image layout" in capsys.readouterr().err


def test_rebuild_replaces_an_earlier_layout(tmp_path: Path) -> None:
    out = tmp_path / "img"
    assert _build(tmp_path, str(PROGS / "xdp_pass.bpfd"), "-o", str(out)) == 0
    assert _build(tmp_path, str(FILTER), "-o", str(out)) == 0
    programs, _, _ = bpfman_read(out, "latest")
    assert programs == {"udp_filter": "xdp"}
    assert sorted(os.listdir(tmp_path)) == ["img"]
    assert len(list((out / "blobs" / "sha256").iterdir())) == 3  # no blob of the old image


def test_bad_tag_is_a_usage_error(tmp_path: Path, capsys) -> None:
    assert _build(tmp_path, str(FILTER), "-o", str(tmp_path / "img"), "--tag=v1/x") == 2
    assert "is not an image tag" in capsys.readouterr().err
    assert os.listdir(tmp_path) == []
