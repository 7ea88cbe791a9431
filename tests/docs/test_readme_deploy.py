"""The README's "Deploying to a cluster" block, run as written on the README's first
program: the bpfdsl and skopeo inspect lines run (pushing and kubectl need a registry and
a cluster, so those two lines are only checked to name what the others wrote)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.paths import ROOT

README = (ROOT / "README.md").read_text()


def test_readme_deploy_block_runs(tmp_path: Path) -> None:
    (src,) = re.findall(r"```bpfd\n(.*?)```", README, re.S)
    (block,) = [b for b in re.findall(r"```sh\n(.*?)```", README, re.S) if "image build" in b]
    (tmp_path / "filter.bpfd").write_text(src)
    commands = [c.split("  #")[0].strip() for c in block.replace("\\\n", " ").splitlines()]
    commands = [c for c in commands if c]
    assert [c.split()[0] for c in commands] == ["bpfdsl", "skopeo", "skopeo", "bpfdsl", "kubectl"]
    assert "oci:filter-image:v1" in commands[2] and "-f udp-filter.yaml" in commands[4]
    if shutil.which("skopeo") is None and os.environ.get("BPFDSL_REQUIRE_KERNEL") != "1":
        pytest.skip("skopeo is not installed")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for cmd in (commands[0], commands[1], commands[3]):
        argv = cmd.split()
        if argv[0] == "bpfdsl":
            argv = [sys.executable, "-m", "bpfdsl", *argv[1:]]
        r = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"{cmd}\n{r.stderr}"
    doc = yaml.safe_load((tmp_path / "udp-filter.yaml").read_text())
    assert doc["kind"] == "ClusterBpfApplication"
    assert doc["spec"]["programs"][0]["name"] == "udp_filter"
    assert (tmp_path / "filter-image.tar").is_file()
