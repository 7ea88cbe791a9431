"""The sk_msg policy program drops and limits as written (issue 5), on real TCP over the
loopback of a namespace made here: messages to port 7001 are dropped (sendmsg fails with
EACCES, the peer gets nothing), messages to port 7002 pass under an apply_bytes(1024)
verdict (the program runs once per 1024 bytes instead of once per message), other ports
pass with one verdict per message; detaching the program restores plain TCP for new sockets.

Program: the clang-19 reference tests/data/c/sk_msg_policy.c (defaults drop_port 7001,
limit_port 7002, limit_bytes 1024); sockets enter its sockhash from user space.
"""

from __future__ import annotations

import errno
import socket
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from support.redirect_testlib import (
    VARIANTS,
    Loaded,
    bpf_run_stats,
    build_c,
    load_object,
    load_variant,
    run_count,
)

from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink
from bpfdsl.runtime.sockmap import sk_msg_attach, sk_msg_detach, sockmap_add

pytestmark = pytest.mark.kernel
MSG, COUNT = 4096, 3


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("policy"))


@pytest.fixture(params=VARIANTS)
def policy(objs, request) -> Loaded:
    with load_variant(request.param, objs, "sk_msg_policy") as ld:
        yield ld


@pytest.fixture
def ns() -> Iterator[str]:
    with netlink.netns(f"skp{uuid.uuid4().hex[:6]}") as name:
        yield name


@contextmanager
def connection(ns: str, port: int) -> Iterator[tuple[socket.socket, socket.socket]]:
    with netlink.in_netns(ns):
        lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        lst.bind(("127.0.0.1", port))
        lst.listen(1)
        cli.settimeout(5)
        cli.connect(("127.0.0.1", port))
        srv, _ = lst.accept()
        with srv:
            srv.settimeout(0.5)
            yield cli, srv
    finally:
        cli.close()
        lst.close()


def exchange(cli: socket.socket, srv: socket.socket) -> tuple[int, bytes]:
    """Send COUNT messages of MSG bytes; (errno of the first failed send or 0, bytes received)."""
    data = bytes(range(256)) * (MSG // 256)
    err = 0
    try:
        for _ in range(COUNT):
            cli.sendall(data)
    except OSError as e:
        err = e.errno
    got = bytearray()
    while len(got) < MSG * COUNT:
        try:
            chunk = srv.recv(1 << 16)
        except TimeoutError:
            break
        if not chunk:
            break
        got += chunk
    return err, bytes(got)


@pytest.mark.parametrize(
    ("port", "want_errno", "want_bytes", "runs"),
    [
        (7001, errno.EACCES, 0, 1),  # dropped: the first message fails, nothing arrives
        (7002, 0, MSG * COUNT, COUNT * MSG // 1024),  # apply_bytes(1024): a verdict per KiB
        (7003, 0, MSG * COUNT, COUNT),  # no rule: one verdict per message
    ],
    ids=["drop", "limit", "pass"],
)
def test_policy_drops_and_limits(
    policy: Loaded, ns: str, port: int, want_errno: int, want_bytes: int, runs: int
) -> None:
    m, prog = policy.maps["policy_socks"], policy.progs["policy"]
    sk_msg_attach(m, prog, map_name="policy_socks", prog_name="policy")
    try:
        with bpf_run_stats(), connection(ns, port) as (cli, srv):
            sockmap_add(m, port, cli, map_name="policy_socks")
            r0 = run_count(prog)
            err, got = exchange(cli, srv)
            assert err == want_errno
            assert len(got) == want_bytes
            assert got == (bytes(range(256)) * (MSG // 256)) * (want_bytes // MSG)
            assert run_count(prog) - r0 == runs
    finally:
        sk_msg_detach(m, prog, map_name="policy_socks")


def test_policy_detach_restores_plain_tcp(policy: Loaded, ns: str) -> None:
    m, prog = policy.maps["policy_socks"], policy.progs["policy"]
    sk_msg_attach(m, prog, map_name="policy_socks")
    assert sk_msg_detach(m, prog, map_name="policy_socks")
    with bpf_run_stats(), connection(ns, 7001) as (cli, srv):
        sockmap_add(m, 1, cli, map_name="policy_socks")
        r0 = run_count(prog)
        err, got = exchange(cli, srv)
    assert (err, len(got)) == (0, MSG * COUNT)
    assert run_count(prog) == r0


def test_sk_msg_attach_refuses_wrong_map_and_program(policy: Loaded, objs) -> None:
    with load_object(objs["xdp_cpumap_steer_cfg"]) as other:
        with pytest.raises(DiagnosticError) as ei:
            sk_msg_attach(other.maps["cpus"], policy.progs["policy"], map_name="cpus")
        assert "wrong-map-kind" in str(ei.value)
        with pytest.raises(DiagnosticError) as ei:
            sk_msg_attach(policy.maps["policy_socks"], other.progs["steer"], prog_name="steer")
        assert "not-sk-msg" in str(ei.value)
