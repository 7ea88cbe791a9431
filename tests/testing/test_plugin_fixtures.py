"""The pytest plugin's fixtures as a user's test suite meets them, run as inner pytest
sessions with this tree's plugin (bpfdsl.testing.pytest_plugin):

- the kernel half of an sk_msg test runs on every rerun under BPFDSL_REQUIRE_KERNEL=1,
  also with fixed ports (its connection lives in a fresh network namespace: no TIME_WAIT);
  a kernel half that cannot run fails under that variable instead of skipping;
- relative program paths resolve against the test file's directory, then the rootdir,
  whatever the current directory; a missing one fails naming the paths tried;
- maps take and give typed values (addresses, prefixes, structs) as ``bpfdsl map`` does.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from support.paths import ROOT

import bpfdsl.testing.pytest_plugin as plugin

SK_MSG_TEST = '''
import pytest
from bpfdsl.interp import SockInfo

SRC = """license "GPL"
map socks: sockmap(max_entries: 2)
sk_msg fn p(msg) {
    if msg.local_port == 40123 && msg.remote_port == 7123 { return SK_PASS }
    return SK_DROP
}
"""

@pytest.mark.parametrize("i", range(3))
def test_fixed_ports_again_and_again(bpf_program, i):
    from bpfdsl.compiler import compile_source
    prog = bpf_program(compile_source(SRC, "fixed.bpfd").obj)
    r = prog.run(b"hello", sock=SockInfo(local_port=40123, remote_port=7123))
    assert (r.verdict, r.data_out) == ("SK_PASS", b"hello")
    r = prog.run(b"hello", sock=SockInfo(local_port=40124, remote_port=7123))
    assert (r.verdict, r.data_out) == ("SK_DROP", b"")
'''

SOCK_OPS_TEST = """
def test_sock_ops_on_both(bpf_program):
    from bpfdsl.compiler import compile_source
    src = 'license "GPL"\\nsock_ops fn t(skops) { return 1 }\\n'
    assert bpf_program(compile_source(src, "t.bpfd").obj).run(b"").verdict == "1"
"""

PATHS_TEST = """
import pytest

@pytest.mark.bpf_engines("interp")
def test_next_to_the_test(bpf_program):
    assert bpf_program("here.bpfd").run(bytes(64)).verdict == "XDP_DROP"

@pytest.mark.bpf_engines("interp")
def test_from_the_rootdir(bpf_program):
    assert bpf_program("progs/there.bpfd").run(bytes(64)).verdict == "XDP_PASS"

@pytest.mark.bpf_engines("interp")
def test_missing(bpf_program):
    bpf_program("nowhere.bpfd")
"""

TYPED_TEST = '''
from scapy.layers.inet import IP, UDP
from scapy.layers.l2 import Ether

SRC = """license "GPL"
struct flow { saddr: be32, dport: be16 }
map blocked: lpm_trie<ipv4_prefix, u32>(max_entries: 16)
map seen: hash<flow, u64>(max_entries: 16)
map hits: percpu_array<u32, u64>(max_entries: 1)
xdp fn f(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IP { return XDP_PASS }
    let ip = parse ipv4 else { return XDP_PASS }
    let udp = parse udp else { return XDP_PASS }
    seen[flow(saddr: ip.saddr, dport: udp.dest)] = 7
    hits[0] += 1
    if blocked.contains(ip.saddr) { return XDP_DROP }
    return XDP_PASS
}
"""

def frame(src):
    return Ether() / IP(src=src, dst="10.9.9.9") / UDP(sport=1, dport=53) / b"x"

def test_typed_maps(bpf_program):
    from bpfdsl.compiler import compile_source
    prog = bpf_program(compile_source(SRC, "typed.bpfd").obj)
    prog.maps["blocked"].set("10.0.0.0/8", 1)          # a prefix, as `bpfdsl map update`
    assert prog.run(frame("10.1.2.3")).verdict == "XDP_DROP"
    assert prog.run(frame("192.0.2.1")).verdict == "XDP_PASS"
    assert prog.maps["blocked"].lookup("10.0.0.0/8") == 1
    assert prog.maps["blocked"].dump() == [("10.0.0.0/8", 1)]
    # a struct key with a be16 member: dict in, host-order numbers and addresses out
    assert prog.maps["seen"].lookup({"saddr": "10.1.2.3", "dport": 53}) == 7
    assert sorted(k["saddr"] for k, v in prog.maps["seen"].dump()) == ["10.1.2.3", "192.0.2.1"]
    assert prog.maps["seen"].lookup('{"saddr": "192.0.2.1", "dport": 53}') == 7  # JSON text
    prog.maps["seen"].set({"saddr": "198.51.100.1", "dport": 80}, "9")
    raw = prog.maps["seen"].get(bytes.fromhex("c6336401" "0050") + bytes(2))
    assert raw == (9).to_bytes(8, "little")  # network order in the key, as the kernel has it
    assert sum(prog.maps["hits"].lookup(0)) == 2     # per-CPU: one value per CPU
    assert prog.maps["hits"].total(0) == 2
'''


def _pytest(
    tmp_path: Path,
    files: dict[str, str],
    *args: str,
    env: dict | None = None,
    cwd=None,
    drop: tuple[str, ...] = (),
):
    for name, text in files.items():
        p = tmp_path / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(textwrap.dedent(text))
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # rootdir = tmp_path
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    for name in ("PYTEST_ADDOPTS", *drop):  # variables the inner session must not see
        e.pop(name, None)
    proc = subprocess.run(
        [
            *(sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider"),
            *("-p", "no:bpfdsl", "-p", plugin.__name__, "--rootdir", str(tmp_path), *args),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd or tmp_path,
        env=e,
    )
    return proc.returncode, proc.stdout + proc.stderr


def _skipped(out: str) -> dict[str, int]:
    n = _counts(out).get("skipped")
    return {"skipped": n} if n else {}


def _counts(out: str) -> dict[str, int]:
    return {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|skipped|deselected)", out)}


@pytest.mark.kernel
def test_sk_msg_kernel_half_runs_on_every_rerun(tmp_path) -> None:
    """Fixed ports, three runs in a session, the session twice: all run, none skip."""
    env = {plugin.REQUIRE_ENV: "1"}
    for _ in range(2):
        rc, out = _pytest(tmp_path, {"test_skmsg_fixed.py": SK_MSG_TEST}, env=env)
        assert rc == 0, out
        assert _counts(out) == {"passed": 6}, out  # 3 x (interp, kernel)


@pytest.mark.kernel
def test_kernel_half_that_cannot_run_fails_under_require(tmp_path) -> None:
    files = {"test_so.py": SOCK_OPS_TEST}
    rc, out = _pytest(tmp_path, files, env={plugin.REQUIRE_ENV: "1"})
    assert rc == 1 and _counts(out) == {"passed": 1, "failed": 1}, out
    assert "BPFDSL_REQUIRE_KERNEL=1 but the kernel half cannot run" in out
    assert "BPF_PROG_TEST_RUN refuses sock_ops programs" in out
    rc, out = _pytest(tmp_path, files, drop=(plugin.REQUIRE_ENV,))
    assert rc == 0 and _counts(out) == {"passed": 1, "skipped": 1}, out  # without: a skip


def test_program_paths_resolve_against_the_test_file(tmp_path) -> None:
    files = {
        "suite/test_paths.py": PATHS_TEST,
        "suite/here.bpfd": 'license "GPL"\nxdp fn d(ctx) { return XDP_DROP }\n',
        "progs/there.bpfd": 'license "GPL"\nxdp fn p(ctx) { return XDP_PASS }\n',
    }
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    rc, out = _pytest(tmp_path, files, str(tmp_path / "suite"), cwd=elsewhere)
    assert _counts(out).get("passed") == 2 and _counts(out).get("failed") == 1, out
    tried = f"tried {tmp_path}/suite/nowhere.bpfd, {tmp_path}/nowhere.bpfd"
    assert "bpf_program: no program file 'nowhere.bpfd'; " + tried in out, out
    assert "Traceback" not in out


def test_maps_take_and_give_typed_values(tmp_path) -> None:
    rc, out = _pytest(tmp_path, {"test_typed.py": TYPED_TEST}, env={plugin.REQUIRE_ENV: "0"})
    want = {"passed": 2} if plugin.kernel_unavailable_reason() is None else {"passed": 1}
    assert rc == 0 and _counts(out) == {**want, **_skipped(out)}, out


DROP_ALL = 'license "GPL"\nxdp fn drop_all(ctx) { return XDP_DROP }\n'


@pytest.mark.kernel
def test_a_run_after_the_kernel_load_is_closed_says_so() -> None:
    """A program run on the kernel after its load was closed (the fixture closes it when
    the test ends) raises ValueError naming the program, not AttributeError on None."""
    from bpfdsl.compiler import compile_source

    spec = plugin.load_spec(compile_source(DROP_ALL, "drop_all.bpfd").obj)
    prog = plugin.BpfProgram("kernel", spec, None, None)
    assert prog.run(bytes(64)).verdict == "XDP_DROP"
    prog.close()
    with pytest.raises(ValueError, match=r"program 'drop_all': no kernel load \(closed\)"):
        prog.run(bytes(64))
