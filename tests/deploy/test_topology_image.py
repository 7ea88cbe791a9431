"""`bpfdsl image build|manifest TOPOLOGY.toml`: one topology file feeds the bpfman
resources too (#27).  Each object of the file is one bytecode image (tagged OBJECT-TAG);
each object with ``[[xdp]]`` tables is one ClusterBpfApplication that attaches its
programs to the interfaces the file names, with the file's configs as globalData and the
run config's priority.  What bpfman v0.6.0 cannot deploy (map entries, sk_msg, sock_ops,
map contents) is refused, each located at its table, unless --xdp-only.  Resources are
validated against the operator's CRD schema (tests/deploy/test_manifest.py)."""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
from pathlib import Path

import yaml
from support.bpfman import bpfman_read, crd_errors
from support.paths import ROOT

from bpfdsl.cli import main
from bpfdsl.compiler import compile_file

EDGE = ROOT / "tests" / "data" / "topology" / "edge.toml"

CHAIN = """\
license "GPL"

config drop_ttl: u8 = 1

map drops: percpu_array<u32, u64>(max_entries: 1)

xdp(priority: 10, chain_call: XDP_PASS) fn ddos_filter(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.ttl <= drop_ttl {
        drops[0] += 1
        return XDP_DROP
    }
    return XDP_PASS
}
"""

COUNTER = """\
license "GPL"

map seen: percpu_array<u32, u64>(max_entries: 1)

xdp fn count(ctx) {
    seen[0] += 1
    return XDP_PASS
}
"""

TOPOLOGY = """\
pin_dir = "/sys/fs/bpf/topo_image_test"

[objects.filter]
source = "filter.bpfd"
config = { drop_ttl = 3 }

[objects.counter]
source = "counter.bpfd"

[[xdp]]
program = "filter:ddos_filter"
interfaces = ["eth0", "eth1"]

[[xdp]]
program = "counter:count"
interfaces = ["eth2"]
"""


def _topology(tmp_path: Path) -> Path:
    (tmp_path / "filter.bpfd").write_text(CHAIN)
    (tmp_path / "counter.bpfd").write_text(COUNTER)
    top = tmp_path / "site.toml"
    top.write_text(TOPOLOGY)
    return top


def test_manifest_of_a_topology_is_one_resource_per_object(tmp_path: Path) -> None:
    top = _topology(tmp_path)
    out = tmp_path / "cr.yaml"
    rc = main(
        ["image", "manifest", str(top), "--image", "q.io/acme/site:filter-v1",
         "--image", "counter=q.io/acme/site:counter-v1", "--image", "filter=q.io/f:1",
         "--node-selector", "role=edge", "-o", str(out)]
    )  # fmt: skip
    assert rc != 0  # a plain URL beside named ones is refused
    rc = main(
        ["image", "manifest", str(top), "--image", "filter=q.io/acme/site:filter-v1",
         "--image", "counter=q.io/acme/site:counter-v1", "--node-selector", "role=edge",
         "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    docs = list(yaml.safe_load_all(out.read_text()))
    assert [d["metadata"]["name"] for d in docs] == ["site-filter", "site-counter"]
    for d in docs:
        assert crd_errors(d) == []
        assert d["spec"]["nodeSelector"] == {"matchLabels": {"role": "edge"}}
    f, c = docs
    assert f["spec"]["byteCode"]["image"]["url"] == "q.io/acme/site:filter-v1"
    assert base64.b64decode(f["spec"]["globalData"]["drop_ttl"]) == b"\x03"
    (prog,) = f["spec"]["programs"]
    assert prog["name"] == "ddos_filter"
    assert prog["xdp"]["links"] == [
        {
            "interfaceSelector": {"interfaces": ["eth0", "eth1"]},
            "priority": 10,  # the run config the source declares
            "proceedOn": ["Pass", "DispatcherReturn"],
        }
    ]
    assert "globalData" not in c["spec"]
    (prog,) = c["spec"]["programs"]
    assert prog["name"] == "count"
    assert prog["xdp"]["links"] == [{"interfaceSelector": {"interfaces": ["eth2"]}}]


def test_what_bpfman_cannot_deploy_is_located(tmp_path: Path, capsys) -> None:
    out = tmp_path / "cr.yaml"
    rc = main(["image", "manifest", str(EDGE), "--image", "q.io/e:1", "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 1 and not out.exists()
    lines = EDGE.read_text().splitlines()
    for table in ("[[cpumap]]", "[[devmap]]", "[[prog_array]]", "[[sk_msg]]", "[[sock_ops]]"):
        no = lines.index(table) + 1
        assert f"{EDGE}:{no}:1" in err, table
    maps_header = '[maps."edge:allowed"]'
    assert f"{EDGE}:{lines.index(maps_header) + 1}:1" in err
    assert "prog_array[2]: edge:stage_arp" in err
    assert "--xdp-only" in err
    rc = main(
        ["image", "manifest", str(EDGE), "--image", "q.io/e:1", "--xdp-only", "-o", str(out)]
    )  # fmt: skip
    assert rc == 0
    (doc,) = list(yaml.safe_load_all(out.read_text()))
    assert crd_errors(doc) == []
    assert [p["name"] for p in doc["spec"]["programs"]] == ["front"]
    link = doc["spec"]["programs"][0]["xdp"]["links"][0]
    assert link["interfaceSelector"] == {"interfaces": ["tpa", "tpb"]}


def test_topology_options_that_do_not_fit_are_usagecrd_errors(tmp_path: Path, capsys) -> None:
    top = _topology(tmp_path)
    cases = [
        ["--image", "q.io/x:1"],  # two objects: which URL is whose
        ["--image", "filter=q.io/x:1"],  # counter has none
        ["--image", "nosuch=q.io/x:1", "--image", "counter=q.io/y:1"],
        ["--image", "filter=q.io/x:1", "--image", "counter=q.io/y:1", "--interface", "eth9"],
    ]
    for extra in cases:
        assert main(["image", "manifest", str(top), *extra]) == 2, extra
    err = capsys.readouterr().err
    assert "no --image for object counter" in err
    assert "no object 'nosuch'" in err
    assert "names each program's interfaces" in err
    assert main(["image", "manifest", str(EDGE.with_suffix(".bpfd")), "--image", "a=b"]) == 2


def test_build_of_a_topology_is_one_image_per_object(tmp_path: Path) -> None:
    top = _topology(tmp_path)
    out = tmp_path / "layout"
    assert main(["image", "build", str(top), "-o", str(out), "--tag", "v1"]) == 0
    programs, _, data = bpfman_read(out, "filter-v1")
    assert programs == {"ddos_filter": "xdp"}
    assert data == compile_file(tmp_path / "filter.bpfd").obj
    programs, _, data = bpfman_read(out, "counter-v1")
    assert programs == {"count": "xdp"}
    assert data == compile_file(tmp_path / "counter.bpfd").obj
    # a topology is built alone
    assert main(["image", "build", str(top), str(top), "-o", str(tmp_path / "x")]) == 2


def test_topology_doc_commands_run(tmp_path: Path) -> None:
    """docs/topology.md's `bpfdsl image` block, run as written on this file's site.toml."""
    doc = (ROOT / "docs" / "topology.md").read_text()
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", doc, re.S) if "image build" in b]
    _topology(tmp_path)
    commands = [c.split("  #")[0].strip() for c in block.replace("\\\n", " ").splitlines()]
    commands = [c for c in commands if c]
    assert [c.split()[:3] for c in commands] == [
        ["bpfdsl", "image", "build"],
        ["bpfdsl", "image", "manifest"],
    ]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for cmd in commands:
        argv = [sys.executable, "-m", "bpfdsl", *cmd.split()[1:]]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{cmd}\n{r.stderr}"
    assert bpfman_read(tmp_path / "site-images", "filter-v1")[0] == {"ddos_filter": "xdp"}
    docs = list(yaml.safe_load_all((tmp_path / "site.yaml").read_text()))
    assert [d["spec"]["byteCode"]["image"]["url"] for d in docs] == [
        "quay.io/acme/site:filter-v1",
        "quay.io/acme/site:counter-v1",
    ]
    assert all(crd_errors(d) == [] for d in docs)
