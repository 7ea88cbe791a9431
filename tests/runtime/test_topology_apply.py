"""``bpfdsl apply [--plan] / status / down FILE`` (topology files): on a veth pair and a
cgroup v2 of its own, apply brings up the XDP program on both ends, its prog_array slots,
the cpumap and devmap entries with their programs, the sk_msg program on the sockhash and
the sock_ops program on the cgroup (each read back from the kernel); the plan lists what
apply then does, a second apply changes nothing, an edited object is rolled out with its
data maps kept, a broken object leaves the running state alone, and down leaves nothing
pinned or attached."""

from __future__ import annotations

import glob
import os
import re
import struct
import uuid
from pathlib import Path

import pytest
from support.paths import ROOT
from support.redirect_testlib import stream

from bpfdsl.abi.prog_types import AttachType
from bpfdsl.cli import main
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.netlink import ifindex, veth_pair
from bpfdsl.runtime.cgroup import ChildCgroup

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
PROGS = ("front", "stage_v4", "stage_v6", "stage_arp", "on_cpu", "on_egress", "track", "redir")
PLANNED = 11  # object, map contents, 3 prog_array slots, cpumap, devmap, sk_msg, sock_ops, 2 xdp


def xdp_prog_id(dev: str) -> int | None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        (link,) = ipr.get_links(ifname=dev)
        xdp = link.get_attr("IFLA_XDP")
        return xdp.get_attr("IFLA_XDP_PROG_ID") if xdp is not None else None


def topology(tmp: Path, pin: str, a: str, b: str, cg: str, drop_port: int) -> Path:
    """tests/data/topology/edge.toml with this test's pin dir, interfaces and cgroup."""
    text = (DATA / "edge.toml").read_text()
    text = text.replace("/sys/fs/bpf/topo_manual", pin).replace('"tpa"', f'"{a}"')
    text = text.replace('"tpb"', f'"{b}"').replace('"/sys/fs/cgroup/topo_manual"', f'"{cg}"')
    text = text.replace("drop_port = 9", f"drop_port = {drop_port}")
    f = tmp / "edge.toml"
    f.write_text(text)
    return f


def _pinned_prog(pin: str, name: str) -> int:
    with S.obj_get(f"{pin}/edge/progs/{name}") as fd:
        return int(S.prog_info(fd).id)


def sock_ops_ids(cg: str) -> list[int]:
    fd = os.open(cg, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return S.prog_query(fd, AttachType.CGROUP_SOCK_OPS)[0]
    finally:
        os.close(fd)


def sk_msg_ids(map_fd: int | S.Fd) -> list[int]:
    return S.prog_query(map_fd, AttachType.SK_MSG_VERDICT)[0]


def kernel_state(pin: str, a: str, b: str, cg: str) -> dict:
    """What the kernel runs, read back: XDP on both ends, the prog ids in each slot and
    entry, the sk_msg programs on the pinned sockhash, the sock_ops programs on ``cg``."""
    st: dict = {"xdp": (xdp_prog_id(a), xdp_prog_id(b)), "sock_ops": sock_ops_ids(cg)}
    st["pinned"] = {p: _pinned_prog(pin, p) for p in PROGS}
    with S.obj_get(f"{pin}/edge/maps/stages") as fd:
        st["slots"] = [
            struct.unpack("<I", S.map_lookup(fd, struct.pack("<I", k), 4) or b"\0" * 4)[0]
            for k in range(3)
        ]
    with S.obj_get(f"{pin}/edge/maps/cpu_map") as fd:
        raw = S.map_lookup(fd, struct.pack("<I", 0), S.map_info(fd).value_size) or b""
        st["cpumap"] = struct.unpack("<II", raw[:8])  # bpf_cpumap_val: qsize, bpf_prog.id
    with S.obj_get(f"{pin}/edge/maps/tx_ports") as fd:
        raw = S.map_lookup(fd, struct.pack("<I", 0), S.map_info(fd).value_size) or b""
        st["devmap"] = struct.unpack("<II", raw[:8])  # bpf_devmap_val: ifindex, bpf_prog.id
    with S.obj_get(f"{pin}/edge/maps/socks") as fd:
        st["sk_msg"] = sk_msg_ids(fd)
    return st


def assert_up(st: dict, b: str) -> None:
    """Everything the file declares runs, each with the program pinned for it."""
    p = st["pinned"]
    assert st["xdp"] == (p["front"], p["front"])  # the one program on both ends
    assert st["slots"] == [p["stage_v4"], p["stage_v6"], p["stage_arp"]]
    assert st["cpumap"] == (192, p["on_cpu"])
    assert st["devmap"] == (ifindex(b), p["on_egress"])
    assert st["sk_msg"] == [p["redir"]]
    assert st["sock_ops"] == [p["track"]]  # the old one detached when replaced


def assert_down(pin: str, a: str, b: str, cg: str, sockmaps: list[S.Fd]) -> None:
    """Nothing pinned or attached: no XDP on either end, nothing on the cgroup, no sk_msg
    program on any sockhash the topology pinned (``sockmaps``: fds held from before)."""
    assert not os.path.exists(pin)
    assert xdp_prog_id(a) is None and xdp_prog_id(b) is None
    assert sock_ops_ids(cg) == []
    for fd in sockmaps:
        assert sk_msg_ids(fd) == []


def pinned_sockmaps(pin: str) -> list[S.Fd]:
    """Fds of every sockhash pinned under ``pin`` (the object dir and any staging dir)."""
    return [S.obj_get(p) for p in sorted(glob.glob(f"{pin}/*/maps/socks"))]


def plan_lines(out: str) -> list[str]:
    return out.splitlines()[1:]  # the head says "plan:" or "applied:"


def test_docs_example_is_the_tested_file() -> None:
    doc = (ROOT / "docs" / "topology.md").read_text()
    block = re.search(r"```toml\n(.*?)```", doc, re.S)
    assert block is not None and block.group(1) == (DATA / "edge.toml").read_text()


@pytest.mark.kernel
def test_apply_plan_status_edit_down(tmp_path, capsys):
    (tmp_path / "edge.bpfd").write_text((DATA / "edge.bpfd").read_text())
    pin = f"/sys/fs/bpf/bpfdsl_topo3_{uuid.uuid4().hex[:8]}"
    held: list[S.Fd] = []
    with veth_pair(prefix="tpo") as pair, ChildCgroup(prefix="bpfdsl-topo3") as cg:
        a, b = pair.a.name, pair.b.name
        f = topology(tmp_path, pin, a, b, cg.path, 9)
        try:
            assert main(["apply", "--plan", str(f)]) == 0
            plan = capsys.readouterr().out
            assert f"plan: {PLANNED} changes" in plan and not os.path.exists(pin)  # nothing done
            assert sock_ops_ids(cg.path) == []
            assert main(["apply", str(f)]) == 0
            done = capsys.readouterr().out
            assert plan_lines(done) == plan_lines(plan)  # exactly what was planned
            first = kernel_state(pin, a, b, cg.path)
            assert_up(first, b)
            # TCP in the cgroup skips the stack: sock_ops put the sockets into the
            # sockhash, the sk_msg program on it redirected every message
            for res in stream(cg, {4096: 20}):
                assert res["match"] and res["data_segs_out"] == 0

            assert main(["apply", str(f)]) == 0
            assert capsys.readouterr().out.startswith("no change")
            assert main(["status", str(f)]) == 0
            assert capsys.readouterr().out.startswith("in sync")
            assert kernel_state(pin, a, b, cg.path) == first

            # a map value set at run time survives a rollout of an edited object
            allowed = f"{pin}/edge/maps/allowed"
            assert main(["map", "update", allowed, "7", "77"]) == 0
            capsys.readouterr()
            f = topology(tmp_path, pin, a, b, cg.path, 10)
            assert main(["status", str(f)]) == 1  # the file changed: drift
            capsys.readouterr()
            assert main(["apply", "--plan", str(f)]) == 0
            plan = capsys.readouterr().out
            assert main(["apply", str(f)]) == 0
            done = capsys.readouterr().out
            assert plan_lines(done) == plan_lines(plan) and len(plan_lines(plan)) >= 9
            second = kernel_state(pin, a, b, cg.path)
            assert_up(second, b)
            assert not set(second["pinned"].values()) & set(first["pinned"].values())
            assert main(["--json", "map", "lookup", allowed, "7"]) == 0
            assert '"value": 77' in capsys.readouterr().out
            assert main(["apply", str(f)]) == 0
            assert capsys.readouterr().out.startswith("no change")

            # a broken object: nothing changes, the running programs stay
            (tmp_path / "edge.bpfd").write_text(
                (DATA / "edge.bpfd").read_text() + "\nxdp fn broken(ctx) { return nope }\n"
            )
            assert main(["apply", str(f)]) != 0
            assert "nothing was changed" in capsys.readouterr().err
            assert kernel_state(pin, a, b, cg.path) == second
            (tmp_path / "edge.bpfd").write_text((DATA / "edge.bpfd").read_text())
        finally:
            held = pinned_sockmaps(pin)
            rc = main(["down", str(f)])
            capsys.readouterr()
        try:
            assert rc == 0
            assert_down(pin, a, b, cg.path, held)
        finally:
            for fd in held:
                fd.close()
