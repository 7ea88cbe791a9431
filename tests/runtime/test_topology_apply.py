"""``bpfdsl apply [--plan] / status / down FILE`` (topology files): on a veth pair, the
plan lists what apply then does, a second apply changes nothing, an edited object is
rolled out with its data maps kept, a broken object leaves the running state alone, and
down leaves nothing pinned or attached."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from bpfdsl.cli import main
from bpfdsl.kernel.netlink import veth_pair

DATA = Path(__file__).resolve().parents[1] / "data" / "topology"


def _xdp_prog_id(dev: str) -> int | None:
    from pyroute2 import IPRoute

    with IPRoute() as ipr:
        (link,) = ipr.get_links(ifname=dev)
        xdp = link.get_attr("IFLA_XDP")
        return xdp.get_attr("IFLA_XDP_PROG_ID") if xdp is not None else None


def _topology(tmp: Path, pin: str, a: str, b: str, drop_port: int) -> Path:
    text = (DATA / "edge.toml").read_text()
    text = text.replace("/sys/fs/bpf/topo_manual", pin).replace('"tpa", "tpb"', f'"{a}", "{b}"')
    text = text.replace("drop_port = 9", f"drop_port = {drop_port}")
    f = tmp / "edge.toml"
    f.write_text(text)
    return f


@pytest.mark.kernel
def test_apply_plan_status_edit_down(tmp_path, capsys):
    (tmp_path / "edge.bpfd").write_text((DATA / "edge.bpfd").read_text())
    pin = f"/sys/fs/bpf/bpfdsl_topo_{uuid.uuid4().hex[:8]}"
    with veth_pair(prefix="tpo") as pair:
        a, b = pair.a.name, pair.b.name
        f = _topology(tmp_path, pin, a, b, 9)
        try:
            assert main(["apply", "--plan", str(f)]) == 0
            plan = capsys.readouterr().out
            assert "plan: 8 changes" in plan and not os.path.exists(pin)  # nothing done
            assert main(["apply", str(f)]) == 0
            done = capsys.readouterr().out
            assert done.splitlines()[1:] == plan.splitlines()[1:]  # exactly what was planned
            ids = {_xdp_prog_id(a), _xdp_prog_id(b)}
            assert len(ids) == 1 and None not in ids  # the one program on both ends

            assert main(["apply", str(f)]) == 0
            assert capsys.readouterr().out.startswith("no change")
            assert main(["status", str(f)]) == 0
            assert capsys.readouterr().out.startswith("in sync")

            # a map value set at run time survives a rollout of an edited object
            allowed = f"{pin}/edge/maps/allowed"
            assert main(["map", "update", allowed, "7", "77"]) == 0
            capsys.readouterr()
            f = _topology(tmp_path, pin, a, b, 10)
            assert main(["status", str(f)]) == 1  # the file changed: drift
            capsys.readouterr()
            assert main(["apply", str(f)]) == 0
            capsys.readouterr()
            new_ids = {_xdp_prog_id(a), _xdp_prog_id(b)}
            assert len(new_ids) == 1 and new_ids != ids and None not in new_ids
            assert main(["--json", "map", "lookup", allowed, "7"]) == 0
            assert '"value": 77' in capsys.readouterr().out

            # a broken object: nothing changes, the running program stays
            (tmp_path / "edge.bpfd").write_text(
                (DATA / "edge.bpfd").read_text() + "\nxdp fn broken(ctx) { return nope }\n"
            )
            assert main(["apply", str(f)]) != 0
            assert "nothing was changed" in capsys.readouterr().err
            assert {_xdp_prog_id(a), _xdp_prog_id(b)} == new_ids
            (tmp_path / "edge.bpfd").write_text((DATA / "edge.bpfd").read_text())
        finally:
            rc = main(["down", str(f)])
            capsys.readouterr()
        assert rc == 0
        assert not os.path.exists(pin)
        assert _xdp_prog_id(a) is None and _xdp_prog_id(b) is None
