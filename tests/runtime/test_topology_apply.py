"""``bpfdsl apply [--plan] / status / down FILE`` (topology files): on a veth pair and a
cgroup v2 of its own, apply brings up the XDP program on both ends, its prog_array slots,
the cpumap and devmap entries with their programs, the sk_msg program on the sockhash and
the sock_ops program on the cgroup (each read back from the kernel); the plan lists what
apply then does, a second apply changes nothing, an edited object is rolled out with its
data maps kept, a broken object leaves the running state alone, and down leaves nothing
pinned or attached."""

from __future__ import annotations

import os
import re
import uuid

import pytest
from support.forked import Child, kill_children
from support.paths import ROOT
from support.redirect_testlib import stream
from support.topology import (
    DATA,
    PLANNED,
    assert_down,
    assert_up,
    kernel_state,
    pinned_sockmaps,
    plan_lines,
    sock_ops_ids,
    topology,
)

from bpfdsl.cli import main
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.netlink import veth_pair
from bpfdsl.runtime import pins
from bpfdsl.runtime.cgroup import ChildCgroup


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
            if os.path.isdir(pin):  # down failed: the test still leaves nothing behind
                pins.remove_tree(pin)


CHAIN_SRC = """license "GPL"

xdp(priority: 10, chain_call: XDP_PASS | XDP_DROP) fn filter_before_counter(ctx) {
    return XDP_PASS
}

xdp fn plain(ctx) {
    return XDP_PASS
}
"""


@pytest.mark.kernel
def test_status_and_show_print_the_run_config(tmp_path):
    """`status FILE` prints the libxdp run config each XDP program of the file declares
    (from the object); `show` prints it for the attached program, read back from the
    BTF the kernel holds (the name longer than the kernel's 15 characters: found by its
    pin); a program that declares none gets no line."""
    tag = uuid.uuid4().hex[:6]
    ns, pin = f"topor{tag}", f"/sys/fs/bpf/bpfdsl_topor_{tag}"
    (tmp_path / "chain.bpfd").write_text(CHAIN_SRC)
    with veth_pair(f"topoa{tag}", f"topob{tag}", netns_a=ns, netns_b=ns, disable_ipv6=True):
        f = tmp_path / "chain.toml"
        f.write_text(
            f'pin_dir = "{pin}"\n\n[objects.chain]\nsource = "chain.bpfd"\n\n'
            f'[[xdp]]\nprogram = "chain:filter_before_counter"\ninterfaces = ["topoa{tag}"]\n'
            f'mode = "generic"\n\n[[xdp]]\nprogram = "chain:plain"\n'
            f'interfaces = ["topob{tag}"]\nmode = "generic"\n'
        )
        try:
            assert Child(ns, ["apply", str(f)]).wait() == 0
            s = Child(ns, ["status", str(f)])
            assert s.wait() == 0, s.stderr
            lines = s.stdout.splitlines()
            assert lines[0].startswith("in sync")
            assert lines[1:] == [
                "run config of chain:filter_before_counter: priority 10, "
                "chain_call XDP_DROP, XDP_PASS"
            ]
            show = Child(ns, ["show"])
            assert show.wait() == 0, show.stderr
            out = show.stdout.splitlines()
            at = next(i for i, ln in enumerate(out) if ln.startswith(f"  topoa{tag}: "))
            assert out[at + 1] == "    run config: priority 10, chain_call XDP_DROP, XDP_PASS"
            at = next(i for i, ln in enumerate(out) if ln.startswith(f"  topob{tag}: "))
            assert "run config" not in out[at + 1]
        finally:
            d = Child(ns, ["down", str(f)])
            assert d.wait() == 0, d.stderr
            kill_children()
