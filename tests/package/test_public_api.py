"""The public API of ``bpfdsl`` (README "Python API"): source -> object -> check -> run ->
load -> attach, with nothing imported from internal modules."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time

import pytest
from support.netns import bpffs_dir, veth_net

import bpfdsl
from bpfdsl.cli import main

SRC = """license "GPL"
map seen: array<u32, u64>(max_entries: 1)
xdp fn udp_filter(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    if ip.protocol != IPPROTO_UDP { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    seen[0] += 1
    if udp.dest == 9999 { return XDP_DROP }
    return XDP_PASS
}
"""


def _frame(dport: int) -> bytes:
    from bpfdsl.runtime.packets import udp_frame  # test data only

    return udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="10.0.0.1",
        dst_ip="10.0.0.2",
        sport=1234,
        dport=dport,
        payload=b"x" * 8,
    )


def test_import_bpfdsl_loads_no_stage():
    code = "import sys, bpfdsl; print(sorted(m for m in sys.modules if m.startswith('bpfdsl.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_names_resolve_and_are_listed():
    for name in bpfdsl.__all__:
        assert getattr(bpfdsl, name) is not None, name
    with pytest.raises(AttributeError):
        bpfdsl.no_such_name  # noqa: B018


def test_compile_check_and_run_in_the_interpreter():
    res = bpfdsl.compile_source(SRC, "api.bpfd")
    spec = bpfdsl.read_object(res.obj)
    assert list(spec.programs) == ["udp_filter"]
    assert bpfdsl.check_object(spec).ok
    results = bpfdsl.run(spec, [_frame(9999), _frame(53), b"\x00" * 20], engine="interp")
    assert [r.verdict for r in results] == ["XDP_DROP", "XDP_PASS", "XDP_PASS"]
    assert [r.index for r in results] == [1, 2, 3]


def test_errors_are_diagnostics_with_a_location():
    with pytest.raises(bpfdsl.DiagnosticError) as e:
        bpfdsl.compile_source('license "GPL"\nxdp fn f(ctx) {\n    return nope\n}\n', "bad.bpfd")
    d = e.value.diagnostics[0]
    assert (d.span.file, d.span.line, d.span.col) == ("bad.bpfd", 3, 12)
    assert d.to_json()["line"] == 3 and "nope" in e.value.render()


def test_run_takes_paths_and_bytes(tmp_path):
    src = tmp_path / "f.bpfd"
    src.write_text(SRC)
    by_path = bpfdsl.run(src, [_frame(9999)], engine="interp")
    by_bytes = bpfdsl.run(bpfdsl.compile_file(src).obj, [_frame(9999)], engine="interp")
    assert by_path[0].verdict == by_bytes[0].verdict == "XDP_DROP"


@pytest.mark.kernel
def test_kernel_run_load_and_attach_through_the_api():
    spec = bpfdsl.read_object(bpfdsl.compile_source(SRC, "api.bpfd").obj)
    kernel = bpfdsl.run(spec, [_frame(9999), _frame(53)], engine="kernel")
    assert [r.verdict for r in kernel] == ["XDP_DROP", "XDP_PASS"]
    pin = bpffs_dir()
    with veth_net("ba") as net, bpfdsl.load_collection(spec) as coll:
        try:
            with net.in_xdp_ns():
                att = bpfdsl.attach_xdp(
                    coll.programs["udp_filter"].fd, net.xdp_dev, link_pin=f"{pin}/link"
                )
            assert att.prog_id > 0 and att.method == "link"
            sent = net.send_udp(9999, 5)
            deadline = time.monotonic() + 5
            count = 0
            while time.monotonic() < deadline:
                count = int.from_bytes(coll.maps["seen"].lookup(b"\0\0\0\0") or b"", "little")
                if count >= sent:
                    break
                time.sleep(0.02)
            assert count == sent == 5
            with net.in_xdp_ns():
                assert bpfdsl.detach_xdp(net.xdp_dev, extra_pins=(f"{pin}/link",)) is not None
        finally:
            if os.path.exists(pin):
                shutil.rmtree(pin)


@pytest.mark.kernel
def test_readme_python_example_runs_as_written(tmp_path, monkeypatch):
    import re

    from support.paths import ROOT

    readme = (ROOT / "README.md").read_text()
    example, maps_example = re.findall(r"```python\n(.*?)```", readme, re.S)
    (program,) = re.findall(r"```bpfd\n(.*?)```", readme, re.S)
    (tmp_path / "filter.bpfd").write_text(program)
    monkeypatch.chdir(tmp_path)
    pin = bpffs_dir()
    with veth_net("br") as net:
        code = example.replace('"veth0"', repr(net.xdp_dev)).replace(
            '"/sys/fs/bpf/filter/link"', repr(f"{pin}/link")
        )
        try:
            with net.in_xdp_ns():
                exec(compile(code, "README.md", "exec"), {"frame": _frame(9999)})
            assert os.path.exists(f"{pin}/link")  # attached, pinned: outlives the collection
        finally:
            shutil.rmtree(pin, ignore_errors=True)
    # the control-plane example, on the pins of `bpfdsl load progs/xdp_acl.bpfd`
    acl = bpffs_dir()
    assert main(["load", str(ROOT / "progs" / "xdp_acl.bpfd"), "--pin-dir", acl]) == 0
    try:
        exec(
            compile(maps_example.replace("/sys/fs/bpf/acl", acl), "README.md", "exec"),
            {"bpfdsl": bpfdsl},
        )
        with bpfdsl.open_map(f"{acl}:v4_block") as m:
            assert m.get("10.0.0.0/8") is None and m.get("10.3.0.0/16") == 2
    finally:
        main(["unload", acl])


def test_all_lists_exactly_the_lazy_names_and_run():
    assert sorted(bpfdsl.__all__) == sorted([*bpfdsl._PUBLIC, "run", "__version__"])
