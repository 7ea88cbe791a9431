"""``bpfdsl apply FILE`` and ``down FILE`` of the edge topology (tests/data/topology:
two interfaces, a prog_array of 3 stages, a cpumap and a devmap entry program, a
sockhash with its sk_msg program, a sock_ops program on a cgroup, inline map contents)
stopped by SIGTERM or SIGKILL at each step, and run twice at once, on a veth pair in a
network namespace and a cgroup of the test's own.

``BPFDSL_TEST_PAUSE_AT=topology-apply:STEP`` stops the command after STEP (the intent
record written: ``begin``; ``change-N`` after the N-th change; ``no-return`` with every
change made and checked; then the commit's ``detached``, ``links-moved``, ``renamed``,
``recorded``) until the test signals it.  After it: the system runs the old state or the
new one, never a part (SIGTERM: the command rolls back or finishes itself; SIGKILL: the
repair every changing command runs first does), ``apply --plan`` in between changes
nothing and names the pending repair, a retried apply gives what a clean apply gives
(the same pins, programs in each slot and map contents; ``status`` in sync) and ``down``
leaves nothing pinned or attached.

Commands run in forked children (support.forked) in the namespace; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.forked import Child, kill_children
from support.topology import (
    ALLOWED,
    PLANNED,
    assert_down,
    assert_up,
    kernel_state,
    pin_tree,
    pinned_sockmaps,
    sock_ops_ids,
    topology,
    xdp_prog_id,
)

from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime import intent, oplock, repair
from bpfdsl.runtime.cgroup import ChildCgroup

EDITED = 10  # the edited object's changes: the object, its 3 slots, cpumap, devmap,
#             sk_msg, sock_ops, 2 XDP replaces (its data map `allowed` is kept, as filled)
FINISHED = ["no-return", "detached", "links-moved", "renamed", "recorded"]


def apply_steps(n: int) -> list[str]:
    return ["begin", *(f"change-{i}" for i in range(1, n + 1)), *FINISHED]


@dataclass
class Edge:
    """The test's namespace ``ns`` with the veth ends ``a`` and ``b``, cgroup ``cg``,
    pin dir ``pin`` and a tmp dir for the topology files."""

    ns: str
    a: str
    b: str
    cg: str
    pin: str
    tmp: Path

    def file(self, drop_port: int = 9) -> Path:
        return topology(
            self.tmp, self.pin, self.a, self.b, self.cg, drop_port, f"edge_{drop_port}.toml"
        )

    def run(self, *argv: str, env: dict[str, str] | None = None) -> Child:
        c = Child(self.ns, list(argv), env)
        c.wait()
        return c

    def state(self) -> dict:
        with netlink.in_netns(self.ns):
            return kernel_state(self.pin, self.a, self.b, self.cg)

    def nothing_runs(self) -> bool:
        with netlink.in_netns(self.ns):
            none = xdp_prog_id(self.a) is None and xdp_prog_id(self.b) is None
        return none and sock_ops_ids(self.cg) == [] and not os.path.exists(self.pin)

    def tree(self) -> list[str]:
        """The pins under the pin dir, the interface names replaced: comparable across tests."""
        return pin_tree(self.pin, {self.a: "A", self.b: "B"})

    def intents(self) -> list[dict]:
        return [rec for _p, rec in intent.read_intents() if rec.get("pin_dir") == self.pin]

    def repair(self) -> list[str]:
        """What every changing command does first: repair the interrupted ones."""
        with netlink.in_netns(self.ns), oplock.OpLocks() as locks:
            return repair.repair_stale(locks)

    def snapshot(self) -> tuple:
        """Everything a command could change: each pin (kind, id; a map's entries, raw),
        the XDP programs, the sock_ops programs, the intent records."""
        pins = []
        for rel in pin_tree(self.pin):
            path = os.path.join(self.pin, rel)
            if os.path.isdir(path) or os.path.islink(path):
                pins.append((rel, os.readlink(path) if os.path.islink(path) else "dir"))
                continue
            with S.obj_get(path) as fd:
                kind = S.fd_kind(int(fd))
                if kind != "map":
                    pins.append((rel, kind))
                    continue
                info = S.map_info(fd)
                pins.append((rel, info.id, _entries(fd, info)))
        with netlink.in_netns(self.ns):
            xdp = (xdp_prog_id(self.a), xdp_prog_id(self.b))
        return pins, xdp, sock_ops_ids(self.cg), self.intents()


def _entries(fd: S.Fd, info: S.MapInfo) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    key = None
    for _ in range(4096):
        try:
            key = S.map_get_next_key(fd, key, info.key_size)
            if key is None:
                break
            raw = S.map_lookup(fd, key, info.value_size)
        except S.BpfError:
            break  # a sockhash: its values are sockets
        out.append((key.hex(), raw.hex() if raw is not None else ""))
    return out


def _veths(tag: str, ns: str):
    """The pair ``topoaTAG`` - ``topobTAG`` in a new namespace ``ns``, IPv6 off: no frame
    crosses unless a test sends one (the counters in ``seen`` stay as they are)."""
    return netlink.veth_pair(
        f"topoa{tag}", f"topob{tag}", netns_a=ns, netns_b=ns, disable_ipv6=True
    )


@pytest.fixture
def edge(tmp_path):
    tag = uuid.uuid4().hex[:6]
    ns = f"topo{tag}"
    pin = f"/sys/fs/bpf/bpfdsl_topo_{tag}"
    with (
        _veths(tag, ns) as pair,
        ChildCgroup(prefix="bpfdsl-topo") as cg,
    ):
        e = Edge(ns, pair.a.name, pair.b.name, cg.path, pin, tmp_path)
        try:
            yield e
        finally:
            kill_children()  # a failed test's commands: stopped before the clean-up
            if os.path.isdir(pin) or e.intents():
                e.run("down", str(e.file()))  # repairs what is left, then removes it
            for path, rec in intent.read_intents():
                if rec.get("pin_dir") == pin:  # not repaired: the test failed
                    os.unlink(path)
            shutil.rmtree(pin, ignore_errors=True)


@pytest.fixture(scope="module")
def clean(tmp_path_factory) -> list[str]:
    """The pins of a clean apply of the edge topology (interface names replaced)."""
    tmp = tmp_path_factory.mktemp("clean")
    tag = uuid.uuid4().hex[:6]
    ns, pin = f"topoc{tag}", f"/sys/fs/bpf/bpfdsl_topoc_{tag}"
    with (
        _veths(tag, ns) as pair,
        ChildCgroup(prefix="bpfdsl-topo") as cg,
    ):
        e = Edge(ns, pair.a.name, pair.b.name, cg.path, pin, tmp)
        try:
            assert e.run("apply", str(e.file())).code == 0
            tree = e.tree()
            assert e.run("down", str(e.file())).code == 0
        finally:
            kill_children()
            shutil.rmtree(pin, ignore_errors=True)
    assert "edge/link_xdp_A" in tree and "edge/maps/allowed" in tree, tree
    return tree


def stop_at(edge: Edge, argv: list[str], pause: str, sig: int) -> Child:
    """Run ``argv``, stopped at ``pause`` (OP:STEP), and end it there with ``sig``."""
    k = Child(edge.ns, argv, {"BPFDSL_TEST_PAUSE_AT": pause})
    k.wait_for_err(f"test pause at {pause}")
    os.kill(k.pid, sig)
    k.wait()
    return k


def assert_as_applied(edge: Edge, f: Path, clean: list[str], allowed: dict[int, int]) -> None:
    """What a clean apply of ``f`` gives: every slot runs its program, the same pins,
    the map contents, nothing pending; ``status`` says in sync."""
    st = edge.state()
    with netlink.in_netns(edge.ns):
        assert_up(st, edge.b)
    assert st["allowed"] == allowed
    assert edge.tree() == clean
    assert edge.intents() == []
    s = edge.run("status", str(f))
    assert s.code == 0 and s.stdout.startswith("in sync"), s.stdout + s.stderr


def down_leaves_nothing(edge: Edge, f: Path) -> None:
    held = pinned_sockmaps(edge.pin)
    try:
        d = edge.run("down", str(f))
        assert d.code == 0, d.stderr
        with netlink.in_netns(edge.ns):
            assert_down(edge.pin, edge.a, edge.b, edge.cg, held)
        assert edge.intents() == []
    finally:
        for fd in held:
            fd.close()


# ---- a signal at each step of apply ----------------------------------------------------


CASES = [("fresh", s) for s in apply_steps(PLANNED)] + [("edit", s) for s in apply_steps(EDITED)]


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
@pytest.mark.parametrize("scenario,step", CASES)
def test_signal_at_each_step_of_apply(edge, clean, scenario, step, sig):
    """``fresh``: the first apply; ``edit``: the rollout of an edited object over a
    running one (with a map value set at run time, which both states keep)."""
    old_file, before, allowed = edge.file(9), None, dict(ALLOWED)
    if scenario == "edit":
        assert edge.run("apply", str(old_file)).code == 0
        assert edge.run("map", "update", f"{edge.pin}/edge/maps/allowed", "7", "77").code == 0
        allowed[7] = 77
        before = (edge.state(), edge.tree())
    new_file = edge.file(10) if scenario == "edit" else old_file
    p = edge.run("--json", "apply", "--plan", str(new_file))
    n = len(json.loads(p.stdout)["changes"])
    assert n == (PLANNED if scenario == "fresh" else EDITED), p.stdout

    k = stop_at(edge, ["apply", str(new_file)], f"topology-apply:{step}", sig)
    finished = step in FINISHED
    if sig == signal.SIGTERM:
        if finished:
            assert k.code == 0, k.stderr
            assert "SIGTERM received during the operation: the apply was finished first" in (
                k.stderr
            )
        else:
            assert k.code == 143 and "error[interrupted]" in k.stderr, k.stderr
            assert "nothing was changed: the running state is the one before" in k.stderr
    else:
        assert k.code == -signal.SIGKILL
        assert [r["op"] for r in edge.intents()] == ["topology-apply"]
        snap = edge.snapshot()
        p = edge.run("apply", "--plan", str(new_file))
        assert p.code == 0, p.stderr
        assert f"repair pending: interrupted `topology-apply` of pid {k.pid}" in p.stdout
        assert f"stopped after step {step}" in p.stdout, p.stdout
        assert edge.snapshot() == snap  # the plan changed nothing and repaired nothing
        lines = edge.repair()
        assert len(lines) == 1 and "repaired interrupted `topology-apply`" in lines[0], lines
        assert ("finished" in lines[0]) == finished, lines
        assert ("rolled back" in lines[0]) != finished, lines

    # the old state or the new one
    assert edge.intents() == [] and not [t for t in edge.tree() if "_next_" in t]
    if finished:
        assert_as_applied(edge, new_file, clean, allowed)
    elif before is None:
        assert edge.nothing_runs()  # nothing was there: nothing is
    else:
        assert (edge.state(), edge.tree()) == before  # the very programs that ran before
        assert edge.run("status", str(old_file)).code == 0

    r = edge.run("apply", str(new_file))  # the retry
    assert r.code == 0, r.stderr
    assert r.stdout.startswith("no change") == finished, r.stdout
    assert_as_applied(edge, new_file, clean, allowed)
    down_leaves_nothing(edge, new_file)


@pytest.mark.kernel
@pytest.mark.parametrize("step", ["begin", "change-1", "change-6", f"change-{PLANNED}", "renamed"])
def test_next_apply_repairs_a_killed_apply_and_says_so(edge, clean, step):
    f = edge.file()
    k = stop_at(edge, ["apply", str(f)], f"topology-apply:{step}", signal.SIGKILL)
    s = edge.run("status", str(f))
    assert s.code == 1 and f"pending: repair interrupted `topology-apply` of pid {k.pid}" in (
        s.stdout
    )
    r = edge.run("apply", str(f))
    assert r.code == 0, r.stderr
    assert f"bpfdsl: repaired interrupted `topology-apply` of pid {k.pid}" in r.stderr
    assert ("finished" in r.stderr) == (step in FINISHED), r.stderr
    assert_as_applied(edge, f, clean, dict(ALLOWED))
    down_leaves_nothing(edge, f)


@pytest.mark.kernel
@pytest.mark.parametrize("scenario", ["fresh", "edit"])
@pytest.mark.parametrize("step", ["change-2", "change-8", "no-return", "links-moved"])
def test_down_after_a_killed_apply_leaves_nothing(edge, scenario, step):
    """``down`` repairs the killed apply first (back or forward), then removes what the
    file made: no pin, no XDP program, no sock_ops or sk_msg program left."""
    f = edge.file(9)
    if scenario == "edit":
        assert edge.run("apply", str(f)).code == 0
        f = edge.file(10)
    held = pinned_sockmaps(edge.pin)
    k = stop_at(edge, ["apply", str(f)], f"topology-apply:{step}", signal.SIGKILL)
    held += pinned_sockmaps(edge.pin)  # the staged object's sockhash too
    try:
        d = edge.run("down", str(f))
        assert d.code == 0, d.stderr
        assert f"bpfdsl: repaired interrupted `topology-apply` of pid {k.pid}" in d.stderr
        with netlink.in_netns(edge.ns):
            assert_down(edge.pin, edge.a, edge.b, edge.cg, held)
        assert edge.intents() == []
    finally:
        for fd in held:
            fd.close()


# ---- a signal at each step of down -----------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
@pytest.mark.parametrize("step", ["begin", "hooks-detached", "unpinned"])
def test_signal_at_each_step_of_down(edge, clean, step, sig):
    f = edge.file()
    assert edge.run("apply", str(f)).code == 0
    before = (edge.state(), edge.tree())
    held = pinned_sockmaps(edge.pin)
    try:
        k = stop_at(edge, ["down", str(f)], f"topology-down:{step}", sig)
        if sig == signal.SIGTERM and step == "begin":
            assert k.code == 143 and "error[interrupted]" in k.stderr, k.stderr
            assert (edge.state(), edge.tree()) == before and edge.intents() == []
            down_leaves_nothing(edge, f)
            return
        if sig == signal.SIGTERM:
            assert k.code == 0 and "the down was finished first" in k.stderr, k.stderr
        else:
            assert k.code == -signal.SIGKILL
            d = edge.run("down", str(f))  # finishes it
            assert d.code == 0, d.stderr
            assert f"repaired interrupted `topology-down` of pid {k.pid}" in d.stderr
        with netlink.in_netns(edge.ns):
            assert_down(edge.pin, edge.a, edge.b, edge.cg, held)
        assert edge.intents() == []
    finally:
        for fd in held:
            fd.close()


# ---- two at once -----------------------------------------------------------------------


@pytest.mark.kernel
def test_two_applies_at_once_take_turns(edge, clean):
    """Started together, 5 rounds each: the same file (one applies, the other then finds
    nothing to change) and two versions of it (each applies in turn: the system is as
    one of them declares, whole)."""
    one, two = edge.file(9), edge.file(10)
    for rnd in range(5):
        kids = [Child(edge.ns, ["apply", str(one)]) for _ in range(2)]
        outs = []
        for k in kids:
            assert k.wait() == 0, (rnd, k.stderr)
            outs.append(k.stdout.split(":")[0])
        assert sorted(outs) == (["applied", "no change"] if rnd == 0 else ["no change"] * 2)
        assert_as_applied(edge, one, clean, dict(ALLOWED))
    for rnd in range(5):
        kids = [Child(edge.ns, ["apply", str(f)]) for f in (one, two)]
        for k in kids:
            assert k.wait() == 0, (rnd, k.stderr)
        in_sync = [edge.run("status", str(f)).code == 0 for f in (one, two)]
        assert sorted(in_sync) == [False, True], (rnd, in_sync)
        st = edge.state()
        with netlink.in_netns(edge.ns):
            assert_up(st, edge.b)
        assert edge.tree() == clean and edge.intents() == []
    down_leaves_nothing(edge, one)


@pytest.mark.kernel
def test_second_apply_waits_for_the_first_names_it_or_is_refused(edge, clean):
    """A second apply while the first holds the locks (stopped at a change): it waits,
    naming the first; with BPFDSL_LOCK_TIMEOUT=0.3 it is refused (`locked`, exit 1);
    ``--plan`` does not wait and says an apply is at work.  When the first is killed
    the waiting one repairs what it left and applies."""
    f = edge.file()
    first = Child(edge.ns, ["apply", str(f)], {"BPFDSL_TEST_PAUSE_AT": "topology-apply:change-4"})
    first.wait_for_err("test pause at topology-apply:change-4")
    second = Child(edge.ns, ["apply", str(f)])
    second.wait_for_err(f"locked by pid {first.pid}")  # the first lock it waits for
    assert f"bpfdsl: waiting for pin dir {edge.pin}" in second.stderr, second.stderr
    time.sleep(0.2)
    assert second.code is None  # it waits
    refused = edge.run("apply", str(f), env={"BPFDSL_LOCK_TIMEOUT": "0.3"})
    assert refused.code == 1 and "error[locked]" in refused.stderr, refused.stderr
    assert f"pin dir {edge.pin}" in refused.stderr
    assert f"is locked by pid {first.pid}" in refused.stderr
    start = time.monotonic()
    p = edge.run("apply", "--plan", str(f))
    assert p.code == 0 and time.monotonic() - start < 10, p.stderr
    assert f"running: `topology-apply` of pid {first.pid}" in p.stdout, p.stdout
    assert "an apply now waits for it" in p.stdout
    os.kill(first.pid, signal.SIGKILL)
    assert first.wait() == -signal.SIGKILL
    assert second.wait() == 0, second.stderr
    assert f"repaired interrupted `topology-apply` of pid {first.pid}" in second.stderr
    assert "rolled back the 4 changes" in second.stderr, second.stderr
    assert second.stdout.startswith(f"applied: {PLANNED} changes"), second.stdout
    assert_as_applied(edge, f, clean, dict(ALLOWED))
    down_leaves_nothing(edge, f)


@pytest.mark.kernel
def test_a_record_the_repair_cannot_read_is_kept_and_said(tmp_path):
    """A record missing what its repair needs is not dropped in silence (the next
    command says it could not repair it and keeps it); one of an unknown op is dropped."""
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)  # a pid that is gone: its records are stale
    tag = uuid.uuid4().hex[:8]
    os.makedirs(intent.INTENT_DIR, exist_ok=True)
    broken = os.path.join(intent.INTENT_DIR, f"topology-apply-topo{tag}.json")
    unknown = os.path.join(intent.INTENT_DIR, f"topo-unknown-{tag}.json")
    base = {"pid": pid, "started": 0, "netns": oplock.netns_inode(), "locks": []}
    Path(broken).write_text(json.dumps({**base, "op": "topology-apply", "step": "change-1"}))
    Path(unknown).write_text(json.dumps({**base, "op": f"topo-unknown-{tag}", "step": "begin"}))
    try:
        with oplock.OpLocks() as locks:
            lines = [ln for ln in repair.repair_stale(locks) if f"of pid {pid}" in ln]
        assert any(f"could not repair interrupted `topology-apply` of pid {pid} (record " in ln
                   for ln in lines), lines  # fmt: skip
        assert any("unknown operation: record dropped" in ln for ln in lines), lines
        assert os.path.exists(broken) and not os.path.exists(unknown)
    finally:
        for p in (broken, unknown):
            if os.path.exists(p):
                os.unlink(p)
