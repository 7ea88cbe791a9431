"""``bpfdsl bench``: each mode on the setup it makes (veth pairs in namespaces, loopback TCP
in a cgroup), short runs.  What a reviewer reading the tables relies on: the rates are
measured (non-zero), the per-verdict counts add up to the frames the generator sent and
match what the program does, the Delta is the program's average against the baseline's
from the rows, the plot is a PNG, and nothing is left behind (namespaces, interfaces,
pins, cgroups, temporary directories) -- also after Ctrl-C.  Never an absolute time.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.bench.report import Metric, Progress, Section, abba, delta_pct

PROGS = ROOT / "progs"
C_DIR = ROOT / "tests" / "data" / "c"
PNG = b"\x89PNG\r\n\x1a\n"


def bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", "bench", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )


def bench_json(*args: str) -> dict:
    proc = bench(*args, "--json")
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    return json.loads(proc.stdout)


def state() -> set[str]:
    """What a benchmark could leave behind, by the names it uses."""
    from bpfdsl.kernel import netlink

    found = (
        {f"netns:{n}" for n in os.listdir("/run/netns")} if os.path.isdir("/run/netns") else set()
    )
    found = {n for n in found if n.startswith("netns:bpfdsl-bench-")}
    found |= {f"if:{n}" for n in netlink.interface_names() if n in ("gen0", "dut0", "egr1", "snk1")}
    found |= {f"pin:{p.name}" for p in Path("/sys/fs/bpf").iterdir() if "bench" in p.name.lower()}
    found |= {
        f"cg:{p.name}"
        for p in Path("/sys/fs/cgroup").iterdir()
        if p.name.startswith("bpfdsl-bench")
    }
    found |= {
        f"tmp:{p.name}"
        for p in Path(tempfile.gettempdir()).iterdir()
        if p.name.startswith("bpfdsl-bench-")
    }
    return found


@pytest.fixture
def nothing_left():
    before = state()
    yield
    assert state() <= before


@pytest.fixture(scope="module")
def clang(tmp_path_factory) -> dict[str, Path]:
    """The clang-19 twins of progs/*.bpfd used here (another compiler's objects)."""
    if subprocess.run(["which", "clang-19"], capture_output=True).returncode:
        pytest.skip("clang-19 not installed")
    out = tmp_path_factory.mktemp("clang")
    objs = {}
    for name in ("xdp_pass", "xdp_devmap_forward", "sk_msg_redirect_ingress"):
        obj = out / f"{name}.o"
        subprocess.run(
            [
                "clang-19",
                "-O2",
                "-g",
                "-target",
                "bpf",
                f"-I/usr/include/{os.uname().machine}-linux-gnu",
                "-c",
                str(C_DIR / f"{name}.c"),
                "-o",
                str(obj),
            ],
            check=True,
            capture_output=True,
        )
        objs[name] = obj
    return objs


def section(res: dict, title_start: str) -> dict:
    (s,) = [s for s in res["sections"] if s["title"].startswith(title_start)]
    return s


def check_delta(s: dict, key: str, label: str = "program", base: str = "baseline") -> None:
    """The Delta is the program's mean against the baseline's mean, from the rows."""
    mean = lambda lbl: statistics.fmean(r[key] for r in s["runs"][lbl])  # noqa: E731
    want = (mean(label) / mean(base) - 1) * 100
    assert s["delta_pct"][label][key] == pytest.approx(want)
    assert s["average"][label][key] == pytest.approx(mean(label))


# ---- the pieces that need no kernel ------------------------------------------------------


def test_abba_order_alternates() -> None:
    assert list(abba(["A", "B"], 3)) == [(0, "A"), (0, "B"), (1, "B"), (1, "A"), (2, "A"), (2, "B")]


def test_table_layout_rows_average_sd_delta() -> None:
    s = Section("t", [Metric("r", "rx", "Mpps", 1e6)])
    s.runs = {"baseline": [{"r": 1e6}, {"r": 3e6}], "program": [{"r": 2e6}, {"r": 6e6}]}
    lines = s.render("baseline").splitlines()
    assert [ln.split()[0] for ln in lines[4:]] == ["1", "2", "Average", "±", "Delta"]
    assert lines[-1].split() == ["Delta", "+100.00%"]
    assert lines[-3].split() == ["Average", "2.000", "4.000"]
    assert lines[-2].split()[-2:] == ["1.414", "2.828"]  # sample standard deviation
    assert math.isnan(delta_pct(1.0, 0.0))


@pytest.mark.parametrize(
    "args,code",
    [
        (["xdp", "progs/xdp_drop.bpfd", "--runs", "0"], "bad-args"),
        (["xdp", "progs/xdp_drop.bpfd", "--duration", "0"], "bad-args"),
        (["xdp", "progs/xdp_drop.bpfd", "--plot", "out.jpg"], "bad-args"),
        (["skmsg", "progs/sk_msg_redirect_ingress.bpfd", "--sizes", "sixty"], "bad-args"),
        (["xdp", "no/such/file.o"], None),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], code: str | None) -> None:
    proc = bench(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    if code:
        assert f"error[{code}]" in proc.stderr


# ---- on the kernel ------------------------------------------------------------------------


@pytest.mark.kernel
def test_xdp_rates_verdicts_delta_and_plot(clang, nothing_left, tmp_path: Path) -> None:
    """xdp_drop (bpfdsl) against clang's xdp_pass: every frame sent is counted once, with
    the verdict each program returns; the table has the kernel list's rows; a PNG."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "xdp.png"
    args = ["xdp", "progs/xdp_drop.bpfd", "--baseline", str(clang["xdp_pass"])]
    args += ["--runs", "2", "--duration", "0.2"]
    proc = bench(*args, "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    col = [ln.split()[0] for ln in proc.stdout.splitlines() if ln.strip()]
    assert {"Average", "±", "Delta"} <= set(col) and "1" in col and "2" in col
    assert png.read_bytes()[:8] == PNG
    res = bench_json(*args)
    assert res["labels"] == ["baseline", "program"]
    rate, verd = section(res, "XDP receive rate"), section(res, "Verdicts")
    for label, verdict in (("program", "XDP_DROP"), ("baseline", "XDP_PASS")):
        assert len(rate["runs"][label]) == 2
        for r, v in zip(rate["runs"][label], verd["runs"][label], strict=True):
            assert r["rx_pps"] > 0
            assert v["frames"] + v["lost"] == v["sent"]  # veth saw what it could queue
            assert v[verdict] == v["frames"] > 0  # ... and the program's one verdict
            assert r["rx_pps"] == pytest.approx(v["frames"] / v["seconds"])
    check_delta(rate, "rx_pps")


@pytest.mark.kernel
def test_redirect_devmap_frames_reach_the_egress(clang, nothing_left) -> None:
    res = bench_json(
        "redirect",
        "progs/xdp_devmap_forward.bpfd",
        "--baseline",
        str(clang["xdp_devmap_forward"]),
        "--runs",
        "1",
        "--duration",
        "0.2",
    )
    assert res["setup"]["map_kind"] == "devmap"
    rates, verd = section(res, "devmap redirect rates"), section(res, "Verdicts")
    for label in ("program", "baseline"):
        (r,), (v,) = rates["runs"][label], verd["runs"][label]
        assert v["XDP_REDIRECT"] == v["frames"] > 0
        assert 0 < r["egress_pps"] <= r["redirect_pps"]
    check_delta(rates, "egress_pps")


@pytest.mark.kernel
def test_redirect_cpumap_rates_and_tcp_through_it(nothing_left) -> None:
    """progs/xdp_cpumap_steer.bpfd steers to CPU 1 (its table: slot 0 -> CPU 1); its on-CPU
    program drops UDP port 9 (the default frame) and passes TCP, which reaches the server."""
    res = bench_json(
        "redirect",
        "progs/xdp_cpumap_steer.bpfd",
        "--map",
        "cpus",
        "0",
        "1",
        "--cpu",
        "1",
        "--runs",
        "1",
        "--duration",
        "0.3",
    )
    assert res["setup"]["cpus"] == [1] and res["setup"]["map_kind"] == "cpumap"
    (r,) = section(res, "cpumap redirect rates")["runs"]["program"]
    (v,) = section(res, "Verdicts")["runs"]["program"]
    assert r["redirect_pps"] > 0 and r["cpu_pps"] > 0
    assert v["cpu_drop"] == v["cpu_processed"] > 0  # the entry program ran on each frame
    assert v["cpu_processed"] + v["cpu_queue_drops"] <= v["XDP_REDIRECT"] == v["frames"]
    (t,) = section(res, "TCP through the cpumap")["runs"]["program"]
    assert t["stream_mbps"] > 0 and t["rr_tps"] > 0 and t["cpumap_frames"] > 0
    assert 0 < t["rr_p50_us"] <= t["rr_p90_us"] <= t["rr_p99_us"]


@pytest.mark.kernel
def test_redirect_unfilled_slot_is_explained(nothing_left) -> None:
    """Without its CPU table filled the steering program picks CPU 0, which the benchmark
    left empty: an error saying what to do, not a table of zeros."""
    proc = bench(
        "redirect",
        "progs/xdp_cpumap_steer.bpfd",
        "--cpu",
        "1",
        "--runs",
        "1",
        "--duration",
        "0.1",
        "--no-tcp",
    )
    assert proc.returncode == 1
    assert "error[bench-no-traffic]" in proc.stderr and "--map" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.kernel
def test_xsk_rxdrop_and_l2fwd(nothing_left) -> None:
    res = bench_json("xsk", "progs/xdp_xsk_redirect.bpfd", "--runs", "1", "--duration", "0.3")
    drop, fwd = section(res, "AF_XDP rxdrop rates"), section(res, "AF_XDP l2fwd rates")
    (r,), (f,) = drop["runs"]["program"], fwd["runs"]["program"]
    assert 0 < r["xsk_pps"] <= r["redirect_pps"] <= r["rx_pps"]
    assert 0 < f["fwd_pps"] <= f["xsk_pps"]
    (c,) = section(res, "AF_XDP rxdrop: frames")["runs"]["program"]
    assert c["socket"] <= c["XDP_REDIRECT"] <= c["frames"]


@pytest.mark.kernel
def test_skmsg_redirection_skips_tcp_by_size(clang, nothing_left, tmp_path: Path) -> None:
    """Redirected messages send (almost) no TCP segment; plain TCP does; the summary has a
    row per size; the per-size sections compare the program with the baseline."""
    pytest.importorskip("matplotlib")
    png = tmp_path / "sk.png"
    args = [
        "skmsg",
        "progs/sk_msg_redirect_ingress.bpfd",
        "--baseline",
        str(clang["sk_msg_redirect_ingress"]),
        "--sizes",
        "64,4k",
        "--runs",
        "1",
        "--duration",
        "0.1",
    ]
    proc = bench(*args, "--plot", str(png))
    assert proc.returncode == 0, proc.stderr
    assert png.read_bytes()[:8] == PNG
    rows = [ln.split()[0] for ln in proc.stdout.splitlines() if ln[:1].isdigit()]
    assert rows[-2:] == ["64", "4"]  # "64 B", "4 KiB": one summary row per size
    res = bench_json(*args)
    assert res["labels"] == ["plain TCP", "baseline", "program"]
    s4k = section(res, "4 KiB")
    for label in ("program", "baseline"):
        (r,) = s4k["runs"][label]
        assert r["tput_mbs"] > 0 and r["lat_us"] > 0
        assert r["segs_per_msg"] < 0.01
    (p,) = s4k["runs"]["plain TCP"]
    assert p["tput_mbs"] > 0 and p["segs_per_msg"] >= 0.05  # MSS ~64 KiB on lo: >= 1/16
    check_delta(s4k, "tput_mbs")
    assert list(s4k["delta_pct"]) == ["program"]


@pytest.mark.kernel
def test_ctrl_c_mid_run_removes_everything(nothing_left) -> None:
    """KeyboardInterrupt between two runs (as Ctrl-C or SIGTERM): namespaces, veths,
    cgroup and helper directory are gone afterwards."""
    from bpfdsl.bench import skmsg, xdp
    from bpfdsl.bench.target import ObjectUnderTest
    from bpfdsl.compiler import compile_file

    class Interrupt(Progress):
        def __init__(self) -> None:
            self.n = 0

        def step(self, text: str) -> None:
            self.n += 1
            if self.n == 2:
                raise KeyboardInterrupt

    cpumap = ObjectUnderTest(
        "program",
        "steer",
        compile_file(str(PROGS / "xdp_cpumap_steer.bpfd")).obj,
        maps=[("cpus", "0", "1")],
    )
    with pytest.raises(KeyboardInterrupt):
        xdp.run_redirect([cpumap], xdp.XdpOptions(runs=2, duration=0.1), Interrupt())
    sk = ObjectUnderTest(
        "program", "sk", compile_file(str(PROGS / "sk_msg_redirect_ingress.bpfd")).obj
    )
    with pytest.raises(KeyboardInterrupt):
        skmsg.run_skmsg(
            [sk], skmsg.SkmsgOptions(runs=1, duration=0.1, sizes=(64, 128)), Interrupt()
        )


@pytest.mark.kernel
def test_ethtool_counters_and_checksum_offload(nothing_left) -> None:
    """The veth statistics the benchmarks read, and the offload switch they flip."""
    from bpfdsl.bench.counters import xdp_counts
    from bpfdsl.bench.net import DUT_DEV, GEN_DEV, bench_net
    from bpfdsl.kernel import ethtool

    with bench_net() as net:
        from bpfdsl.kernel import netlink

        with netlink.in_netns(net.gen_ns):
            assert "rx_queue_0_xdp_packets" in ethtool.driver_stats(GEN_DEV)
            assert ethtool.tx_checksum(GEN_DEV) is False  # the set-up turned it off
            ethtool.set_tx_checksum(GEN_DEV, True)
            assert ethtool.tx_checksum(GEN_DEV) is True
        with netlink.in_netns(net.dut_ns):
            assert xdp_counts(DUT_DEV).packets == 0
            with pytest.raises(OSError):
                ethtool.driver_stats("nosuchdev0")


@pytest.mark.kernel
@pytest.mark.parametrize(
    "args,code,words",
    [
        (["xdp", "progs/sk_msg_redirect_ingress.bpfd"], "bench-program", "no xdp program"),
        (["skmsg", "progs/xdp_drop.bpfd"], "bench-program", "no sk_msg program"),
        (["xsk", "progs/xdp_drop.bpfd"], "bench-map", "no xskmap"),
        (["redirect", "progs/xdp_drop.bpfd"], "bench-map", "no cpumap or devmap"),
        (["xdp", "progs/xdp_cpumap_steer.bpfd", "--prog", "nope"], "bench-program", "steer"),
        (["redirect", "progs/xdp_cpumap_steer.bpfd", "--cpu", "4096"], "bad-args", "--cpu"),
        (["xdp", "progs/xdp_drop.bpfd", "--map", "nomap", "0", "1"], "bad-map", "nomap"),
    ],
)
def test_programs_that_do_not_fit_the_mode_are_explained(
    args: list[str], code: str, words: str, nothing_left
) -> None:
    proc = bench(*args, "--runs", "1", "--duration", "0.1", timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert f"error[{code}]" in proc.stderr and words in proc.stderr
    assert "help:" in proc.stderr and "Traceback" not in proc.stderr
