"""sk_msg + sock_ops on real TCP over loopback in a test cgroup (issue 5).

- Every byte arrives once and in order for message sizes 1 B .. 256 KiB (powers of two and
  not), with and without redirection.
- Redirection really happens: the program's counter grows and the client's TCP sent *no*
  data segment during the transfer (TCP_INFO tcpi_data_segs_out), while plain TCP does.
- Detaching restores plain TCP for new connections.

The TCP traffic runs in a child process (tests/support/tcp_stream_worker.py) moved into a
fresh child cgroup of the cgroup v2 hierarchy before it creates sockets (a socket belongs to
the cgroup of its creator), so sock_ops sees only the test's sockets.  Programs: the clang-19
reference tests/data/c/sk_msg_redirect_ingress.c (sockhash by 4-tuple, BPF_F_INGRESS).
"""

from __future__ import annotations

import pytest
from support.redirect_testlib import VARIANTS, Loaded, build_c, load_variant, percpu_sum, stream

from bpfdsl.runtime.cgroup import ChildCgroup, cgroup2_mount, sock_ops_attach, sock_ops_detach
from bpfdsl.runtime.sockmap import sk_msg_attach, sk_msg_detach, sockmap_count

pytestmark = pytest.mark.kernel
# size -> number of messages: 1 B .. 256 KiB, powers of two and not
SIZES = {1: 1500, 7: 1000, 64: 1000, 1000: 500, 4096: 200, 65537: 12, 262144: 4}


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("skmsg"))


@pytest.fixture(params=VARIANTS)
def redir(objs, request) -> Loaded:
    with load_variant(request.param, objs, "sk_msg_redirect_ingress") as ld:
        yield ld


@pytest.fixture
def cg():
    with ChildCgroup(cgroup2_mount(), prefix="bpfdsl-skmsg") as c:
        yield c


def test_plain_tcp_every_byte_in_order(cg: ChildCgroup) -> None:
    for r in stream(cg, SIZES):
        assert r["match"], f"size {r['size']}: received {r['received']} bytes, wrong or missing"
        assert r["data_segs_out"] > 0


def test_redirect_ingress_every_byte_skips_tcp(redir: Loaded, cg: ChildCgroup) -> None:
    track, prog = redir.progs["track"], redir.progs["redir"]
    sock_ops_attach(cg.path, track, prog_name="track")
    try:
        sk_msg_attach(redir.maps["socks"], prog, map_name="socks", prog_name="redir")
        results = stream(cg, SIZES)
        for r in results:
            assert r["match"], f"size {r['size']}: received {r['received']} bytes, not the stream"
            assert r["errno"] == 0
            assert r["data_segs_out"] == 0, f"size {r['size']}: data went through TCP"
        msgs = sum(SIZES.values())
        assert percpu_sum(redir.maps["redirects"], 0) >= msgs
        assert sockmap_count(redir.maps["socks"], map_name="socks") == 0  # closed sockets leave
        # detaching restores plain TCP for new connections
        assert sk_msg_detach(redir.maps["socks"], prog, map_name="socks", prog_name="redir")
        before = percpu_sum(redir.maps["redirects"], 0)
        for r in stream(cg, {1000: 50, 65537: 4}):
            assert r["match"] and r["data_segs_out"] > 0
        assert percpu_sum(redir.maps["redirects"], 0) == before
        assert not sk_msg_detach(redir.maps["socks"], prog, map_name="socks")
    finally:
        sk_msg_detach(redir.maps["socks"], prog, map_name="socks")
        sock_ops_detach(cg.path, track, prog_name="track")
    assert not sock_ops_detach(cg.path, track)


def test_sock_ops_fills_sockhash_only_in_cgroup(redir: Loaded, cg: ChildCgroup) -> None:
    """Outside the cgroup the same traffic is untouched: counter stays 0, TCP carries it."""
    sock_ops_attach(cg.path, redir.progs["track"], prog_name="track")
    sk_msg_attach(redir.maps["socks"], redir.progs["redir"], map_name="socks")
    try:
        for r in stream(None, {4096: 20}):
            assert r["match"] and r["data_segs_out"] > 0
        assert percpu_sum(redir.maps["redirects"], 0) == 0
    finally:
        sk_msg_detach(redir.maps["socks"], redir.progs["redir"], map_name="socks")
        sock_ops_detach(cg.path, redir.progs["track"])
