"""The README's first program, run as written: its ```bpfd block and its shell walkthrough
(compile, check, run, veth pair in a namespace, load, attach, traffic, map dump, detach,
unload), with names made unique so the test cannot collide with anything on the machine."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import ROOT

README = (ROOT / "README.md").read_text()


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, re.S)


def test_readme_first_program_compiles(tmp_path: Path) -> None:
    from bpfdsl.compiler import compile_source

    (src,) = _blocks("bpfd")
    res = compile_source(src, "filter.bpfd")
    assert res.obj[:4] == b"\x7fELF" and res.programs == ["udp_filter"]


@pytest.mark.kernel
def test_readme_walkthrough_runs_as_written(tmp_path: Path) -> None:
    from scapy.all import IP, UDP, Ether, wrpcap

    (src,) = _blocks("bpfd")
    walk = next(b for b in _blocks("sh") if "bpfdsl compile filter.bpfd" in b)
    (tmp_path / "filter.bpfd").write_text(src)
    wrpcap(
        str(tmp_path / "capture.pcap"),
        [Ether() / IP(dst="10.0.0.2") / UDP(dport=p) / b"x" for p in (9999, 53)],
    )
    tag = secrets.token_hex(3)
    net = f"10.{int(tag[:2], 16) % 200 + 20}.{int(tag[2:4], 16)}."
    subst = {
        "/sys/fs/bpf/filter": f"/sys/fs/bpf/readme_{tag}",
        "veth0": f"rdm{tag}a",
        "veth1": f"rdm{tag}b",
        "netns add demo": f"netns add rdm{tag}",
        "netns exec demo": f"netns exec rdm{tag}",
        "netns del demo": f"netns del rdm{tag}",
        "ip -n demo": f"ip -n rdm{tag}",
        "netns demo": f"netns rdm{tag}",
        "10.99.0.": net,
    }
    bindir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bindir}{os.pathsep}{os.environ['PATH']}")
    if not (bindir / "bpfdsl").exists():  # running from a tree that is not pip-installed
        env["PYTHONPATH"] = str(ROOT)
        (tmp_path / "bpfdsl").write_text(f'#!/bin/sh\nexec {sys.executable} -m bpfdsl "$@"\n')
        (tmp_path / "bpfdsl").chmod(0o755)
        env["PATH"] = f"{tmp_path}{os.pathsep}{env['PATH']}"
    outputs = []
    try:
        for line in walk.splitlines():
            cmd = line.split("  #")[0].strip()
            if not cmd:
                continue
            for a, b in subst.items():
                cmd = cmd.replace(a, b)
            r = subprocess.run(
                ["bash", "-c", cmd],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert r.returncode == 0, f"{cmd}\n{r.stdout}\n{r.stderr}"
            outputs.append((cmd, r.stdout))
    finally:
        subprocess.run(["ip", "netns", "del", f"rdm{tag}"], capture_output=True)
        subprocess.run(["ip", "link", "del", f"rdm{tag}a"], capture_output=True)
        subprocess.run(["rm", "-rf", f"/sys/fs/bpf/readme_{tag}"], capture_output=True)
    dump = next(out for cmd, out in outputs if "map dump" in cmd)
    assert re.search(r"^0: 2$", dump, re.M), dump  # the two datagrams to 9999 were dropped
    run = next(out for cmd, out in outputs if " run " in f" {cmd} ")
    assert "XDP_DROP 1" in run and "XDP_PASS 1" in run, run
    assert not Path(f"/sys/fs/bpf/readme_{tag}").exists()
