"""``bpfdsl run --ctx`` for XDP: ingress_ifindex / rx_queue_index reach the program as the
kernel's BPF_PROG_TEST_RUN sets them from its struct xdp_md (ctx_in), on both engines; an
interface the kernel does not know is a diagnostic, not an errno."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from support.netns import unique

from bpfdsl.cli import main
from bpfdsl.kernel import netlink

SRC = """\
license "GPL"
struct seen_t { ifindex: u32, queue: u32 }
map seen: array<u32, seen_t>(max_entries: 1)
xdp fn f(ctx) {
    seen[0] = seen_t(ifindex: ctx.ingress_ifindex, queue: ctx.rx_queue_index)
    return XDP_PASS
}
"""
FRAME = (bytes.fromhex("0200000000020200000000010800") + bytes(50)).hex()


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.kernel
def test_ingress_ifindex_and_queue_reach_the_program_on_both_engines(tmp_path) -> None:
    """A veth with 4 rx queues in a test namespace: the kernel and the interpreter give
    the program the same ingress_ifindex and rx_queue_index (2)."""
    src = tmp_path / "seen.bpfd"
    src.write_text(SRC)
    ns = unique("rxq")
    with netlink.veth_pair(netns_a=ns, netns_b=ns, queues=4, up=False, prefix="rxq") as p:
        with netlink.in_netns(ns):  # the kernel resolves ingress_ifindex in this namespace
            idx = p.a.ifindex
            for engine in ("kernel", "interp"):
                rc, out, err = _run(
                    "run",
                    str(src),
                    "--hex",
                    FRAME,
                    "--engine",
                    engine,
                    "--json",
                    "--ctx",
                    f"ingress_ifindex={idx}",
                    "--ctx",
                    "rx_queue_index=2",
                )
                assert rc == 0, err
                (change,) = json.loads(out)["packets"][0]["map_changes"]
                assert change["new"] == {"ifindex": idx, "queue": 2}, engine
            rc, out, err = _run("run", str(src), "--hex", FRAME, "--engine", "kernel", "--json")
            (change,) = json.loads(out)["packets"][0]["map_changes"]
            assert change["new"] == {"ifindex": 1, "queue": 0}  # no ctx: loopback, queue 0


def test_interpreter_takes_any_interface(tmp_path) -> None:
    src = tmp_path / "seen.bpfd"
    src.write_text(SRC)
    ctx = ["--ctx", "ingress_ifindex=7", "--ctx", "rx_queue_index=3"]
    rc, out, err = _run("run", str(src), "--hex", FRAME, "--engine", "interp", "--json", *ctx)
    assert rc == 0, err
    (change,) = json.loads(out)["packets"][0]["map_changes"]
    assert change["new"] == {"ifindex": 7, "queue": 3}


@pytest.mark.kernel
def test_kernel_refusal_of_the_ctx_is_a_diagnostic(tmp_path) -> None:
    src = tmp_path / "seen.bpfd"
    src.write_text(SRC)
    for ctx, text in (
        (["ingress_ifindex=999999"], "no interface with ifindex 999999"),
        (["ingress_ifindex=1", "rx_queue_index=9"], "interface 1 has no rx queue 9"),
        (["rx_queue_index=2"], "rx_queue_index 2 needs an ingress_ifindex"),
    ):
        args = [a for c in ctx for a in ("--ctx", c)]
        rc, _, err = _run("run", str(src), "--hex", FRAME, "--engine", "kernel", *args)
        assert rc == 2 and "error[bad-ctx]" in err and text in err, err
