"""Operating attach/detach as a service manager and scripts do (#28), on a veth pair in
test namespaces: concurrent attaches of one or several objects (each command exits 0 and
exactly one program is attached, with the pins of that one only), a SIGTERM or SIGKILL at
each step of attach, replace and detach (the interface has the old or the new program;
after SIGKILL the next command repairs and says so), attach over a program another tool
attached (refused unless --force) and over another bpfdsl attachment.

Commands run in forked children of this process (support.forked: modules already
imported, ~20 ms a command instead of a fresh interpreter's ~0.4 s) that enter the XDP
namespace, so twenty rounds of four concurrent attaches stay cheap.  Every wait is bounded.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import uuid

import pytest
from support.forked import Child, kill_children
from support.netns import veth_net
from support.paths import PROGS

from bpfdsl.kernel import syscall
from bpfdsl.runtime import attach, intent, oplock, pins, repair

OBJECTS = ("xdp_pass", "xdp_drop", "xdp_udp_filter", "xdp_src_net")


@pytest.fixture(scope="module")
def objs(tmp_path_factory) -> dict[str, str]:
    from bpfdsl.compiler import compile_file

    d = tmp_path_factory.mktemp("ops_objs")
    out = {}
    for name in OBJECTS:
        path = d / f"{name}.o"
        path.write_bytes(compile_file(str(PROGS / f"{name}.bpfd")).obj)
        out[name] = str(path)
    import bpfdsl.cli.attach_cmds
    import bpfdsl.cli.load_cmds
    import bpfdsl.runtime.inventory  # noqa: F401  (imported before the forks)

    return out


@pytest.fixture(scope="module")
def net():
    with veth_net("op") as n:
        yield n


@pytest.fixture
def root(net):
    """A fresh bpffs dir holding this test's pin dirs; must be empty at the end."""
    d = f"/sys/fs/bpf/opstest_{uuid.uuid4().hex[:8]}"
    os.mkdir(d)
    try:
        yield d
    finally:
        kill_children()  # a failed test's children: stopped before the clean-up
        leftovers = sorted(os.listdir(d)) if os.path.isdir(d) else []
        with net.in_xdp_ns():
            if attach.xdp_attachment(net.xdp_dev) is not None:
                attach.detach_xdp(net.xdp_dev, pin_roots=(d,))
        for sub in leftovers:
            path = os.path.join(d, sub)
            if pins.read_manifest(path) is not None:
                pins.unpin_dir(path)
        shutil.rmtree(d, ignore_errors=True)
        assert not leftovers, f"left pinned: {leftovers}"


def run(net, *argv: str, env: dict[str, str] | None = None) -> Child:
    c = Child(net.xdp_ns, list(argv), env)
    c.wait()
    return c


def state(net, root: str) -> tuple[int, list[str]]:
    """(attached program id or 0, pin dirs under ``root``); asserts the invariants: no
    staging dir, no intent record of a dir under root, the attached program's pins in
    exactly one dir, with its link pinned there when it runs through one."""
    with net.in_xdp_ns():
        cur = attach.xdp_attachment(net.xdp_dev)
    dirs = sorted(os.listdir(root))
    assert not [d for d in dirs if "_next_" in d], dirs
    mine = [rec for _p, rec in intent.read_intents() if root in json.dumps(rec)]
    assert not mine, mine
    if cur is None:
        return 0, dirs
    holding = [d for d in dirs if cur.prog_id in repair.prog_ids_in(os.path.join(root, d))]
    assert len(holding) == 1, (cur, dirs, holding)
    if cur.method == "link":
        link = os.path.join(root, holding[0], f"link_xdp_{net.xdp_dev}")
        with syscall.obj_get(link) as fd:
            assert syscall.link_info(fd).id == cur.link_id
    return cur.prog_id, dirs


def detach_leaves_nothing(net, root: str) -> None:
    d = run(net, "detach", net.xdp_dev)
    assert d.code == 0, d.stderr
    assert state(net, root) == (0, [])


# ---- concurrent attaches --------------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("objects", ["same", "different"])
def test_concurrent_attaches_leave_one_consistent_attachment(net, root, objs, n, objects):
    """n attaches started together, 20 rounds: `same` = one object into one pin dir
    (replaces within the dir), `different` = n objects with a pin dir each (each replaces
    the other's attachment).  Each exits 0 with its program attached at its end; after
    the round exactly one of them is attached with only its pins left."""
    names = OBJECTS[:n] if objects == "different" else [OBJECTS[2]] * n
    for rnd in range(20):
        kids = [
            Child(net.xdp_ns, ["--json", "attach", objs[o], net.xdp_dev, "--pin-dir",
                        f"{root}/{o if objects == 'different' else 'same'}"])
            for o in names
        ]  # fmt: skip
        ids = []
        for k in kids:
            assert k.wait() == 0, (rnd, k.stderr)
            ids.append(json.loads(k.stdout)["prog_id"])
        prog_id, dirs = state(net, root)
        assert prog_id in ids and len(dirs) == 1, (rnd, prog_id, ids, dirs)
    detach_leaves_nothing(net, root)


@pytest.mark.kernel
def test_second_command_waits_naming_the_holder_or_fails_after_the_timeout(net, root, objs):
    pin = f"{root}/held"
    with oplock.OpLocks() as locks:
        locks.acquire([oplock.pin_dir_key(pin)])
        k = Child(net.xdp_ns, ["attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", pin])
        k.wait_for_err(f"waiting for pin dir {pin}: locked by pid {os.getpid()}")
        time.sleep(0.2)
        assert k.code is None and not os.path.exists(pin)  # it waits
    assert k.wait() == 0, k.stderr
    with oplock.OpLocks() as locks:
        locks.acquire([oplock.pin_dir_key(pin)])
        k = run(net, "detach", net.xdp_dev, env={"BPFDSL_LOCK_TIMEOUT": "0.3"})
        assert k.code == 1 and "error[locked]" in k.stderr, k.stderr
        assert f"pin dir {pin} is locked by pid {os.getpid()}" in k.stderr
    assert state(net, root)[0]  # still attached
    detach_leaves_nothing(net, root)


# ---- a signal at each step -------------------------------------------------------------

ATTACH_STEPS = ["begin", "pinned", "attached", "renamed"]
REPLACE_STEPS = ["begin", "pinned", "attached", "link-moved", "renamed"]
NO_RETURN = {"attached", "link-moved", "renamed"}  # after these the operation finishes


def _killed(net, argv, pause: str, sig: int) -> Child:
    k = Child(net.xdp_ns, argv, {"BPFDSL_TEST_PAUSE_AT": pause})
    k.wait_for_err(f"test pause at {pause}")
    os.kill(k.pid, sig)
    k.wait()
    return k


def _repair_here(net) -> list[str]:
    with net.in_xdp_ns(), oplock.OpLocks() as locks:
        return repair.repair_stale(locks)


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
@pytest.mark.parametrize(
    "op,step",
    [("attach", s) for s in ATTACH_STEPS] + [("replace", s) for s in REPLACE_STEPS],
)
def test_signal_at_each_step_of_attach_and_replace(net, root, objs, op, step, sig):
    pin = f"{root}/p"
    old = 0
    if op == "replace":
        a = run(net, "attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", pin)
        assert a.code == 0, a.stderr
        old = state(net, root)[0]
    argv = ["--json", "attach", objs["xdp_udp_filter"], net.xdp_dev, "--pin-dir", pin]
    k = _killed(net, argv, f"attach:{step}", sig)
    finished = step in NO_RETURN
    if sig == signal.SIGTERM:
        if finished:
            assert k.code == 0, k.stderr
            assert "SIGTERM received during the operation: the attach was finished" in k.stderr
        else:
            assert k.code == 143 and json.loads(k.stdout)["error"][0]["code"] == "interrupted", (
                k.stdout
            )
    else:
        assert k.code == -signal.SIGKILL
        lines = _repair_here(net)
        assert len(lines) == 1 and "repaired interrupted `attach`" in lines[0], lines
        assert ("finished" in lines[0]) == finished, lines
    now, dirs = state(net, root)
    if finished:
        assert now and now != old and dirs == ["p"]
        assert sorted(os.listdir(f"{pin}/progs")) == ["udp_filter"]
    else:
        assert now == old and dirs == (["p"] if old else [])
    if now:
        detach_leaves_nothing(net, root)


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
@pytest.mark.parametrize("step", ["begin", "detached"])
def test_signal_at_each_step_of_detach(net, root, objs, step, sig):
    pin = f"{root}/p"
    assert run(net, "attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", pin).code == 0
    old = state(net, root)[0]
    k = _killed(net, ["detach", net.xdp_dev], f"detach:{step}", sig)
    finished = step == "detached"
    if sig == signal.SIGTERM:
        assert k.code == (0 if finished else 143), k.stderr
    else:
        lines = _repair_here(net)
        assert len(lines) == 1 and ("finished" in lines[0]) == finished, lines
    if finished:
        assert state(net, root) == (0, [])
    else:
        assert state(net, root) == (old, ["p"])
        detach_leaves_nothing(net, root)


@pytest.mark.kernel
def test_next_command_repairs_a_killed_attach_and_says_so(net, root, objs):
    pin = f"{root}/p"
    assert run(net, "attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", pin).code == 0
    argv = ["attach", objs["xdp_drop"], net.xdp_dev, "--pin-dir", pin]
    k = _killed(net, argv, "attach:link-moved", signal.SIGKILL)
    assert any("_next_" in d for d in os.listdir(root))  # what the kill left
    show = run(net, "show")
    assert f"  attach {net.xdp_dev} by pid {k.pid}, stopped after step link-moved" in show.stdout
    d = run(net, "detach", net.xdp_dev)
    assert d.code == 0, d.stderr
    assert "bpfdsl: repaired interrupted `attach`" in d.stderr and "finished" in d.stderr
    assert "detached xdp_drop" in d.stdout
    assert state(net, root) == (0, [])


# ---- over other attachments ------------------------------------------------------------


@pytest.mark.kernel
@pytest.mark.parametrize("tool", ["ip", "xdp-loader"])
def test_attach_over_a_foreign_program_refused_unless_force(net, root, objs, tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed")
    if tool == "ip":
        argv = ["ip", "link", "set", "dev", net.xdp_dev, "xdpgeneric", "obj", objs["xdp_pass"],
                "sec", "xdp"]  # fmt: skip
    else:
        argv = ["xdp-loader", "load", "-m", "skb", net.xdp_dev, objs["xdp_pass"]]
    r = subprocess.run(net.nsenter(*argv), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        with net.in_xdp_ns():
            theirs = attach.xdp_attachment(net.xdp_dev)
        assert theirs is not None
        pin = f"{root}/p"
        a = run(net, "attach", objs["xdp_drop"], net.xdp_dev, "--mode", "generic", "--pin-dir", pin)
        assert a.code == 1 and "error[foreign-program]" in a.stderr, a.stderr
        assert f"{theirs.prog_name!r} (id {theirs.prog_id}" in a.stderr and "--force" in a.stderr
        with net.in_xdp_ns():  # theirs still runs, nothing was pinned
            assert attach.xdp_attachment(net.xdp_dev) == theirs and os.listdir(root) == []
        a = run(net, "attach", objs["xdp_drop"], net.xdp_dev, "--mode", "generic",
                "--pin-dir", pin, "--force")  # fmt: skip
        assert a.code == 0, a.stderr
        assert f"replaced {theirs.prog_name} (id {theirs.prog_id})" in a.stdout
        now, dirs = state(net, root)
        assert now != theirs.prog_id and dirs == ["p"]
        detach_leaves_nothing(net, root)
    finally:
        if tool == "xdp-loader":
            subprocess.run(net.nsenter("xdp-loader", "unload", "--all", net.xdp_dev),
                           capture_output=True, timeout=60)  # fmt: skip
        else:
            subprocess.run(net.nsenter("ip", "link", "set", "dev", net.xdp_dev, "xdpgeneric",
                                       "off"), capture_output=True, timeout=60)  # fmt: skip


@pytest.mark.kernel
@pytest.mark.parametrize("tool", ["ip", "xdp-loader"])
def test_detach_of_a_foreign_program_refused_unless_force(net, root, objs, tool):
    if shutil.which(tool) is None:
        pytest.skip(f"{tool} not installed")
    if tool == "ip":
        argv = ["ip", "link", "set", "dev", net.xdp_dev, "xdpgeneric", "obj", objs["xdp_pass"],
                "sec", "xdp"]  # fmt: skip
    else:
        argv = ["xdp-loader", "load", "-m", "skb", net.xdp_dev, objs["xdp_pass"]]
    r = subprocess.run(net.nsenter(*argv), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        with net.in_xdp_ns():
            theirs = attach.xdp_attachment(net.xdp_dev)
        assert theirs is not None
        d = run(net, "detach", net.xdp_dev)
        assert d.code == 1 and "error[foreign-program]" in d.stderr, d.stderr
        assert f"{theirs.prog_name!r} (id {theirs.prog_id}" in d.stderr and "--force" in d.stderr
        with net.in_xdp_ns():  # theirs still runs
            assert attach.xdp_attachment(net.xdp_dev) == theirs
        d = run(net, "detach", net.xdp_dev, "--force")
        assert d.code == 0, d.stderr
        assert f"detached {theirs.prog_name} (id {theirs.prog_id})" in d.stdout
        assert state(net, root) == (0, [])
    finally:
        if tool == "xdp-loader":
            subprocess.run(net.nsenter("xdp-loader", "unload", "--all", net.xdp_dev),
                           capture_output=True, timeout=60)  # fmt: skip
        else:
            subprocess.run(net.nsenter("ip", "link", "set", "dev", net.xdp_dev, "xdpgeneric",
                                       "off"), capture_output=True, timeout=60)  # fmt: skip


@pytest.mark.kernel
def test_attach_over_another_dir_says_its_maps_state_is_gone(net, root):
    """Over an attach-made dir A with maps, from another object name: A's maps go with
    it, and the note says so and how to keep them (`--pin-dir A`, which keeps them)."""
    src = str(PROGS / "xdp_udp_filter.bpfd")
    a_dir, b_dir = f"{root}/a", f"{root}/b"
    assert run(net, "attach", src, net.xdp_dev, "--pin-dir", a_dir).code == 0
    b = run(net, "attach", src, net.xdp_dev, "--pin-dir", b_dir)
    assert b.code == 0, b.stderr
    assert f"removed {a_dir} (the replaced program's pins): the state of its maps drops, " \
        f"passes is gone with it" in b.stdout, b.stdout  # fmt: skip
    assert f"attach the new object with `--pin-dir {a_dir}`" in b.stdout
    c = run(net, "attach", src, net.xdp_dev, "--pin-dir", b_dir)
    assert c.code == 0 and "kept the maps of the program it replaces: drops, passes" in c.stdout
    assert run(net, "detach", net.xdp_dev).code == 0


@pytest.mark.kernel
def test_attach_over_another_bpfdsl_attachment(net, root, objs):
    """Over an attach-made dir A: A's pins are removed.  Over a `bpfdsl load` dir L: L
    stays pinned and `show` lists it as not attached."""
    a_dir, b_dir, l_dir = f"{root}/a", f"{root}/b", f"{root}/l"
    assert run(net, "attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", a_dir).code == 0
    b = run(net, "attach", objs["xdp_drop"], net.xdp_dev, "--pin-dir", b_dir)
    assert b.code == 0, b.stderr
    assert f"removed {a_dir} (the replaced program's pins)" in b.stdout
    assert state(net, root)[1] == ["b"]
    assert run(net, "load", objs["xdp_pass"], "--pin-dir", l_dir).code == 0
    c = run(net, "attach", l_dir, net.xdp_dev)
    assert c.code == 0, c.stderr
    assert f"removed {b_dir}" in c.stdout and state(net, root)[1] == ["l"]
    d = run(net, "attach", objs["xdp_drop"], net.xdp_dev, "--pin-dir", b_dir)
    assert d.code == 0, d.stderr
    assert f"{l_dir} stays pinned, not attached here any more" in d.stdout
    assert state(net, root)[1] == ["b", "l"]
    show = json.loads(run(net, "--json", "show").stdout)
    lprog = [o for p in show["pins"] if p["dir"] == f"{l_dir}/progs" for o in p["objects"]]
    assert lprog and lprog[0]["attached_on"] == []
    text = run(net, "show").stdout
    assert f"{l_dir}/progs  (not attached)" in text, text
    detach_leaves_nothing_but(net, root, ["l"])
    assert run(net, "unload", l_dir).code == 0
    assert os.listdir(root) == []


def detach_leaves_nothing_but(net, root: str, kept: list[str]) -> None:
    d = run(net, "detach", net.xdp_dev)
    assert d.code == 0, d.stderr
    assert state(net, root) == (0, kept)


@pytest.mark.kernel
def test_no_empty_default_root_after_the_last_detach(net, objs):
    if os.path.isdir(attach.DEFAULT_PIN_ROOT) and os.listdir(attach.DEFAULT_PIN_ROOT):
        pytest.skip("other pins under /sys/fs/bpf/bpfdsl")
    a = run(net, "attach", objs["xdp_pass"], net.xdp_dev)
    assert a.code == 0, a.stderr
    assert os.path.isdir(f"{attach.DEFAULT_PIN_ROOT}/xdp_pass")
    assert run(net, "detach", net.xdp_dev).code == 0
    assert not os.path.exists(attach.DEFAULT_PIN_ROOT)
    assert run(net, "load", objs["xdp_pass"]).code == 0
    assert run(net, "unload", f"{attach.DEFAULT_PIN_ROOT}/xdp_pass").code == 0
    assert not os.path.exists(attach.DEFAULT_PIN_ROOT)


@pytest.mark.kernel
@pytest.mark.parametrize("op", ["load", "unload"])
def test_killed_load_and_unload_are_repaired(net, root, objs, op):
    pin = f"{root}/l"
    if op == "unload":
        assert run(net, "load", objs["xdp_pass"], "--pin-dir", pin).code == 0
        assert run(net, "attach", pin, net.xdp_dev).code == 0
    argv = ["load", objs["xdp_pass"], "--pin-dir", pin] if op == "load" else ["unload", pin]
    _killed(net, argv, f"{op}:begin", signal.SIGKILL)
    lines = _repair_here(net)
    assert len(lines) == 1 and f"repaired interrupted `{op}`" in lines[0], lines
    if op == "load":
        assert "nothing was pinned" in lines[0] and os.listdir(root) == []
    else:  # an unload finishes: it had begun detaching and removing
        assert "finished removing" in lines[0] and state(net, root) == (0, [])


@pytest.mark.kernel
@pytest.mark.parametrize(
    "step,sig",
    [("pinned", signal.SIGTERM), ("link-moved", signal.SIGKILL), ("renamed", signal.SIGKILL)],
)
def test_signal_during_attach_over_another_bpfdsl_attachment(net, root, objs, step, sig):
    """B attached over A (another attach-made pin dir), stopped at a step: rolled back,
    A is attached and pinned alone; rolled forward (repair), B alone."""
    assert run(net, "attach", objs["xdp_pass"], net.xdp_dev, "--pin-dir", f"{root}/a").code == 0
    old = state(net, root)[0]
    argv = ["attach", objs["xdp_drop"], net.xdp_dev, "--pin-dir", f"{root}/b"]
    k = _killed(net, argv, f"attach:{step}", sig)
    if sig == signal.SIGKILL:
        lines = _repair_here(net)
        assert len(lines) == 1 and "finished" in lines[0], lines
        assert (f"removed {root}/a" in lines[0]) == (step == "link-moved"), lines  # or done
        now, dirs = state(net, root)
        assert now != old and dirs == ["b"]
    else:
        assert k.code == 143, k.stderr
        assert state(net, root) == (old, ["a"])
    detach_leaves_nothing(net, root)


@pytest.mark.kernel
def test_devmap_set_waits_for_the_pin_dirs_lock(net, root, objs):
    """A devmap entry written while an attach holds the pin dir goes in after it, into
    the map the dir holds then (not into one being replaced)."""
    from bpfdsl.compiler import compile_file

    obj = os.path.join(os.path.dirname(objs["xdp_pass"]), "xdp_devmap_forward.o")
    with open(obj, "wb") as f:
        f.write(compile_file(str(PROGS / "xdp_devmap_forward.bpfd")).obj)
    pin = f"{root}/fw"
    assert run(net, "load", obj, "--pin-dir", pin).code == 0
    with oplock.OpLocks() as locks:
        locks.acquire([oplock.pin_dir_key(pin)])
        k = Child(net.xdp_ns, ["devmap", "set", f"{pin}:tx_ports", "3", net.xdp_dev])
        k.wait_for_err(f"waiting for pin dir {pin}: locked by pid {os.getpid()}")
    assert k.wait() == 0, k.stderr
    assert run(net, "unload", pin).code == 0


@pytest.mark.kernel
@pytest.mark.parametrize("cmd", ["attach", "detach", "load", "map-update"])
def test_sigterm_while_waiting_for_the_first_lock_exits_143_changing_nothing(net, root, objs, cmd):
    pin = f"{root}/held"
    if cmd in ("detach", "map-update"):
        obj = objs["xdp_udp_filter"]
        assert run(net, "attach", obj, net.xdp_dev, "--pin-dir", pin).code == 0
    before = state(net, root)
    argv = {
        "attach": ["attach", objs["xdp_drop"], net.xdp_dev, "--pin-dir", pin],
        "detach": ["detach", net.xdp_dev],
        "load": ["load", objs["xdp_pass"], "--pin-dir", pin],
        "map-update": ["map", "update", f"{pin}:drops", "0", "7"],
    }[cmd]
    with net.in_xdp_ns(), oplock.OpLocks() as locks:
        locks.acquire(
            [oplock.pin_dir_key(pin)]
            + ([oplock.interface_key(net.xdp_dev)] if cmd == "detach" else [])
        )
        k = Child(net.xdp_ns, argv)
        k.wait_for_err("waiting for ")
        os.kill(k.pid, signal.SIGTERM)
        assert k.wait() == 143, k.stderr
    assert "error[interrupted]: SIGTERM received: stopped while waiting for a lock" in k.stderr
    assert "nothing changed" in k.stderr
    assert state(net, root) == before
    if cmd in ("detach", "map-update"):
        detach_leaves_nothing(net, root)


@pytest.mark.kernel
@pytest.mark.parametrize("how", ["update", "delete", "from"])
def test_map_writes_wait_for_the_pin_dirs_lock(net, root, objs, how, tmp_path):
    """`map update|delete|update --from` into a map of a bpfdsl pin dir wait while an
    attach (or anything holding the dir's lock) may be replacing that dir's maps."""
    pin = f"{root}/m"
    assert run(net, "attach", objs["xdp_udp_filter"], net.xdp_dev, "--pin-dir", pin).code == 0
    entries = tmp_path / "e.jsonl"
    entries.write_text('{"key": 0, "value": 5}\n')
    argv = {
        "update": ["map", "update", f"{pin}:drops", "0", "5"],
        "delete": ["map", "delete", f"{pin}:drops", "0"],  # an array: refused after the wait
        "from": ["map", "update", f"{pin}:drops", "--from", str(entries)],
    }[how]
    with oplock.OpLocks() as locks:
        locks.acquire([oplock.pin_dir_key(pin)])
        k = Child(net.xdp_ns, argv)
        k.wait_for_err(f"waiting for pin dir {pin}: locked by pid {os.getpid()}")
        time.sleep(0.2)
        assert k.code is None  # it waits
    k.wait()
    assert (k.code == 0) == (how != "delete"), k.stderr
    detach_leaves_nothing(net, root)


BY_NAME_SRC = """license "GPL"
map keep_me: hash<u32, u64>(max_entries: 8, pinning: LIBBPF_PIN_BY_NAME)
{more}
xdp fn by_name(ctx) {{
    keep_me[0] += 1
    {use}
    return XDP_PASS
}}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["TERM", "KILL"])
@pytest.mark.parametrize("step", ["pinned", "begin"])
def test_killed_attach_leaves_no_map_pinned_by_name_it_created(net, root, tmp_path, step, sig):
    """A SIGKILLed attach's repair removes the maps it pinned by name (LIBBPF_PIN_BY_NAME)
    and keeps the one that was pinned before it (reused)."""
    one, two = tmp_path / "one.bpfd", tmp_path / "two.bpfd"
    one.write_text(BY_NAME_SRC.format(more="", use=""))
    two.write_text(BY_NAME_SRC.format(
        more="map new_one: hash<u32, u64>(max_entries: 8, pinning: LIBBPF_PIN_BY_NAME)",
        use="new_one[1] += 1"))  # fmt: skip
    pin_root = f"/sys/fs/bpf/opstest_byname_{uuid.uuid4().hex[:8]}"
    os.mkdir(pin_root)
    try:
        first = f"{root}/first"
        assert run(net, "load", str(one), "--pin-dir", first, "--pin-root", pin_root).code == 0
        assert run(net, "unload", first).code == 0
        assert os.listdir(pin_root) == ["keep_me"]  # pinned before the attach
        with syscall.obj_get(f"{pin_root}/keep_me") as fd:
            kept_id = syscall.map_info(fd).id
        argv = ["attach", str(two), net.xdp_dev, "--pin-dir", f"{root}/p", "--pin-root", pin_root]
        k = _killed(net, argv, f"attach:{step}", sig)
        if sig == signal.SIGTERM:
            assert k.code == 143, k.stderr  # rolled back by the command itself
            assert _repair_here(net) == []
        else:
            assert k.code == -signal.SIGKILL
            if step == "pinned":
                assert sorted(os.listdir(pin_root)) == ["keep_me", "new_one"]  # the kill left
            lines = _repair_here(net)
            assert len(lines) == 1, lines
            assert "rolled back" in lines[0] or "nothing to repair" in lines[0], lines
            if step == "pinned":
                assert f"removed its maps pinned by name: {pin_root}/new_one" in lines[0], lines
        assert os.listdir(pin_root) == ["keep_me"]
        with syscall.obj_get(f"{pin_root}/keep_me") as fd:
            assert syscall.map_info(fd).id == kept_id  # the same map: never removed
        assert state(net, root) == (0, [])
    finally:
        shutil.rmtree(pin_root, ignore_errors=True)


def test_orphan_staging_reads_every_record_shape(tmp_path, monkeypatch) -> None:
    """A topology apply's record names its staging dirs as a table (object -> dir), an
    attach's as one path; a record of another shape names none: no reader crashes on it
    (a dict `staging` once raised TypeError in every attach while an apply was running)."""
    assert repair.staging_dirs({"staging": "/sys/fs/bpf/x_next_0badc0de"}) == [
        "/sys/fs/bpf/x_next_0badc0de"
    ]
    assert repair.staging_dirs({"staging": {"edge": "/sys/fs/bpf/t/.staging/edge"}}) == [
        "/sys/fs/bpf/t/.staging/edge"
    ]
    assert repair.staging_dirs({"staging": [1, 2]}) == []
    assert repair.staging_dirs({}) == []
    records = [("a", {"staging": {"edge": "/x"}}), ("b", {"staging": 7}), ("c", {})]
    monkeypatch.setattr(repair, "read_intents", lambda: records)
    assert repair.orphan_staging(str(tmp_path / "none")) == []
