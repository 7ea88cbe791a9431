"""``bpfdsl show`` lists sock_ops programs on cgroups and sk_msg programs on the
sockmaps/sockhashes they are attached to (sk_msg attaches to a map, not a socket), as
``bpftool cgroup tree`` / ``prog show`` would tell -- checked with real attachments, both
through BPF_PROG_ATTACH (``bpfdsl sockops|sockmap attach``) and through a cgroup link."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.abi.prog_types import AttachType
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import sockmap
from bpfdsl.runtime.cgroup import ChildCgroup

pytestmark = pytest.mark.kernel
REDIR = ROOT / "progs" / "sk_msg_redirect_ingress.bpfd"


def bpfdsl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def _bpftool_cgroup(path: str) -> list[dict]:
    out = subprocess.run(
        ["bpftool", "-j", "cgroup", "show", path], capture_output=True, text=True, check=True
    ).stdout
    return json.loads(out or "[]")


@pytest.fixture
def attached():
    """The sk_msg + sock_ops object loaded and pinned, track on a child cgroup, redir on
    the sockhash socks; one TCP socket in socks.  Yields (pin dir, cgroup path)."""
    pin = f"/sys/fs/bpf/bpfdsl_show_{uuid.uuid4().hex[:8]}"
    with ChildCgroup(prefix="bpfdsl-show") as cg:
        try:
            r = bpfdsl("load", str(REDIR), "--pin-dir", pin)
            assert r.returncode == 0, r.stderr
            r = bpfdsl("sockops", "attach", "track", "--pin-dir", pin, "--cgroup", cg.path)
            assert r.returncode == 0, r.stderr
            r = bpfdsl("sockmap", "attach", f"{pin}:socks", "--prog", "redir")
            assert r.returncode == 0, r.stderr
            yield pin, cg.path
        finally:
            bpfdsl("sockops", "detach", f"{pin}/progs/track", "--cgroup", cg.path)
            bpfdsl("sockmap", "detach", f"{pin}:socks", "--prog", "redir")
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)


def _show() -> dict:
    r = bpfdsl("-j", "show")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_show_lists_sock_ops_on_the_cgroup_and_sk_msg_on_the_map(attached) -> None:
    pin, cg = attached
    with S.obj_get(f"{pin}/progs/track") as t, S.obj_get(f"{pin}/progs/redir") as m:
        track_id, redir_id = S.prog_info(t).id, S.prog_info(m).id
    srv = socket.create_server(("127.0.0.1", 0))
    cli = socket.create_connection(srv.getsockname())
    try:
        with S.obj_get(f"{pin}/maps/socks") as socks:
            sockmap.sockmap_add(socks, bytes(12), cli, map_name="socks")
        inv = _show()
        text = bpfdsl("show")
    finally:
        cli.close()
        srv.close()
    mine = [a for a in inv["sock_ops"]["attachments"] if a["cgroup"] == cg]
    assert mine == [
        {
            "cgroup": cg,
            "prog_id": track_id,
            "prog_name": "track",
            "via": "prog_attach",
            "link_id": None,
            "multi": True,
        }
    ]
    # bpftool sees the same program on that cgroup
    if shutil.which("bpftool"):
        assert [(p["id"], p["attach_type"]) for p in _bpftool_cgroup(cg)] == [
            (track_id, "cgroup_sock_ops")
        ]
    (msg,) = [a for a in inv["sk_msg"] if a["prog_id"] == redir_id]
    assert msg["map_name"] == "socks" and msg["map_type"] == "sockhash"
    assert msg["map_pin"] == f"{pin}/maps/socks" and msg["sockets"] == 1
    assert msg["prog_name"] == "redir" and msg["via"] == "prog_attach"
    r = text
    assert r.returncode == 0, r.stderr
    assert f"  {cg}: track (prog id {track_id}) via BPF_PROG_ATTACH, multi" in r.stdout
    assert (
        f"  sockhash socks (map id {msg['map_id']}, pinned at {pin}/maps/socks, 1 socket(s)): "
        f"redir (prog id {redir_id}) via BPF_PROG_ATTACH"
    ) in r.stdout


def test_show_names_a_cgroup_link(attached) -> None:
    """A sock_ops program attached through BPF_LINK_CREATE shows with its link id."""
    pin, _cg = attached
    with ChildCgroup(prefix="bpfdsl-showl") as cg2, S.obj_get(f"{pin}/progs/track") as prog:
        fd = os.open(cg2.path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            with S.link_create(prog, fd, AttachType.CGROUP_SOCK_OPS) as link:
                link_id = S.link_info(link).id
                inv = _show()
        finally:
            os.close(fd)
        (a,) = [a for a in inv["sock_ops"]["attachments"] if a["cgroup"] == cg2.path]
        assert (a["prog_name"], a["via"], a["link_id"]) == ("track", "link", link_id)
    # after the link is closed the cgroup has nothing (and show says so)
    assert not [a for a in _show()["sock_ops"]["attachments"] if a["cgroup"] == cg2.path]


def test_prog_query_attr_matches_vmlinux_btf() -> None:
    """ProgQueryAttr has the offsets of union bpf_attr's ``query`` member on this kernel."""
    from bpfdsl.abi.bpf_attr import ProgQueryAttr
    from bpfdsl.abi.btf.core import Kind, parse_btf

    path = Path("/sys/kernel/btf/vmlinux")
    if not path.exists():
        pytest.skip("no /sys/kernel/btf/vmlinux")
    btf = parse_btf(path.read_bytes())
    attr = btf.find("bpf_attr", Kind.UNION)
    (query,) = [m for m in attr.members if m.name == "query"]

    def flat(tid: int, base: int = 0) -> dict[str, int]:
        out: dict[str, int] = {}
        for m in btf.resolve(tid).members:
            off = base + m.bit_offset // 8
            sub = btf.resolve(m.type)
            if not m.name and sub.kind in (Kind.STRUCT, Kind.UNION):
                out.update(flat(sub.id, off))
            elif m.name:
                out.setdefault(m.name, off)
        return out

    theirs = flat(query.type)
    ours = {n: getattr(ProgQueryAttr, n).offset for n, *_ in ProgQueryAttr._fields_}
    assert {n: o for n, o in ours.items() if not n.startswith("_")} == {
        n: theirs[n] for n in ours if not n.startswith("_")
    }
