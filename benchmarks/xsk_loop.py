"""bpfdsl's side of benchmarks/xsk_bench.py: the AF_XDP socket loop of benchmarks/c/xsk_loop.c with
``bpfdsl.runtime.xsk.XskSocket`` (its burst API through ``rx_drop`` / ``l2fwd``), a process
of its own as the C loop is, with the same arguments and stdin/stdout protocol:

    python3 benchmarks/xsk_loop.py MODE IFNAME QUEUE MAP_ID FRAMES BATCH

It puts its socket into slot QUEUE of the xskmap with id MAP_ID, prints ``ready``, then
answers each line read on stdin with "rx tx ring_full fill_empty" (totals so far); EOF ends.
"""

from __future__ import annotations

import socket
import sys
import threading

from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.xsk import XskSocket, xsk_map_set


def main(argv: list[str]) -> int:
    mode, ifname, queue, map_id, frames, batch = argv
    sock = XskSocket(
        socket.if_nametoindex(ifname), int(queue), frames=int(frames), tx=mode == "l2fwd"
    )
    with sock, S.map_get_fd_by_id(int(map_id)) as map_fd:
        xsk_map_set(map_fd, int(queue), sock.fileno(), map_name="xsks")
        step = sock.l2fwd if mode == "l2fwd" else sock.rx_drop
        n, halt, limit = [0], threading.Event(), int(batch)

        def loop() -> None:
            while not halt.is_set():
                got = step(limit)
                n[0] += got
                if not got:
                    sock.wait(0.001)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        print("ready", flush=True)
        for _line in sys.stdin:
            s = sock.statistics()
            tx = n[0] if mode == "l2fwd" else 0
            print(n[0], tx, s["rx_ring_full"], s["rx_fill_ring_empty_descs"], flush=True)
        halt.set()
        t.join(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
