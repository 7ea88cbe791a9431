"""The edge topology of the topology tests (tests/data/topology/edge.toml, docs/topology.md)
on a test's own interfaces, cgroup and pin dir, and what the kernel runs for it, read back.

:func:`topology` writes the file; :func:`kernel_state` reads the XDP programs of both ends,
the programs in each prog_array slot, cpumap and devmap entry, on the sockhash and on the
cgroup, and the contents of the data map ``allowed``; :func:`assert_up` checks each runs the
program pinned for it, :func:`assert_down` that nothing is left.  The caller is in the
interfaces' network namespace.
"""

from __future__ import annotations

import glob
import os
import struct
from pathlib import Path

from bpfdsl.abi.prog_types import AttachType
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"
PROGS = ("front", "stage_v4", "stage_v6", "stage_arp", "on_cpu", "on_egress", "track", "redir")
PLANNED = 11  # object, map contents, 3 prog_array slots, cpumap, devmap, sk_msg, sock_ops, 2 xdp
ALLOWED = {1: 10, 2: 20}  # the file's entries of edge:allowed


def xdp_prog_id(dev: str) -> int | None:
    """The id of the XDP program on ``dev`` (this namespace), None when there is none
    (read with pyroute2, not bpfdsl's netlink code)."""
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        (link,) = ipr.get_links(ifname=dev)
        xdp = link.get_attr("IFLA_XDP")
        return xdp.get_attr("IFLA_XDP_PROG_ID") if xdp is not None else None


def topology(
    tmp: Path, pin: str, a: str, b: str, cg: str, drop_port: int, name: str = "edge.toml"
) -> Path:
    """tests/data/topology/edge.toml with this test's pin dir, interfaces and cgroup, and
    ``drop_port`` as the object's config (another value: an edited object), written to
    ``tmp/name`` (next to a copy of edge.bpfd)."""
    text = (DATA / "edge.toml").read_text()
    text = text.replace("/sys/fs/bpf/topo_manual", pin).replace('"tpa"', f'"{a}"')
    text = text.replace('"tpb"', f'"{b}"').replace('"/sys/fs/cgroup/topo_manual"', f'"{cg}"')
    text = text.replace("drop_port = 9", f"drop_port = {drop_port}")
    f = tmp / name
    f.write_text(text)
    src = tmp / "edge.bpfd"
    if not src.exists():
        src.write_text((DATA / "edge.bpfd").read_text())
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


def map_contents(path: str, limit: int = 1024) -> dict[int, int]:
    """Every entry of the u32 -> u32 map pinned at ``path`` (at most ``limit``)."""
    out: dict[int, int] = {}
    with S.obj_get(path) as fd:
        info = S.map_info(fd)
        key = None
        for _ in range(limit):
            key = S.map_get_next_key(fd, key, info.key_size)
            if key is None:
                break
            raw = S.map_lookup(fd, key, info.value_size)
            if raw is not None:
                out[struct.unpack("<I", key)[0]] = struct.unpack("<I", raw[:4])[0]
    return out


def kernel_state(pin: str, a: str, b: str, cg: str) -> dict:
    """What the kernel runs, read back: XDP on both ends, the prog ids in each slot and
    entry, the sk_msg programs on the pinned sockhash, the sock_ops programs on ``cg``,
    the entries of ``allowed``."""
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
    st["allowed"] = map_contents(f"{pin}/edge/maps/allowed")
    return st


def assert_up(st: dict, b: str) -> None:
    """Everything the file declares runs, each with the program pinned for it."""
    p = st["pinned"]
    assert st["xdp"] == (p["front"], p["front"])  # the one program on both ends
    assert st["slots"] == [p["stage_v4"], p["stage_v6"], p["stage_arp"]]
    assert st["cpumap"] == (192, p["on_cpu"])
    assert st["devmap"] == (netlink.ifindex(b), p["on_egress"])
    assert st["sk_msg"] == [p["redir"]]
    assert st["sock_ops"] == [p["track"]]  # the old one detached when replaced
    assert ALLOWED.items() <= st["allowed"].items()


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


def pin_tree(pin: str, names: dict[str, str] | None = None) -> list[str]:
    """Every path under ``pin``, relative, sorted, with each key of ``names`` replaced by
    its value (interface names of a test: link pins ``link_xdp_DEV``)."""
    out = []
    for dirpath, dirs, files in os.walk(pin):
        for f in dirs + files:
            rel = os.path.relpath(os.path.join(dirpath, f), pin)
            for k, v in (names or {}).items():
                rel = rel.replace(k, v)
            out.append(rel)
    return sorted(out)


def plan_lines(out: str) -> list[str]:
    return out.splitlines()[1:]  # the head says "plan:" or "applied:"
