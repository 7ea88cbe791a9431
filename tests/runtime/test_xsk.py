"""xskmap redirect (issue 4): a program redirecting to an empty xskmap slot falls back as
declared (XDP_PASS in the flags' low bits) -- with BPF_PROG_TEST_RUN and on a veth, where
the frames reach the stack; with an AF_XDP socket in the slot the same frames arrive on the
socket instead (bpfdsl.runtime.xsk.XskSocket, copy mode) and no longer reach the stack.

Program: the clang-19 reference tests/data/c/xdp_xsk_redirect.c
(``bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS)``).
"""

from __future__ import annotations

import pytest
from support.netns import veth_net
from support.redirect_testlib import VARIANTS, Loaded, build_c, load_variant, quiet_ipv6

from bpfdsl.abi.flags import XdpFlags
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.packets import udp_frame
from bpfdsl.runtime.xsk import XskSocket, xsk_map_delete, xsk_map_set

pytestmark = pytest.mark.kernel
N = 20


@pytest.fixture(scope="module")
def objs(tmp_path_factory):
    return build_c(tmp_path_factory.mktemp("xsk"))


@pytest.fixture(params=VARIANTS)
def xsk(objs, request) -> Loaded:
    with load_variant(request.param, objs, "xdp_xsk_redirect") as ld:
        yield ld


def test_xsk_empty_slot_falls_back_test_run(xsk: Loaded) -> None:
    frame = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="192.0.2.1",
        dst_ip="192.0.2.2",
        sport=1,
        dport=2,
    )
    res = S.prog_test_run(xsk.progs["xsk_redirect"], frame)
    assert res.retval == XdpAction.PASS
    assert res.data_out == frame


def test_xsk_lookup_form_empty_slot_passes(objs) -> None:
    """FIELD-BUGS B10: the lookup form (bpf_map_lookup_elem on the XSKMAP, then redirect)
    loads on this 6.x kernel too, and an empty map gives XDP_PASS."""
    frame = udp_frame(
        src_mac="02:00:00:00:00:01",
        dst_mac="02:00:00:00:00:02",
        src_ip="192.0.2.1",
        dst_ip="192.0.2.2",
        sport=1,
        dport=2,
    )
    with load_variant("clang+bpfdsl", objs, "xdp_xsk_lookup") as ld:
        assert S.prog_test_run(ld.progs["xsk_lookup"], frame).retval == XdpAction.PASS


def test_xsk_veth_fallback_then_socket(xsk: Loaded) -> None:
    """Empty slot: frames pass to the stack.  Socket in slot 0: frames arrive on the AF_XDP
    socket with their payload and the stack sees none.  Slot emptied: stack again."""
    with veth_net("xs") as net:
        quiet_ipv6(net.xdp_ns)
        quiet_ipv6(net.peer_ns)
        with net.in_xdp_ns():
            idx = netlink.ifindex(net.xdp_dev)
            netlink.xdp_set(idx, int(xsk.progs["xsk_redirect"]), XdpFlags.DRV_MODE, dev=net.xdp_dev)
        port = 7201
        with net.udp_receiver(port) as rx:
            assert net.send_udp(port, N, payload=b"fallback") == N
            assert rx.drain() == N  # empty slot: XDP_PASS as declared
            with net.in_xdp_ns():
                sock = XskSocket(idx, 0)
            with sock:
                xsk_map_set(xsk.maps["xsks"], 0, sock.fileno(), map_name="xsks")
                assert net.send_udp(port, N, payload=b"to-af-xdp") == N
                got: list[bytes] = []
                for _ in range(50):  # bounded: 50 x 0.1 s
                    got += sock.recv(timeout=0.1)
                    if len(got) >= N:
                        break
                assert len(got) == N
                assert all(f.endswith(b"to-af-xdp") for f in got)
                assert rx.drain(quiet=0.3) == 0
                assert xsk_map_delete(xsk.maps["xsks"], 0)
            assert net.send_udp(port, N, payload=b"again") == N
            assert rx.drain() == N


def test_xsk_map_set_refuses_non_xsk_fd(xsk: Loaded) -> None:
    import socket

    with (
        socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s,
        pytest.raises(DiagnosticError) as ei,
    ):
        xsk_map_set(xsk.maps["xsks"], 0, s.fileno(), map_name="xsks")
    assert "xskmap-update" in str(ei.value)
