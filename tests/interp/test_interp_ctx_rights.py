"""The interpreter's context regions take the accesses bpfdsl.abi.ctx allows (the kernel's
``*_is_valid_access``) and fault on the others."""

from __future__ import annotations

import pytest

from bpfdsl.abi.ctx import BPF_SOCK_OPS, SK_MSG_MD, XDP_MD, valid_access
from bpfdsl.abi.prog_types import AttachType
from bpfdsl.interp.ctx import SkMsgContext, SockOpsContext, XdpContext
from bpfdsl.interp.memory import Fault, Ptr


def _ok(fn, *args) -> bool:
    try:
        fn(*args)
        return True
    except Fault:
        return False


def test_sock_ops_stores_only_reply_and_sk_txhash() -> None:
    """sock_ops_is_valid_access: BPF_WRITE at offsetof(reply) and offsetof(sk_txhash) only,
    4 bytes: replylong[1..3] (bytes 8..20) and unaligned stores are refused."""
    c = SockOpsContext(4)
    p = Ptr(c, 0)
    for off in range(BPF_SOCK_OPS.size):
        for size in (1, 2, 4, 8):
            want = valid_access(BPF_SOCK_OPS, off, size, True, None) is not None
            assert _ok(c.store, p, off, size, 5) is want, (off, size)
    c.store(p, 4, 4, 7)
    assert c.reply == 7
    assert not _ok(c.store, p, 8, 4, 7)


@pytest.mark.parametrize("attach", [AttachType.XDP, AttachType.XDP_DEVMAP])
def test_xdp_loads_follow_the_table(attach: AttachType) -> None:
    c = XdpContext(b"\0" * 64, attach=attach)
    for off in range(-4, XDP_MD.size + 4):
        for size in (1, 2, 4, 8):
            want = valid_access(XDP_MD, off, size, False, attach) is not None
            assert _ok(c.load, Ptr(c, 0), off, size) is want, (off, size)


def test_sk_msg_loads_follow_the_table() -> None:
    c = SkMsgContext(b"hello")
    for off in range(-4, SK_MSG_MD.size + 4):
        for size in (1, 2, 4, 8):
            want = valid_access(SK_MSG_MD, off, size, False, None) is not None
            assert _ok(c.load, Ptr(c, 0), off, size) is want, (off, size)
    assert c.load(Ptr(c, 0), SK_MSG_MD["size"].off, 4) == 5
