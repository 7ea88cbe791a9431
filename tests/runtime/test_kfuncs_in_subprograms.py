"""Kfuncs in subprograms (issue 24): the rx_hash XDP metadata kfunc called from a
``noinline`` fn, a ``global`` fn (its context tagged ``arg:ctx``) and a ``loop`` callback
that reads the packet, in one device-bound program (tests/data/metadata/
rx_hash_subprograms.bpfd).  The kernel loads it device-bound on a veth, the checker's
processed count follows the kernel's, and on real traffic through the veth each
subprogram's call returns 0 and the frame's flow hash (drivers/net/veth.c
veth_xdp_rx_hash), the same in all three; the interpreter runs the same object as a driver
without hints (-EOPNOTSUPP, nothing written)."""

from __future__ import annotations

import re
import struct
import time

import pytest
from support.netns import veth_net
from support.paths import ROOT

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_file
from bpfdsl.interp import InterpCollection
from bpfdsl.kernel import netlink
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.attach import attach_xdp
from bpfdsl.runtime.loader import load_collection

PROG = ROOT / "tests" / "data" / "metadata" / "rx_hash_subprograms.bpfd"
EOPNOTSUPP = (-95) & 0xFFFFFFFF


def _u64(map_fd, key: int) -> int:
    raw = S.map_lookup(map_fd, struct.pack("<I", key), 8)
    return 0 if raw is None else struct.unpack("<Q", raw)[0]


def test_the_interpreter_runs_the_kfunc_in_each_subprogram() -> None:
    coll = InterpCollection(read_object(compile_file(PROG).obj))
    coll.programs["rx_hash_subprogs"].run_xdp(bytes(64))
    out = [
        int.from_bytes(
            bytes(coll.maps["rx_hash_out"].lookup(i.to_bytes(4, "little")).buf), "little"
        )
        for i in range(7)
    ]
    assert out == [EOPNOTSUPP, 0, EOPNOTSUPP, 0, EOPNOTSUPP, 0, 1]


@pytest.mark.kernel
def test_each_subprogram_reads_the_flow_hash_on_veth() -> None:
    spec = read_object(compile_file(PROG).obj)
    with veth_net("subprog") as net:
        with net.in_xdp_ns():
            ifindex = netlink.ifindex(net.xdp_dev)
            coll = load_collection(
                spec, pinning=False, ifindex=ifindex, log_level=1 | 4, log_size=1 << 22
            )
        with coll:
            prog = coll.programs["rx_hash_subprogs"]
            k_processed = int(re.search(r"processed (\d+) insns", prog.log).group(1))
            out = coll.maps["rx_hash_out"].fd
            with net.in_xdp_ns():
                att = attach_xdp(prog.fd, net.xdp_dev, mode="native")
            try:
                assert net.send_udp(9000, 5) == 5
                end = time.monotonic() + 5.0  # bounded: 5 s of 20 ms polls
                while _u64(out, 6) < 5 and time.monotonic() < end:
                    time.sleep(0.02)
                got = [_u64(out, i) for i in range(7)]
            finally:
                if att.link_fd is not None:
                    att.link_fd.close()
    assert got[6] >= 5
    assert (got[0], got[2], got[4]) == (0, 0, 0), got  # each call returned 0: veth's hint
    assert got[1] != 0 and got[1] == got[3] == got[5], got  # one frame, one flow hash
    (checked,) = check_object(spec).programs
    assert checked.ok, checked
    # the loop callback: the checker widens its changed state at once (docs: Loops with a
    # run-time bound), the kernel visits it again: never more than the kernel
    assert checked.insns_processed <= k_processed
