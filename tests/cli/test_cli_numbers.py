"""CLI numbers are checked against the kernel type they fill (bpfdsl.cli.kernel_int): a
cpumap CPU or devmap key outside u32 is a `bad-args` error naming the range (exit 2),
never a struct.error traceback, and the map is left as it was; the ends of the range work."""

from __future__ import annotations

import json
import shutil

import pytest
from support.netns import bpffs_dir
from support.paths import ROOT

from bpfdsl.cli import kernel_int, main
from bpfdsl.diagnostics import UsageError

U32_MAX = 2**32 - 1


def test_kernel_int_ranges_and_spellings():
    key = kernel_int("KEY", "u32", field="the devmap key")
    assert [key("0"), key(str(U32_MAX)), key("0x10"), key("007")] == [0, U32_MAX, 16, 7]
    for bad, why in (
        ("4294967296", "outside 0..4294967295"),
        ("-1", "outside"),
        ("x1", "not a number"),
    ):
        with pytest.raises(UsageError) as ei:
            key(bad)
        d = ei.value.diagnostics[0]
        assert d.code == "bad-args" and why in d.message and d.message.startswith("KEY ")
        assert d.hints == ["the devmap key is a u32: give 0..4294967295"]
    ifindex = kernel_int("IFACE", "int", lo=1, field="an ifindex", names=True)
    assert ifindex("veth0") == "veth0" and ifindex("3") == 3
    with pytest.raises(UsageError, match=r"IFACE 0 is outside 1\.\.2147483647"):
        ifindex("0")
    with pytest.raises(UsageError, match="2147483648 is outside"):
        ifindex("2147483648")


def test_bad_number_before_any_kernel_call(capsys):
    """Argument types run while parsing: no map is opened (this MAP does not exist)."""
    assert main(["cpumap", "delete", "/nonexistent:cpu_map", "4294967296"]) == 2
    err = capsys.readouterr().err
    assert "error[bad-args]: CPU 4294967296 is outside 0..4294967295" in err
    assert "Traceback" not in err and "struct" not in err
    assert main(["-j", "devmap", "delete", "/nonexistent:m", "-1"]) == 2
    doc = json.loads(capsys.readouterr().out)  # --json: the error document on stdout
    assert doc["error"][0]["code"] == "bad-args" and "0..4294967295" in doc["error"][0]["hints"][0]


@pytest.fixture
def pins():
    d = bpffs_dir("bdnum_")
    try:
        assert main(["load", str(ROOT / "progs" / "xdp_devmap_forward.bpfd"), "--pin-dir", d]) == 0
        assert (
            main(["load", str(ROOT / "progs" / "xdp_cpumap_steer.bpfd"), "--pin-dir", d + "c"]) == 0
        )
        yield d, d + "c"
    finally:
        for p in (d, d + "c"):
            main(["unload", p])
            shutil.rmtree(p, ignore_errors=True)


@pytest.mark.kernel
def test_out_of_u32_keys_refused_map_unchanged(pins, capsys):
    dev, cpu = f"{pins[0]}:tx_ports", f"{pins[1]}:cpu_map"  # a devmap_hash and a cpumap
    assert main(["devmap", "set", dev, str(U32_MAX), "lo"]) == 0  # the top of u32 is a key
    assert main(["cpumap", "set", cpu, "0", "--qsize", "192"]) == 0
    capsys.readouterr()
    for argv, name in (
        (["devmap", "set", dev, str(U32_MAX + 1), "lo"], "KEY"),
        (["devmap", "set", dev, "-1", "lo"], "KEY"),
        (["devmap", "set", dev, "5", "99999999999"], "IFACE"),
        (["devmap", "delete", dev, str(U32_MAX + 1)], "KEY"),
        (["devmap", "delete", dev, "-1"], "KEY"),
        (["cpumap", "delete", cpu, str(U32_MAX + 1)], "CPU"),
        (["cpumap", "delete", cpu, "-1"], "CPU"),
        (["cpumap", "set", cpu, "0", "--qsize", str(U32_MAX + 1)], "--qsize"),
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert f"error[bad-args]: {name} " in err and "is outside" in err, (argv, err)
        assert "Traceback" not in err
    assert main(["-j", "devmap", "show", dev]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["key"], r["ifindex"]) for r in rows] == [(U32_MAX, 1)]
    assert main(["-j", "cpumap", "show", cpu]) == 0
    assert [(r["cpu"], r["qsize"]) for r in json.loads(capsys.readouterr().out)] == [(0, 192)]
    assert main(["devmap", "delete", dev, hex(U32_MAX)]) == 0  # 0x spelling, the same key
    assert "removed" in capsys.readouterr().out


def test_a_negative_check_timeout_is_refused(capsys) -> None:
    prog = str(ROOT / "progs" / "xdp_pass.bpfd")
    for argv in (["check", prog, "--timeout", "-1"],
                 ["compile", prog, "-o", "/dev/null", "--check-timeout", "nan"]):  # fmt: skip
        with pytest.raises(SystemExit) as ei:  # argparse's usage error
            main(argv)
        assert ei.value.code == 2
        assert "must be 0 or more seconds" in capsys.readouterr().err


@pytest.mark.kernel
def test_writing_a_frozen_config_says_to_set_it_at_load(capsys) -> None:
    d = bpffs_dir("bdcfg_")
    try:
        assert main(["load", str(ROOT / "progs" / "xdp_udp_filter.bpfd"), "--pin-dir", d]) == 0
        capsys.readouterr()
        assert main(["map", "update", f"{d}:rodata", "0", '{"port": 53}']) == 2
        err = capsys.readouterr().err
        assert "a config (.rodata) is frozen once loaded" in err
        assert "bpfdsl load --set NAME=VALUE" in err
    finally:
        main(["unload", d])
        shutil.rmtree(d, ignore_errors=True)
