"""Traffic for the XDP benchmarks: BPF_PROG_TEST_RUN in live-frame mode, as xdp-trafficgen.

A two-instruction XDP program (``r0 = XDP_TX; exit``) is run by BPF_PROG_TEST_RUN with
``BPF_F_TEST_XDP_LIVE_FRAMES`` on one frame with ``repeat = N``: the kernel builds N frames
from a page pool and, for XDP_TX, sends each out of the interface named by the context's
``ingress_ifindex`` (net/bpf/test_run.c ``xdp_test_run_batch``: XDP_TX becomes a redirect
to that interface; Documentation/bpf/bpf_prog_run.rst, "live frame mode").  On a veth that
is the peer's XDP receive path, with no socket layer and no copy from user space, so the
generator is not what limits the rate (the receiving program and veth are).

The caller must be in the network namespace of the interface
(:func:`bpfdsl.kernel.netlink.in_netns`): the kernel resolves ``ingress_ifindex`` in the
calling thread's namespace.
"""

from __future__ import annotations

import time

from bpfdsl.abi import insn
from bpfdsl.abi.ctx import XDP_MD
from bpfdsl.abi.flags import BPF_F_TEST_XDP_LIVE_FRAMES
from bpfdsl.abi.prog_types import ProgramType, XdpAction
from bpfdsl.kernel import syscall

BATCH_MAX = 256  # net/bpf/test_run.c: batch_size above NAPI_POLL_WEIGHT * 4 is refused


class LiveFrameGenerator:
    """Sends ``frame`` (bytes from the Ethernet header on, 60..3520 bytes) out of the
    interface with index ``ifindex``.

    :meth:`send` sends ``count`` frames in batches of ``batch`` (1..256, kernel default 64)
    and returns the wall-clock seconds it took.  Close with :meth:`close` or use as a
    context manager.  Raises BpfError when the kernel refuses (EINVAL: ifindex not in
    this namespace).
    """

    def __init__(
        self, ifindex: int, frame: bytes, *, action: int = XdpAction.TX, batch: int = 64
    ) -> None:
        code = insn.encode([insn.mov64_imm(0, int(action)), insn.exit_()])
        self.fd, _log = syscall.prog_load(ProgramType.XDP, code, "GPL", name="bpfdsl_gen")
        self.frame = frame
        # struct xdp_md (bpfdsl.abi.ctx) as ctx_in: data_end = frame length, the interface
        self.ctx = XDP_MD.image(data_end=len(frame), ingress_ifindex=ifindex)
        self.batch = max(1, min(batch, BATCH_MAX))

    def send(self, count: int) -> float:
        """Send ``count`` frames (one BPF_PROG_TEST_RUN); wall-clock seconds taken."""
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

    def send_for(
        self, seconds: float, *, chunk: int = 50_000, max_calls: int = 100_000
    ) -> tuple[int, float]:
        """Send for about ``seconds`` (in calls of ``chunk`` frames, at most ``max_calls``);
        returns (frames sent, wall-clock seconds)."""
        sent, t0 = 0, time.perf_counter()
        end = t0 + seconds
        for _ in range(max_calls):
            self.send(chunk)
            sent += chunk
            if time.perf_counter() >= end:
                break
        return sent, time.perf_counter() - t0

    def close(self) -> None:
        self.fd.close()

    def __enter__(self) -> LiveFrameGenerator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
