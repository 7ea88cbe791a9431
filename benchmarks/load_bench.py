#!/usr/bin/env python3
"""Load benchmark (issue 3): load + pin + attach of the same object, bpfdsl vs bpftool.

bpfdsl is timed as a user runs it: the ``bpfdsl`` script of a venv holding a non-editable,
byte-compiled install of the working tree (``pip install`` of the tree: a wheel;
``benchlib.installed_venv``, shared with the other benchmarks and held with
``benchlib.venv_lock`` for the whole run), started from the temp dir so the tree cannot
shadow it.
One timed iteration of each form, on a veth pair in a namespace ``bpfb-XXXXXX`` this script
creates (:func:`bpfdsl.kernel.netlink.veth_pair`; the script joins it with setns(2),
:func:`bpfdsl.kernel.netlink.in_netns`, so every command starts there without an
``nsenter`` in front; ``ip netns exec`` would hide /sys/fs/bpf), into a fresh pin dir DIR:

  bpftool       ``bpftool prog loadall OBJ DIR`` + ``bpftool net attach xdp pinned DIR/PROG dev DEV``
  bpfdsl 2-proc ``bpfdsl load OBJ --pin-dir DIR`` + ``bpfdsl attach xdp DIR --dev DEV --prog PROG``
  bpfdsl 1-proc ``bpfdsl attach xdp OBJ --dev DEV --pin-dir DIR --prog PROG``

The forms run interleaved (A B C A B C ...), --runs rounds, for the bpfdsl-compiled object
(progs/NAME.bpfd, compiled by the venv's bpfdsl) and the clang-19 one (tests/data/c/NAME.c).
After every timed iteration (untimed): the program pinned in DIR must be the one XDP runs
on DEV (ids compared), then DEV is detached and DIR removed, and DEV must be empty again.
Figures: whole-process medians, ratio bpfdsl / bpftool (goal <= 1.5 for the one-process
form), plus in the same run the floor: ``python -c pass`` of the venv and ``bpftool
version``, and the in-process time of the bpfdsl work (CLI ``main`` after imports).
Exit status 0 whether or not the goal is met; 1 when the benchmark cannot run.  The
namespace and pins are removed on exit, also on failure or Ctrl-C.

Usage: python3 benchmarks/load_bench.py [--program xdp_udp_filter] [--runs N] [--quick] [--json F]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

import benchlib as B

from bpfdsl.kernel import netlink  # (benchlib put the repository first on sys.path)

GOAL_RATIO = 1.5
FORMS = ("bpftool", "bpfdsl 2-proc", "bpfdsl 1-proc")
PIN_PREFIX = "bpfdsl_lbench_"
NS_PREFIX = "bpfb-"  # the namespace of a run: bpfb-XXXXXX, removed on exit

# In-process figure: the one-process form's work after imports, N times in one interpreter.
_INPROC = """
import contextlib, io, os, shutil, statistics, sys, time
from bpfdsl.cli import main
from bpfdsl.kernel.netlink import ifindex, xdp_state
obj, dev, prog, base, n = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
ts = []
for i in range(n + 1):
    pin = f"{base}_{i}"
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = main(["attach", "xdp", obj, "--dev", dev, "--pin-dir", pin, "--prog", prog])
    t1 = time.perf_counter()
    shutil.rmtree(pin, ignore_errors=True)  # the link goes with its pin: DEV is empty again
    # ... but asynchronously (bpffs frees the inode after an RCU grace period, and the link
    # with it): wait, bounded, until DEV is empty, or the next attach finds the old program.
    deadline = time.monotonic() + 5
    while xdp_state(ifindex(dev)).mode is not None and time.monotonic() < deadline:
        time.sleep(0.002)
    if rc != 0:
        sys.exit(f"bpfdsl attach failed ({rc})")
    if i:  # the first round imports the rest of the load path
        ts.append(t1 - t0)
print(statistics.median(ts) * 1000)
"""


def steps(form: str, bpfdsl: str, obj: Path, pin: Path, prog: str, dev: str) -> list[list[str]]:
    """The timed command lines of one load + pin + attach in ``form``."""
    if form == "bpftool":
        return [
            ["bpftool", "prog", "loadall", str(obj), str(pin)],
            ["bpftool", "net", "attach", "xdp", "pinned", str(pin / prog), "dev", dev],
        ]
    if form == "bpfdsl 2-proc":
        return [
            [bpfdsl, "load", str(obj), "--pin-dir", str(pin)],
            [bpfdsl, "attach", "xdp", str(pin), "--dev", dev, "--prog", prog],
        ]
    return [
        [bpfdsl, "attach", "xdp", str(obj), "--dev", dev, "--pin-dir", str(pin), "--prog", prog]
    ]


def pinned_prog(pin: Path, prog: str) -> Path | None:
    """Where ``form`` pinned program ``prog``: DIR/PROG (bpftool) or DIR/progs/PROG (bpfdsl)."""
    for p in (pin / prog, pin / "progs" / prog):
        if p.exists():
            return p
    return None


def xdp_prog_id(ns: str, dev: str) -> int | None:
    """Id of the XDP program on ``dev`` of namespace ``ns`` (iproute2's view, ``ip -j -d
    link``), None when there is none."""
    info = json.loads(B.run(["ip", "-n", ns, "-j", "-d", "link", "show", "dev", dev]).stdout)[0]
    xdp = info.get("xdp") or {}
    prog = xdp.get("prog") or {}
    return prog.get("id") or next((a["prog"]["id"] for a in xdp.get("attached", [])), None)


def check_result(ns: str, form: str, obj: Path, pin: Path, prog: str, dev: str) -> None:
    """BenchError unless ``prog`` of ``obj`` is pinned under ``pin`` and attached to ``dev``."""
    path = pinned_prog(pin, prog)
    if path is None:
        raise B.BenchError(f"{form} ({obj.name}): program {prog} not pinned under {pin}")
    shown = json.loads(B.run(["bpftool", "-j", "prog", "show", "pinned", str(path)]).stdout)
    on_dev = xdp_prog_id(ns, dev)
    if on_dev != shown["id"]:
        raise B.BenchError(
            f"{form} ({obj.name}): {dev} runs prog id {on_dev}, pinned {path} is {shown['id']}"
        )


def undo(pin: Path, dev: str) -> None:
    """Detach XDP from ``dev`` and remove ``pin`` (untimed): bpftool attached through
    netlink; bpfdsl through a link pinned in ``pin``, detached before its pin goes."""
    B.run(["bpftool", "net", "detach", "xdp", "dev", dev], check=False)
    for link in pin.glob("link_*"):
        B.run(["bpftool", "link", "detach", "pinned", str(link)], check=False)
    shutil.rmtree(pin, ignore_errors=True)


def wait_empty(ns: str, dev: str, timeout: float = 2.0) -> None:
    """BenchError unless ``dev`` runs no XDP program within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while xdp_prog_id(ns, dev) is not None:
        if time.monotonic() > deadline:
            raise B.BenchError(f"{dev} still has an XDP program after the undo")
        time.sleep(0.01)


def bench(venv: Path, objs: dict[str, Path], runs: int) -> dict:
    """objs: label -> object path.  Returns ``rows`` (one per object and form), ``floor``."""
    bpfdsl = str(venv / "bin" / "bpfdsl")
    env, cwd = B.clean_env(), tempfile.gettempdir()
    B.ensure_bpffs()
    rows: list[dict] = []
    floor: dict[str, list[float]] = {"python -c pass": [], "bpftool version": []}
    B.require_tool("ip", "apt-get install iproute2")
    ns = netlink.unique_name(NS_PREFIX)
    with netlink.veth_pair(netns_a=ns, netns_b=ns, prefix="bpfb") as veth, netlink.in_netns(ns):
        dev = veth.a.name
        for label, obj in objs.items():
            prog = program_name(obj)
            times: dict[str, list[float]] = {f: [] for f in FORMS}
            for _ in range(runs):
                for form in FORMS:  # interleaved: load drift hits every form alike
                    pin = Path("/sys/fs/bpf") / f"{PIN_PREFIX}{uuid.uuid4().hex[:10]}"
                    try:
                        t = 0.0
                        for cmd in steps(form, bpfdsl, obj, pin, prog, dev):
                            t += B.time_interleaved([cmd], 1, env=env, cwd=cwd)[0][0]
                        check_result(ns, form, obj, pin, prog, dev)
                        times[form].append(t)
                    finally:
                        undo(pin, dev)
                    wait_empty(ns, dev)
                py = [str(venv / "bin" / "python"), "-c", "pass"]
                floor_t = B.time_interleaved([py, ["bpftool", "version"]], 1, env=env, cwd=cwd)
                floor["python -c pass"].append(floor_t[0][0])
                floor["bpftool version"].append(floor_t[1][0])
            inproc = inprocess_ms(ns, venv, obj, prog, dev, max(runs, 5))
            ms = {f: B.median(times[f]) * 1000 for f in FORMS}
            ratio1 = ms["bpfdsl 1-proc"] / ms["bpftool"]
            rows.append(
                {
                    "object": label,
                    "runs": runs,
                    "bpftool_total_ms": ms["bpftool"],
                    "bpfdsl_2proc_total_ms": ms["bpfdsl 2-proc"],
                    "bpfdsl_1proc_total_ms": ms["bpfdsl 1-proc"],
                    "ratio_2proc": ms["bpfdsl 2-proc"] / ms["bpftool"],
                    "ratio_1proc": ratio1,
                    "goal": ratio1 <= GOAL_RATIO,
                    "bpfdsl_inprocess_ms": inproc,
                }
            )
    return {"rows": rows, "floor_ms": {k: B.median(v) * 1000 for k, v in floor.items()}}


def inprocess_ms(ns: str, venv: Path, obj: Path, prog: str, dev: str, n: int) -> float:
    """Median ms of the one-process form's work inside one interpreter (imports excluded)."""
    base = f"/sys/fs/bpf/{PIN_PREFIX}inproc_{uuid.uuid4().hex[:8]}"
    cmd = [str(venv / "bin" / "python"), "-c", _INPROC, str(obj), dev, prog, base, str(n)]
    try:
        out = B.run(cmd, env=B.clean_env(), cwd=tempfile.gettempdir())
    finally:
        for i in range(n + 1):
            shutil.rmtree(f"{base}_{i}", ignore_errors=True)
    return float(out.stdout.split()[-1])


def render(res: dict) -> str:
    head = ["object", "runs", "bpftool", "bpfdsl 2-proc", "ratio", "bpfdsl 1-proc", "ratio"]
    head += ["goal", "in-process"]
    rows = [
        [
            r["object"],
            r["runs"],
            _f(r["bpftool_total_ms"]),
            _f(r["bpfdsl_2proc_total_ms"]),
            _f(r["ratio_2proc"], ".2f"),
            _f(r["bpfdsl_1proc_total_ms"]),
            _f(r["ratio_1proc"], ".2f"),
            B.verdict(r["goal"]),
            _f(r["bpfdsl_inprocess_ms"]),
        ]
        for r in res["rows"]
    ]
    floor = ", ".join(f"{k} {v:.1f} ms" for k, v in res["floor_ms"].items())
    return "\n".join(
        [
            "Load + pin + attach, whole-process medians (ms), bpfdsl from a wheel venv; "
            f"goal: 1-proc ratio <= {GOAL_RATIO}",
            B.table(head, rows),
            "in-process: the 1-proc form's work inside one interpreter, imports excluded",
            f"floor (same run, medians): {floor}",
        ]
        + [f"note: {n}" for n in res.get("notes", [])]
    )


def _f(v, spec=".1f") -> str:
    return "n/a" if v is None else format(v, spec)


def program_name(obj: Path) -> str:
    """Name of the first program in section ``xdp`` of ``obj`` (what both tools pin)."""
    for sec, name, _n in B.program_slots(obj):
        if sec == "xdp":
            return name
    raise B.BenchError(f"{obj.name} has no program in section xdp")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--program", default="xdp_udp_filter", help="reference program name")
    ap.add_argument("--runs", type=int, default=15, help="timed rounds per object (default 15)")
    ap.add_argument("--quick", action="store_true", help="3 rounds (< 1 min with a built venv)")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    if a.quick:
        a.runs = min(a.runs, 3)
    if a.runs < 1:
        ap.error("--runs must be >= 1")
    csrc, bpfd = B.C_DIR / f"{a.program}.c", B.PROGS / f"{a.program}.bpfd"
    if not csrc.exists() or not bpfd.exists():
        ap.error(f"need progs/{a.program}.bpfd and tests/data/c/{a.program}.c")
    notes = [busy] if busy else []
    try:
        B.require_root()
        B.require_tool("bpftool", "apt-get install bpftool")
        with B.venv_lock(), tempfile.TemporaryDirectory(prefix="bpfdsl-lbench-") as tmp:
            venv = B.installed_venv(log=lambda m: print(m, file=sys.stderr))
            objs = {"clang": B.build_c(Path(tmp), [a.program])[a.program]}
            ours = Path(tmp) / f"{a.program}.bpfdsl.o"
            cc = [str(venv / "bin" / "bpfdsl"), "compile", str(bpfd), "-o", str(ours)]
            proc = B.run(cc, check=False)
            if proc.returncode == 0:
                objs = {"bpfdsl": ours, **objs}
            else:
                last = (proc.stderr.strip().splitlines() or ["?"])[-1]
                notes.append(f"bpfdsl cannot compile {bpfd.name} ({last}): clang object only")
            res = bench(venv, objs, a.runs)
    except B.BenchError as e:
        print(f"load_bench: {e}", file=sys.stderr)
        return 1
    finally:
        for p in Path("/sys/fs/bpf").glob(f"{PIN_PREFIX}*"):  # nothing of ours stays pinned
            shutil.rmtree(p, ignore_errors=True)
    res["notes"] = notes
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
