"""Traffic generator for the XDP benchmarks: BPF_PROG_RUN in live-frame mode.

A two-instruction XDP program (``r0 = XDP_TX; exit``) is run by BPF_PROG_TEST_RUN with
``BPF_F_TEST_XDP_LIVE_FRAMES`` on one frame with ``repeat = N``: the kernel builds N frames
from a page pool and, for XDP_TX, transmits each out of the interface named by the context's
``ingress_ifindex`` (kernel Documentation/bpf/bpf_prog_run.rst, "live frame mode").  On a veth
that means straight into the peer's XDP receive path, without the socket layer.  Needed
instead of xdp-trafficgen, which fails to load on this kernel.

The caller must be in the network namespace of the interface (``bpfdsl.kernel.netlink.in_netns``):
the kernel resolves ``ingress_ifindex`` in the calling thread's namespace.
"""

from __future__ import annotations

import struct
import time

import benchlib as B  # puts the working tree on sys.path

from bpfdsl.abi import insn
from bpfdsl.abi.uapi import BPF_F_TEST_XDP_LIVE_FRAMES, ProgramType, XdpAction
from bpfdsl.kernel import syscall

XDP_MD = struct.Struct("<6I")  # struct xdp_md: data, data_end, data_meta, ingress_ifindex,
# rx_queue_index, egress_ifindex (include/uapi/linux/bpf.h), all u32


class LiveFrameGenerator:
    """Sends ``frame`` (bytes from the Ethernet header) out of interface ``ifindex``.

    ``send(count)`` runs the generator program ``count`` times (= ``count`` frames) in
    batches of ``batch`` (1..256, kernel default 64) and returns the wall-clock seconds taken.
    Close with ``close()`` or use as a context manager.
    """

    def __init__(self, ifindex: int, frame: bytes, *, action: int = XdpAction.TX, batch: int = 64):
        code = insn.encode([insn.mov64_imm(0, int(action)), insn.exit_()])
        self.fd, _log = syscall.prog_load(ProgramType.XDP, code, "GPL", name="bpfdsl_gen")
        self.frame = frame
        self.ctx = XDP_MD.pack(0, len(frame), 0, ifindex, 0, 0)
        self.batch = batch

    def send(self, count: int) -> float:
        t0 = time.perf_counter()
        syscall.prog_test_run(
            int(self.fd),
            self.frame,
            repeat=count,
            ctx=self.ctx,
            flags=BPF_F_TEST_XDP_LIVE_FRAMES,
            batch_size=self.batch,
        )
        return time.perf_counter() - t0

    def close(self) -> None:
        self.fd.close()

    def __enter__(self) -> LiveFrameGenerator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def link_stats(dev: str) -> dict:
    """The device's 64-bit counters (``ip -s -j link``: rx/tx packets, bytes, dropped...).

    Read in the calling thread's namespace (a child process inherits it); /sys/class/net is
    not used because sysfs shows the namespace it was mounted in.  veth counts each frame its
    XDP program processed in ``rx.packets``, whatever the verdict."""
    import json

    out = B.run(["ip", "-s", "-j", "link", "show", "dev", dev]).stdout
    return json.loads(out)[0]["stats64"]
