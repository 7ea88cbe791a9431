#!/usr/bin/env python3
"""sk_msg benchmark (issue 5): TCP over loopback, plain vs sk_msg ingress redirection.

For every message size (64 B ... 256 KiB) and mode -- ``plain`` (no program), ``clang``
(tests/data/c/sk_msg_redirect_ingress.c built with clang-19) and ``bpfdsl``
(progs/sk_msg_redirect_ingress.bpfd) -- measures
  throughput: one sender process send()s SIZE-byte messages for --millis ms, one receiver
              recv()s until EOF; MB/s = bytes received / time to the last byte (1 MB = 1e6 B);
  latency:    ping-pong of a SIZE-byte message answered by 1 byte (TCP_NODELAY); round trip
              in microseconds, mean per run;
and prints mean +- sample standard deviation over --runs runs, the change against plain TCP
in percent and bpfdsl/clang (goal: bpfdsl >= 0.98 x clang throughput at every size).

Sender and receiver are a small C program (bench/skbench.c) compiled here with gcc -O2: one
send()/recv() system call per message and nothing else, so the kernel path is measured, not
an interpreter.  The table shows the sender's user-CPU share: when it is a few percent, the
loop is not the bottleneck (the kernel send path is).

The programs are loaded through libbpf (``bpftool prog loadall``, the same for both
compilers); sock_ops is attached to a throw-away child cgroup v2 that only the helper
processes join, sk_msg to the object's sockhash.  The helpers run in a throw-away network
namespace, so its TCP counters (OutSegs) count only their traffic: a redirected run sends
(almost) no TCP segments, which shows the data skipped the TCP/IP stack.  Namespace, cgroup
and pins are removed on exit, also on failure.  Exit status 0 whether or not goals are met.

Usage: python3 bench/skmsg_bench.py [--runs N] [--sizes 64,1k,...] [--millis MS] [--quick]
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import tempfile
from pathlib import Path

import benchlib as B
from netns import VethNs

GOAL = 0.98
NAME = "sk_msg_redirect_ingress"
SIZES = (64, 128, 256, 512, 1024, 4096, 16384, 32768, 65536, 131072, 262144)
QUICK_SIZES = (64, 4096, 262144)


def parse_size(s: str) -> int:
    s = s.strip().lower()
    mult = {"k": 1024, "m": 1 << 20}.get(s[-1:], 1)
    return int(s[:-1] if mult > 1 else s) * mult


def human(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 else str(n)


def build_helper(work: Path) -> Path:
    """gcc -O2 bench/skbench.c -> WORK/skbench."""
    B.require_tool("gcc", "apt-get install gcc")
    exe = work / "skbench"
    B.run(
        ["gcc", "-O2", "-Wall", "-o", str(exe), str(Path(__file__).with_name("skbench.c")), "-lm"]
    )
    return exe


def tcp_out_segs() -> int:
    """OutSegs of the calling thread's network namespace (/proc/thread-self/net/snmp)."""
    lines = Path("/proc/thread-self/net/snmp").read_text().splitlines()
    tcp = [ln.split() for ln in lines if ln.startswith("Tcp:")]
    return int(tcp[1][tcp[0].index("OutSegs")])


def helper(
    exe: Path, ns: VethNs, cg: str, mode: str, size: int, millis: float, pin: bool = False
) -> dict:
    """Run skbench once inside the namespace; its key=value line as a dict of floats."""
    cmd = [str(exe), cg, mode, str(size), str(millis)] + (["pin"] if pin else [])
    out = B.run(ns.in_ns(cmd), timeout=60 + millis / 1000).stdout
    return {k: float(v) for k, v in (kv.split("=") for kv in out.split())}


class Redirector:
    """sock_ops + sk_msg of one object, attached while in a ``with`` block."""

    def __init__(self, obj: Path, cgroup: str):
        from bpfdsl.abi.uapi import MapType

        self.lo = B.Loaded(obj)
        self.cgroup = cgroup
        try:
            hit = self.lo.map_of_type(MapType.SOCKHASH) or self.lo.map_of_type(MapType.SOCKMAP)
            if hit is None or "sockops" not in self.lo.progs or "sk_msg" not in self.lo.progs:
                raise B.BenchError(
                    f"{obj.name}: needs a sockops and an sk_msg program and a sockhash/sockmap"
                )
            self.sockmap = hit[0]
            self.counter = self.lo.map_of_type(MapType.PERCPU_ARRAY)
        except BaseException:
            self.lo.close()
            raise

    def redirected(self) -> int | None:
        """Sum of the object's per-CPU counter map (key 0), None without one."""
        if self.counter is None:
            return None
        from bpfdsl.kernel import syscall

        fd, _info = self.counter
        raw = syscall.map_lookup(fd, struct.pack("<I", 0), syscall.percpu_value_size(8)) or b""
        return sum(v for (v,) in struct.iter_unpack("<Q", raw[: len(raw) // 8 * 8]))

    def __enter__(self) -> Redirector:
        from bpfdsl.runtime import cgroup, sockmap

        sockmap.sk_msg_attach(self.sockmap, self.lo.progs["sk_msg"])
        try:
            cgroup.sock_ops_attach(self.cgroup, self.lo.progs["sockops"], multi=False)
        except BaseException:
            sockmap.sk_msg_detach(self.sockmap, self.lo.progs["sk_msg"])
            raise
        return self

    def __exit__(self, *exc) -> None:
        from bpfdsl.runtime import cgroup, sockmap

        cgroup.sock_ops_detach(self.cgroup, self.lo.progs["sockops"])
        sockmap.sk_msg_detach(self.sockmap, self.lo.progs["sk_msg"])

    def close(self) -> None:
        self.lo.close()


def bench(
    objs: dict[str, Path], sizes, runs: int, millis: float, work: Path, pin: bool = False
) -> dict:
    """objs: mode label -> object.  Returns raw samples per mode and size."""
    from bpfdsl.kernel import netlink
    from bpfdsl.runtime import cgroup

    exe = build_helper(work)
    modes = ["plain", *objs]
    data = {m: {s: {"tput": [], "lat": [], "user": [], "segs": []} for s in sizes} for m in modes}
    redirected = {m: 0 for m in objs}
    reds: dict[str, Redirector] = {}
    B.ensure_bpffs()
    with VethNs(0) as ns, cgroup.ChildCgroup(prefix="bpfdsl-skbench") as cg:
        try:
            for m, obj in objs.items():
                reds[m] = Redirector(obj, cg.path)
            for _run in range(runs):
                for m in modes:
                    red = reds.get(m)
                    if red is not None:
                        red.__enter__()
                    try:
                        c0 = red.redirected() if red else None
                        for s in sizes:
                            with netlink.in_netns(ns.name):
                                seg0 = tcp_out_segs()
                            t = helper(exe, ns, cg.path, "tput", s, millis, pin)
                            with netlink.in_netns(ns.name):
                                segs = tcp_out_segs() - seg0
                            lat = helper(exe, ns, cg.path, "lat", s, millis / 2, pin)
                            d = data[m][s]
                            d["tput"].append(t["bytes"] / t["secs"] / 1e6)
                            d["lat"].append(lat["mean_us"])
                            d["user"].append(
                                t["send_user"] / max(t["send_user"] + t["send_sys"], 1e-9)
                            )
                            d["segs"].append(segs / max(t["msgs"], 1))
                        if red is not None and c0 is not None:
                            redirected[m] += red.redirected() - c0
                    finally:
                        if red is not None:
                            red.__exit__()
        finally:
            for red in reds.values():
                red.close()
    return {
        "sizes": list(sizes),
        "runs": runs,
        "millis": millis,
        "data": data,
        "redirected": redirected,
    }


def ms(xs) -> str:
    m, sd = B.mean_sd(xs)
    return f"{m:.1f} ± {sd:.1f}"


def render(res: dict) -> str:
    data, sizes = res["data"], res["sizes"]
    modes = list(data)
    out = [
        f"sk_msg ingress redirection vs plain TCP over loopback: {res['runs']} runs of "
        f"{res['millis']:g} ms per size; mean ± sd; goal: bpfdsl >= {GOAL} x clang"
    ]
    head = ["size"]
    for m in modes:
        head += [f"{m} MB/s"] + ([] if m == "plain" else ["vs plain"])
    if "bpfdsl" in modes and "clang" in modes:
        head += ["bpfdsl/clang", "goal"]
    head += ["send user%", "segs/msg " + "/".join(modes)]
    rows = []
    for s in sizes:
        base = B.mean_sd(data["plain"][s]["tput"])[0]
        row = [human(s)]
        for m in modes:
            row.append(ms(data[m][s]["tput"]))
            if m != "plain":
                row.append(f"{(B.mean_sd(data[m][s]['tput'])[0] / base - 1) * 100:+.1f}%")
        if "bpfdsl" in modes and "clang" in modes:
            r = B.mean_sd(data["bpfdsl"][s]["tput"])[0] / B.mean_sd(data["clang"][s]["tput"])[0]
            row += [f"{r:.3f}", B.verdict(r >= GOAL)]
        row.append(f"{B.mean_sd(data['plain'][s]['user'])[0] * 100:.1f}")
        row.append("/".join(f"{B.mean_sd(data[m][s]['segs'])[0]:.2f}" for m in modes))
        rows.append(row)
    out += ["", "Throughput", B.table(head, rows), "", "Latency (round trip, µs)"]
    lhead = ["size"] + [f"{m} µs" for m in modes] + [f"{m} vs plain" for m in modes[1:]]
    lrows = []
    for s in sizes:
        base = B.mean_sd(data["plain"][s]["lat"])[0]
        lrows.append(
            [human(s)]
            + [ms(data[m][s]["lat"]) for m in modes]
            + [f"{(B.mean_sd(data[m][s]['lat'])[0] / base - 1) * 100:+.1f}%" for m in modes[1:]]
        )
    out.append(B.table(lhead, lrows))
    for m, n in res["redirected"].items():
        out.append(f"note: {m}: the program's counter shows {n} redirected messages")
    out.append(
        "note: 'send user%' = sender user CPU / (user + system) for plain TCP: the send "
        "loop itself costs that share; segs/msg = TCP segments sent per message in the "
        "namespace (≈0 when sk_msg redirection skips the TCP stack)"
    )
    out += [f"note: {n}" for n in res.get("notes", [])]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="runs per mode and size")
    ap.add_argument("--sizes", help="comma-separated message sizes (64,1k,256k); default all")
    ap.add_argument("--millis", type=float, default=300, help="throughput run length (ms)")
    ap.add_argument("--quick", action="store_true", help="sizes 64,4k,256k, 2 runs of 100 ms")
    ap.add_argument("--pin", action="store_true", help="sender on CPU 0, receiver on CPU 1")
    ap.add_argument("--json", metavar="FILE", help="also write the results as JSON")
    a = ap.parse_args(argv)
    busy = B.load_note()  # before we add load ourselves
    sizes = SIZES
    if a.sizes:
        try:
            sizes = tuple(parse_size(x) for x in a.sizes.split(",") if x.strip())
        except ValueError:
            ap.error("--sizes: numbers with an optional k/m suffix, e.g. 64,1k,256k")
    if a.quick:
        sizes = sizes if a.sizes else QUICK_SIZES
        a.runs, a.millis = min(a.runs, 2), min(a.millis, 100)
    if (
        a.runs < 1
        or not 10 <= a.millis <= 10_000
        or not sizes
        or min(sizes) < 1
        or max(sizes) > 1 << 24
    ):
        ap.error("--runs >= 1, 10 <= --millis <= 10000, sizes 1 .. 16M")
    try:
        B.require_root()
        B.require_tool("bpftool", "apt-get install bpftool")
        with tempfile.TemporaryDirectory(prefix="bpfdsl-skbench-") as tmp:
            work = Path(tmp)
            objs = {"clang": B.build_c(work / "clang", [NAME])[NAME]}
            notes = []
            ours = work / f"{NAME}.ours.o"
            why = B.compile_ours(B.PROGS / f"{NAME}.bpfd", ours)
            if why is None:
                objs["bpfdsl"] = ours
            else:
                notes.append(f"{why}: clang program only")
            res = bench(objs, sizes, a.runs, a.millis, work, a.pin)
            res["notes"] = notes
    except B.BenchError as e:
        print(f"skmsg_bench: {e}", file=sys.stderr)
        return 1
    if busy:
        res.setdefault("notes", []).append(busy)
    print(render(res))
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
