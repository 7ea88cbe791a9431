"""XDP_TX out of a veth whose peer has no XDP program (and GRO off) loses every frame:
veth_xdp_rcv -> veth_xdp_tx -> veth_xdp_xmit hands the frame to the peer's NAPI, which
runs only while the peer has an XDP program or GRO (drivers/net/veth.c).  ``bpfdsl
attach`` of a program that can return XDP_TX says so (warning ``xdp-tx-drops``, the rule
of :func:`bpfdsl.kernel.netlink.xdp_xmit_problem` that ``devmap set`` uses too); the test
shows on the kernel that the frames really are lost, that the remedy makes them arrive,
and that generic mode (which transmits with the stack) needs none.

Topology (made here, removed on exit): namespaces A and B joined by veth a <-> b; the
reflect program (progs/xdp_reflect.bpfd: swaps addresses, XDP_TX) on a; frames sent from b.
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import uuid
from contextlib import contextmanager

import pytest
from support.netns import bpffs_dir, capture, send_frames
from support.paths import ROOT

from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.insn import decode
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.compiler import compile_source
from bpfdsl.kernel import netlink
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.verdicts import may_return, object_helper, possible_returns, xdp_redirect_result
from bpfdsl.runtime.packets import udp_frame

REFLECT = ROOT / "progs" / "xdp_reflect.bpfd"
PASS = ROOT / "progs" / "xdp_pass.bpfd"
N = 20


def bpfdsl(*args: str, ns: str | None = None) -> subprocess.CompletedProcess:
    pre = ["nsenter", f"--net={netlink.NETNS_RUN_DIR}/{ns}"] if ns else []
    return subprocess.run(
        [*pre, sys.executable, "-m", "bpfdsl", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


@contextmanager
def pair():
    tag = uuid.uuid4().hex[:6]
    a, b = f"txa{tag}", f"txb{tag}"  # each end named as its namespace
    with netlink.veth_pair(a, b, netns_a=a, netns_b=b, disable_ipv6=True) as p:
        yield a, b, {a: p.a.mac, b: p.b.mac}


def _reflected(a: str, b: str, macs: dict[str, str]) -> int:
    """Frames sent from b to a that come back to b (reflected by XDP_TX on a)."""
    marker = b"XDPTX-" + uuid.uuid4().bytes[:8]
    frames = [
        udp_frame(
            src_mac=macs[b],
            dst_mac=macs[a],
            src_ip="192.0.2.2",
            dst_ip="192.0.2.1",
            sport=5000,
            dport=6000,
            payload=marker + struct.pack("!I", i),
            ident=i,
        )
        for i in range(N)
    ]
    with capture(b, b) as cap:
        assert send_frames(b, b, frames) == N
        return sum(marker in f for f in cap.frames())


@pytest.mark.kernel
def test_xdp_tx_out_of_a_veth_without_peer_xdp_warns_and_really_drops() -> None:
    pin, pass_pin = bpffs_dir("bpfdsl_tx_"), bpffs_dir("bpfdsl_txp_")
    with pair() as (a, b, macs):
        try:
            p = bpfdsl("--json", "attach", str(REFLECT), "--dev", a, "--pin-dir", pin, ns=a)
            assert p.returncode == 0, p.stderr
            (w,) = json.loads(p.stdout)["warnings"]
            assert w.startswith("the program can return XDP_TX: ")
            assert f"{a} is a veth and its peer {b} (network namespace {b})" in w
            assert "has no XDP program" in w and f"returns XDP_TX for (sent back out of {a})" in w
            assert "warning[xdp-tx-drops]" in p.stderr
            assert f"nsenter --net=/run/netns/{b} bpfdsl attach progs/xdp_pass.bpfd" in p.stderr
            assert _reflected(a, b, macs) == 0  # the kernel: every XDP_TX frame is lost
            # show: the attached program on that veth, the same warning
            p = bpfdsl("--json", "show", ns=a)
            assert p.returncode == 0, p.stderr
            (att,) = [x for x in json.loads(p.stdout)["attachments"] if x["dev"] == a]
            assert att["warnings"] == [w]
            p = bpfdsl("show", ns=a)
            assert f"    warning: {w}" in p.stdout
            # run: a frame that gets XDP_TX, for that device
            frame = udp_frame(src_mac=macs[b], dst_mac=macs[a], src_ip="192.0.2.2",
                              dst_ip="192.0.2.1", sport=5000, dport=6000, payload=b"x" * 8)  # fmt: skip
            p = bpfdsl("run", str(REFLECT), "--hex", frame.hex(), "--dev", a,
                       "--engine", "kernel", ns=a)  # fmt: skip
            assert p.returncode == 0 and "XDP_TX" in p.stdout, p.stderr
            assert (
                f"warning: a frame got XDP_TX: attached to {a} in native mode, {a} is a veth"
                in (p.stderr)
            )
            # the remedy the warning names: an XDP program on the peer
            p = bpfdsl("attach", str(PASS), "--dev", b, "--pin-dir", pass_pin, ns=b)
            assert p.returncode == 0, p.stderr
            assert _reflected(a, b, macs) == N
            p = bpfdsl("--json", "attach", pin, "--prog", "reflect", "--dev", a, ns=a)
            assert p.returncode == 0 and json.loads(p.stdout)["warnings"] == [], p.stderr
            p = bpfdsl("--json", "show", ns=a)
            (att,) = [x for x in json.loads(p.stdout)["attachments"] if x["dev"] == a]
            assert att["warnings"] == []
            # generic mode sends XDP_TX frames with the stack: no peer program needed
            bpfdsl("detach", "--dev", b, ns=b)
            bpfdsl("detach", "--dev", a, ns=a)  # removes the pins the attach made too
            p = bpfdsl("--json", "attach", str(REFLECT), "--dev", a, "--pin-dir", pin,
                       "--mode", "generic", ns=a)  # fmt: skip
            assert p.returncode == 0 and json.loads(p.stdout)["warnings"] == [], p.stderr
            assert _reflected(a, b, macs) == N
        finally:
            bpfdsl("detach", "--dev", b, ns=b)
            bpfdsl("detach", "--dev", a, ns=a)
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)
            shutil.rmtree(pass_pin, ignore_errors=True)


@pytest.mark.kernel
def test_a_program_that_never_returns_xdp_tx_gets_no_warning() -> None:
    pin = bpffs_dir("bpfdsl_txn_")
    with pair() as (a, _b, _macs):
        try:
            p = bpfdsl("--json", "attach", str(PASS), "--dev", a, "--pin-dir", pin, ns=a)
            assert p.returncode == 0 and json.loads(p.stdout)["warnings"] == [], p.stderr
        finally:
            bpfdsl("detach", "--dev", a, ns=a)
            shutil.rmtree(pin, ignore_errors=True)


def _insns(src: str):
    spec = read_object(compile_source('license "GPL"\n' + src, "t.bpfd").obj)
    (prog,) = spec.programs.values()
    return prog.insns


def test_possible_returns_follows_every_path_to_exit() -> None:
    tx = "xdp fn f(ctx) {\n    if ctx.len > 60 { return XDP_TX }\n    return XDP_PASS\n}\n"
    assert possible_returns(_insns(tx)) == {2, 3}
    no_tx = "xdp fn f(ctx) {\n    if ctx.len > 60 { return XDP_DROP }\n    return XDP_PASS\n}\n"
    assert possible_returns(_insns(no_tx)) == {1, 2}
    assert not may_return(_insns(no_tx), XdpAction.TX)
    # a helper's result with the helper not told: unknown, so it may be XDP_TX
    dyn = (
        "map tx: devmap(max_entries: 4)\n"
        "xdp fn f(ctx) {\n    return redirect_map(tx, 0, XDP_PASS)\n}\n"
    )
    assert possible_returns(_insns(dyn)) is None and may_return(_insns(dyn), XdpAction.TX)
    assert possible_returns(decode(b"")) == frozenset()


def _redirect(fallback: str, name: str = "f") -> str:
    return (
        "map tx: devmap(max_entries: 4)\n"
        f"xdp fn {name}(ctx) {{\n    if ctx.len > 60 {{ return XDP_DROP }}\n"
        f"    return redirect_map(tx, 0, {fallback})\n}}\n"
    )


def test_redirect_map_returns_xdp_redirect_or_its_fallback_action() -> None:
    # __bpf_xdp_redirect_map (include/linux/filter.h): XDP_REDIRECT, or flags & 3 on a miss
    got = possible_returns(_insns(_redirect("XDP_PASS")), object_helper)
    assert got == {XdpAction.DROP, XdpAction.PASS, XdpAction.REDIRECT}
    assert not may_return(_insns(_redirect("XDP_PASS")), XdpAction.TX, object_helper)
    got = possible_returns(_insns(_redirect("XDP_TX")), object_helper)
    assert got == {XdpAction.DROP, XdpAction.TX, XdpAction.REDIRECT}
    # bpf_redirect from XDP (net/core/filter.c bpf_xdp_redirect): flags 0 -> XDP_REDIRECT
    red = "xdp fn f(ctx) {\n    return redirect(1, 0)\n}\n"
    assert possible_returns(_insns(red), object_helper) == {XdpAction.REDIRECT}
    # flags not known: any fallback action; a bit above the action mask: XDP_ABORTED too
    assert xdp_redirect_result(HELPERS["redirect_map"].id, None) == set(XdpAction)
    got = xdp_redirect_result(HELPERS["redirect_map"].id, frozenset({XdpAction.PASS | 8}))
    assert got == {XdpAction.ABORTED, XdpAction.PASS, XdpAction.REDIRECT}
    assert xdp_redirect_result(HELPERS["redirect"].id, frozenset({1})) == {XdpAction.ABORTED}
    assert xdp_redirect_result(HELPERS["map_lookup_elem"].id, frozenset({0})) is None


def _attach_warnings(src: str, prog: str) -> list[str]:
    """Load ``src``, attach its ``prog`` (native) to a fresh veth whose peer has no XDP
    program, and return the attach's warnings (JSON)."""
    pin = bpffs_dir("bpfdsl_xdptx_")
    with pair() as (a, _b, _macs):
        obj = f"/tmp/bpfdsl_xdptx_{a}.bpfd"
        with open(obj, "w") as f:
            f.write(src)
        try:
            p = bpfdsl("--json", "load", obj, "--pin-dir", pin, ns=a)
            assert p.returncode == 0, p.stderr
            p = bpfdsl("--json", "attach", pin, "--prog", prog, "--dev", a, ns=a)
            assert p.returncode == 0, p.stderr
            return list(json.loads(p.stdout)["warnings"])
        finally:
            bpfdsl("detach", "--dev", a, ns=a)
            bpfdsl("unload", pin)
            shutil.rmtree(pin, ignore_errors=True)
            os.unlink(obj)


TUTORIAL = (ROOT / "docs" / "tutorial.md").read_text()
_AT = TUTORIAL.index("// steer.bpfd")
STEER = TUTORIAL[_AT : TUTORIAL.index("```", _AT)]  # docs/tutorial.md section 8


@pytest.mark.kernel
def test_the_tutorials_steer_program_gets_no_xdp_tx_warning_on_a_veth() -> None:
    # redirect_map(cpu_map, cpu, XDP_PASS): XDP_REDIRECT or XDP_PASS, never XDP_TX
    assert _attach_warnings(STEER, "steer") == []


@pytest.mark.kernel
def test_redirect_map_with_fallback_xdp_tx_gets_the_warning_on_a_veth() -> None:
    (w,) = _attach_warnings('license "GPL"\n' + _redirect("XDP_TX", "g"), "g")
    assert w.startswith("the program can return XDP_TX: ") and "is a veth" in w
