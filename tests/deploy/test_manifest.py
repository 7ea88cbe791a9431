"""`bpfdsl image manifest`: bpfman-operator resources, validated against the operator's CRD
schemas (tests/deploy/data/, bpfman-operator v0.6.0; README.md there names the source).

tests/support/bpfman.py turns the CRD schemas into JSON Schema (its docstring says how).
"""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
import yaml
from support.bpfman import crd_errors
from support.paths import PROGS

from bpfdsl.cli import main

FILTER = PROGS / "xdp_udp_filter.bpfd"


def _manifest(tmp_path: Path, *args: str) -> tuple[int, dict | None]:
    out = tmp_path / "cr.yaml"
    rc = main(["image", "manifest", *args, "-o", str(out)])
    return rc, (yaml.safe_load(out.read_text()) if rc == 0 else None)


def test_cluster_application_validates_and_says_what_was_asked(tmp_path: Path) -> None:
    rc, doc = _manifest(
        tmp_path,
        str(FILTER),
        "--image", "quay.io/acme/udp-filter:v1",
        "--interface", "eth0",
        "--interface", "eth1",
        "--node-selector", "kubernetes.io/os=linux",
        "--priority", "50",
        "--set", "port=5353",
        "--pull-policy", "Always",
    )  # fmt: skip
    assert rc == 0 and doc is not None
    assert crd_errors(doc) == []
    assert doc["apiVersion"] == "bpfman.io/v1alpha1" and doc["kind"] == "ClusterBpfApplication"
    assert doc["metadata"] == {"name": "xdp-udp-filter"}
    spec = doc["spec"]
    assert spec["nodeSelector"] == {"matchLabels": {"kubernetes.io/os": "linux"}}
    assert spec["byteCode"]["image"] == {
        "url": "quay.io/acme/udp-filter:v1",
        "imagePullPolicy": "Always",
    }
    # port is a be16: 5353 = 0x14e9 in network order
    assert base64.b64decode(spec["globalData"]["port"]) == b"\x14\xe9"
    (prog,) = spec["programs"]
    assert prog["name"] == "udp_filter" and prog["type"] == "XDP"
    (link,) = prog["xdp"]["links"]
    assert link == {"interfaceSelector": {"interfaces": ["eth0", "eth1"]}, "priority": 50}


def test_u32_config_is_little_endian(tmp_path: Path) -> None:
    rc, doc = _manifest(
        tmp_path,
        str(PROGS / "xdp_cpumap_steer.bpfd"),
        "--image", "registry.local/steer:1",
        "--primary-interface",
        "--set", "n_cpus=4",
        "--set", "drop_port=0x0102",
    )  # fmt: skip
    assert rc == 0 and doc is not None and crd_errors(doc) == []
    gd = doc["spec"]["globalData"]
    assert base64.b64decode(gd["n_cpus"]) == b"\x04\x00\x00\x00"
    assert base64.b64decode(gd["drop_port"]) == b"\x02\x01"  # u16, host (little-endian) order
    # only the interface program: on_cpu (xdp/cpumap) runs from the cpumap
    assert [p["name"] for p in doc["spec"]["programs"]] == ["steer"]
    link = doc["spec"]["programs"][0]["xdp"]["links"][0]
    assert link["interfaceSelector"] == {"primaryNodeInterface": True}
    assert doc["spec"]["nodeSelector"] == {}


def test_namespaced_application_validates(tmp_path: Path) -> None:
    rc, doc = _manifest(
        tmp_path,
        str(FILTER),
        "--image", "quay.io/acme/udp-filter:v1",
        "--interface", "eth0",
        "--namespace", "acme",
        "--pods", "app=web",
        "--name", "web-filter",
    )  # fmt: skip
    assert rc == 0 and doc is not None and crd_errors(doc) == []
    assert doc["kind"] == "BpfApplication" and doc["metadata"] == {
        "name": "web-filter",
        "namespace": "acme",
    }
    link = doc["spec"]["programs"][0]["xdp"]["links"][0]
    assert link["networkNamespaces"] == {"pods": {"matchLabels": {"app": "web"}}}


def test_tc_and_tcx_programs_from_clang(tmp_path: Path) -> None:
    src = tmp_path / "cls.c"
    src.write_text(
        "#define SEC(n) __attribute__((section(n), used))\n"
        'SEC("tc") int cls_pass(void *skb) { return 0; }\n'
        'char _license[] SEC("license") = "GPL";\n'
    )
    obj = tmp_path / "cls.o"
    r = subprocess.run(
        ["clang-19", "-O2", "-g", "-target", "bpf", "-c", str(src), "-o", str(obj)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    for kind, cr_type in (("tc", "TC"), ("tcx", "TCX")):
        rc, doc = _manifest(
            tmp_path, str(obj), "--image", "q.io/x/cls:1", "--interface", "eth0",
            "--kind", kind, "--direction", "egress",
        )  # fmt: skip
        assert rc == 0 and doc is not None and crd_errors(doc) == []
        (prog,) = doc["spec"]["programs"]
        assert prog["type"] == cr_type
        assert prog[kind]["links"][0]["direction"] == "Egress"


def test_validator_rejects_what_the_operator_rejects(tmp_path: Path) -> None:
    rc, doc = _manifest(tmp_path, str(FILTER), "--image", "q.io/a/b:1", "--interface", "eth0")
    assert rc == 0 and doc is not None and crd_errors(doc) == []
    prog = doc["spec"]["programs"][0]
    prog["type"] = "TC"  # the CEL rule: tc needed, xdp forbidden
    assert any("xdp" in e or "tc" in e for e in crd_errors(doc))
    prog["type"] = "XDP"
    prog["xdp"]["links"][0]["priority"] = 1001
    assert any("1001" in e for e in crd_errors(doc))
    prog["xdp"]["links"][0]["priority"] = 10
    doc["spec"]["globalData"] = {"port": "not base64!"}
    assert crd_errors(doc)
    del doc["spec"]["globalData"]
    doc["spec"]["nodeSelectr"] = {}
    assert crd_errors(doc)


def test_unknown_config_is_refused_with_the_names(tmp_path: Path, capsys) -> None:
    rc, _ = _manifest(
        tmp_path, str(FILTER), "--image", "q/x:1", "--interface", "eth0", "--set", "prot=53"
    )
    err = capsys.readouterr().err
    assert rc == 1
    assert (
        "error[unknown-config]: unknown config 'prot'" in err
        and "configs of this object: port" in err
    )
    assert list(tmp_path.iterdir()) == []


def test_program_bpfman_cannot_attach_is_refused(tmp_path: Path, capsys) -> None:
    rc, _ = _manifest(
        tmp_path, str(PROGS / "sk_msg_policy.bpfd"), "--image", "q/x:1", "--interface", "e0"
    )
    err = capsys.readouterr().err
    assert rc == 1 and "sk_msg_policy.bpfd:12:1" in err and "error[not-attachable]" in err
    rc, _ = _manifest(
        tmp_path, str(PROGS / "xdp_cpumap_steer.bpfd"), "--image", "q/x:1", "--interface", "e0",
        "--program", "on_cpu",
    )  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 1 and "on_cpu (section xdp/cpumap)" in err and "xdp_cpumap_steer.bpfd:" in err
    rc, _ = _manifest(
        tmp_path, str(FILTER), "--image", "q/x:1", "--interface", "e0", "--kind", "tcx"
    )
    assert rc == 1 and "as tcx" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--interface", "eth0", "--priority", "1001"], "outside 0..1000"),
        ([], "no interface to attach to"),
        (["--interface", "eth0", "--name", "Bad_Name"], "not a Kubernetes object name"),
        (["--interface", "eth0", "--namespace", "acme"], "--pods"),
    ],
)
def test_options_the_crd_refuses_are_usage_errors(tmp_path: Path, capsys, args, words) -> None:
    rc, _ = _manifest(tmp_path, str(FILTER), "--image", "q/x:1", *args)
    assert rc == 2 and words in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output(tmp_path: Path, capsys) -> None:
    (tmp_path / "f").write_text("")
    rc = main(["image", "manifest", str(FILTER), "--image", "q/x:1", "--interface", "eth0",
               "-o", str(tmp_path / "f" / "cr.yaml")])  # fmt: skip
    assert rc == 1 and "error[unwritable-output]" in capsys.readouterr().err
    assert [p.name for p in tmp_path.iterdir()] == ["f"]
