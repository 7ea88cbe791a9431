"""TCP stream check over loopback, run as a separate process (so tests can place it in a
cgroup before it creates sockets).  Standard library only.

For each message size: listener on 127.0.0.1 (ephemeral port), client connect, accept; a
receiver thread reads while the client sends ``count`` messages of ``size`` bytes (one
sendmsg each) from a seeded pseudo-random stream.  Prints one JSON object per size:
``{"size", "count", "match" (received == sent, byte for byte), "received",
"data_segs_out" (TCP data segments the client sent during the transfer, TCP_INFO),
"errno" (of a failed send, else 0), "ports"}``.

Usage: python3 tcp_stream_worker.py [--settle S] SIZE:COUNT ...
"""

from __future__ import annotations

import json
import random
import socket
import struct
import sys
import threading
import time

TCPI_DATA_SEGS_OUT = 156  # offsetof(struct tcp_info, tcpi_data_segs_out), linux/tcp.h
TCP_INFO_LEN = 256


def data_segs_out(s: socket.socket) -> int:
    info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    return struct.unpack_from("<I", info, TCPI_DATA_SEGS_OUT)[0]


def run(size: int, count: int, settle: float) -> dict:
    total = size * count
    payload = random.Random(size * 7919 + count).randbytes(total)
    lst = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lst.bind(("127.0.0.1", 0))
    lst.listen(1)
    cli = socket.create_connection(lst.getsockname(), timeout=10)
    srv, _ = lst.accept()
    time.sleep(settle)
    srv.settimeout(1.0)
    received = bytearray()

    def rx() -> None:
        deadline = time.monotonic() + 60
        while len(received) < total and time.monotonic() < deadline:
            try:
                chunk = srv.recv(min(1 << 20, total - len(received)))
            except TimeoutError:
                continue
            if not chunk:
                break
            received.extend(chunk)

    before = data_segs_out(cli)
    t = threading.Thread(target=rx, daemon=True)
    t.start()
    err = 0
    mv = memoryview(payload)
    try:
        for off in range(0, total, size):
            cli.sendall(mv[off : off + size])
    except OSError as e:
        err = e.errno or -1
    t.join(timeout=2.0 if err else 60)
    after = data_segs_out(cli)
    out = {
        "size": size,
        "count": count,
        "match": bytes(received) == payload,
        "received": len(received),
        "data_segs_out": after - before,
        "errno": err,
        "ports": [cli.getsockname()[1], srv.getsockname()[1]],
    }
    for s in (cli, srv, lst):
        s.close()
    return out


def main(argv: list[str]) -> int:
    settle = 0.0
    if argv[:1] == ["--settle"]:
        settle, argv = float(argv[1]), argv[2:]
    for spec in argv:
        size, count = (int(x) for x in spec.split(":"))
        print(json.dumps(run(size, count, settle)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
