"""xskmap entries and a minimal AF_XDP socket (kernel side).

:func:`xsk_map_set` puts an AF_XDP socket fd into an xskmap slot (u32 key = rx queue index,
u32 value = socket fd on update; kernel/bpf/xskmap.c).  :class:`XskSocket` is the smallest
useful AF_XDP socket, after Documentation/networking/af_xdp.rst and libxdp's xsk.c: a UMEM
of ``frames`` x ``frame_size`` bytes (anonymous mmap), fill + completion rings, an RX ring
(and with ``tx`` a TX ring), bound to (ifindex, queue) in copy mode (works on veth).
Layouts are linux/if_xdp.h (``struct xdp_umem_reg``, ``xdp_mmap_offsets``,
``sockaddr_xdp``, ``xdp_desc``, ``xdp_statistics``).  :meth:`XskSocket.recv` copies frames
out; :meth:`XskSocket.rx_drop` and :meth:`XskSocket.l2fwd` are the batch loops of the
kernel's xdpsock sample (rxdrop, l2fwd) that ``bpfdsl bench xsk`` measures.
The socket and the interface must be in the calling thread's network namespace.
"""

from __future__ import annotations

import ctypes
import errno
import mmap
import select
import socket
import struct
import time

from bpfdsl.abi.uapi import MapType
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import libc
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import require_map

AF_XDP = 44  # linux/socket.h
SOL_XDP = 283
XDP_MMAP_OFFSETS, XDP_RX_RING, XDP_TX_RING, XDP_UMEM_REG = 1, 2, 3, 4
XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_STATISTICS = 5, 6, 7
XDP_COPY = 1 << 1  # sxdp_flags: force copy mode
XDP_PGOFF_RX_RING, XDP_PGOFF_TX_RING = 0, 0x80000000
XDP_UMEM_PGOFF_FILL_RING, XDP_UMEM_PGOFF_COMPLETION_RING = 0x100000000, 0x180000000
_STATS: tuple[str, ...] = ("rx_dropped", "rx_invalid_descs", "tx_invalid_descs", "rx_ring_full")
_STATS += ("rx_fill_ring_empty_descs", "tx_ring_empty_descs")  # struct xdp_statistics, u64s
_RING_OFF = struct.Struct("<4Q")  # struct xdp_ring_offset {producer, consumer, desc, flags}
_DESC = struct.Struct("<QII")  # struct xdp_desc {addr, len, options}


def xsk_map_set(map_fd: int | S.Fd, queue: int, xsk_fd: int, *, map_name: str = "xskmap") -> None:
    """Put AF_XDP socket ``xsk_fd`` into slot ``queue`` (the rx queue index the XDP program
    uses as key).  The socket must already be bound (bind(2) to an ifindex/queue); an
    unbound socket is refused by the kernel (EOPNOTSUPP) and reported as such.
    """
    info = require_map(map_fd, (MapType.XSKMAP,), map_name)
    if not 0 <= queue < info.max_entries:
        raise DiagnosticError(
            error(
                "xskmap-key",
                f"xskmap '{map_name}': queue {queue} is outside 0..{info.max_entries - 1}",
            )
        )
    try:
        S.map_update(map_fd, struct.pack("<I", queue), struct.pack("<I", int(xsk_fd)))
    except S.BpfPermissionError:
        raise
    except S.BpfError as e:
        raise DiagnosticError(
            error(
                "xskmap-update",
                f"xskmap '{map_name}' queue {queue}: {e}",
                hint="the fd must be an AF_XDP socket bound to an interface queue",
            )
        ) from None


def xsk_map_delete(map_fd: int, queue: int, *, map_name: str = "xskmap") -> bool:
    """Empty slot ``queue``; redirects to it then take the program's fallback action."""
    require_map(map_fd, (MapType.XSKMAP,), map_name)
    return S.map_delete(map_fd, struct.pack("<I", queue))


class XskSocket:
    """An AF_XDP socket receiving the frames XDP redirects to (ifindex, queue), copy mode.

    ``frames`` (power of two) UMEM chunks of ``frame_size`` bytes (2048 or 4096); all of them
    are offered on the fill ring at start and re-offered after each :meth:`recv`.  With
    ``tx`` the socket also has a TX ring (and sends out of the same interface).
    Use as a context manager; ``fileno()`` is what :func:`xsk_map_set` takes.
    Raises OSError from the socket calls (EPERM without CAP_NET_RAW, EINVAL on bad sizes).
    """

    def __init__(
        self,
        ifindex: int,
        queue: int = 0,
        *,
        frames: int = 64,
        frame_size: int = 2048,
        tx: bool = False,
    ):
        if frames & (frames - 1):
            raise ValueError("frames must be a power of two")
        self.ifindex, self.queue, self.frames, self.frame_size = ifindex, queue, frames, frame_size
        self.tx = tx
        self._maps: list[mmap.mmap] = []
        self._views: list[memoryview] = []
        self.sock = socket.socket(AF_XDP, socket.SOCK_RAW, 0)
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self) -> None:
        n, fs = self.frames, self.frame_size
        self.umem = mmap.mmap(-1, n * fs, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self._umem_ptr = ctypes.c_char.from_buffer(self.umem)
        reg = struct.pack("<QQIIII", ctypes.addressof(self._umem_ptr), n * fs, fs, 0, 0, 0)
        self.sock.setsockopt(SOL_XDP, XDP_UMEM_REG, reg)
        rings = [XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING]
        for opt in rings + ([XDP_TX_RING] if self.tx else []):
            self.sock.setsockopt(SOL_XDP, opt, struct.pack("<I", n))
        offs = self.sock.getsockopt(SOL_XDP, XDP_MMAP_OFFSETS, 4 * _RING_OFF.size)
        rx, tx, fr, cr = (_RING_OFF.unpack_from(offs, i * _RING_OFF.size) for i in range(4))
        self._rx = self._ring(rx, n * _DESC.size, XDP_PGOFF_RX_RING)
        self._fr = self._ring(fr, n * 8, XDP_UMEM_PGOFF_FILL_RING)
        self._rx_off, self._fr_off = rx, fr
        # u64 views of the descriptor arrays for the batch loops (rx/tx: addr, len|options)
        self._rxq = self._view(self._rx, rx[2], n * _DESC.size)
        self._frq = self._view(self._fr, fr[2], n * 8)
        if self.tx:
            self._tx = self._ring(tx, n * _DESC.size, XDP_PGOFF_TX_RING)
            self._cr = self._ring(cr, n * 8, XDP_UMEM_PGOFF_COMPLETION_RING)
            self._tx_off, self._cr_off = tx, cr
            self._txq = self._view(self._tx, tx[2], n * _DESC.size)
            self._crq = self._view(self._cr, cr[2], n * 8)
        self._fill(range(n))
        addr = struct.pack("<HHIII", AF_XDP, XDP_COPY, self.ifindex, self.queue, 0)
        libc.bind(
            self.sock.fileno(),
            addr,
            what=f"bind AF_XDP socket to ifindex {self.ifindex} queue {self.queue}",
        )

    def _ring(self, off: tuple[int, ...], desc_bytes: int, pgoff: int) -> mmap.mmap:
        m = mmap.mmap(
            self.sock.fileno(),
            off[2] + desc_bytes,
            flags=mmap.MAP_SHARED,
            prot=mmap.PROT_READ | mmap.PROT_WRITE,
            offset=pgoff,
        )
        self._maps.append(m)
        return m

    def _view(self, m: mmap.mmap, off: int, size: int) -> memoryview:
        v = memoryview(m)[off : off + size].cast("Q")
        self._views.append(v)
        return v

    def _fill(self, chunks) -> None:
        prod_off, _cons, desc, _fl = self._fr_off
        prod = struct.unpack_from("<I", self._fr, prod_off)[0]
        for c in chunks:
            struct.pack_into(
                "<Q", self._fr, desc + ((prod & (self.frames - 1)) * 8), c * self.frame_size
            )
            prod += 1
        struct.pack_into("<I", self._fr, prod_off, prod & 0xFFFFFFFF)

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self, timeout: float = 1.0, max_frames: int = 64) -> list[bytes]:
        """Frames received so far (waits up to ``timeout`` seconds for the first one)."""
        return [f for _meta, f in self.recv_meta(0, timeout, max_frames)]

    def recv_meta(
        self, meta_len: int, timeout: float = 1.0, max_frames: int = 64
    ) -> list[tuple[bytes, bytes]]:
        """(metadata, frame) of the frames received so far: the ``meta_len`` bytes just
        before each frame in its UMEM chunk, where the kernel copies what the XDP program
        reserved with bpf_xdp_adjust_meta (net/xdp/xsk.c xsk_copy_xdp: the metadata goes
        in front of ``desc.addr``, inside the chunk's XDP_PACKET_HEADROOM of 256 bytes;
        the descriptor does not say how long it is, the program and reader agree on it).
        """
        if not 0 <= meta_len <= 255:  # type_max(skb_shared_info.meta_len), include/net/xdp.h
            raise ValueError("meta_len must be 0..255 bytes")
        prod_off, cons_off, desc, _fl = self._rx_off
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        out: list[tuple[bytes, bytes]] = []
        while True:
            prod = struct.unpack_from("<I", self._rx, prod_off)[0]
            cons = struct.unpack_from("<I", self._rx, cons_off)[0]
            if prod != cons:
                break
            left = deadline - time.monotonic()
            if left <= 0:
                return out
            poller.poll(max(1, int(min(left, 0.1) * 1000)))
        chunks = []
        while cons != prod and len(out) < max_frames:
            addr, length, _opt = _DESC.unpack_from(self._rx, desc + (cons & (self.frames - 1)) * 16)
            meta = bytes(self.umem[addr - meta_len : addr]) if meta_len else b""
            out.append((meta, bytes(self.umem[addr : addr + length])))
            chunks.append(addr // self.frame_size)
            cons = (cons + 1) & 0xFFFFFFFF
        struct.pack_into("<I", self._rx, cons_off, cons)
        self._fill(chunks)
        return out

    # ---- batch loops (xdpsock's rxdrop and l2fwd), no copy out of the UMEM ----

    def _u32(self, m: mmap.mmap, off: int) -> int:
        return struct.unpack_from("<I", m, off)[0]

    def _take_rx(self, limit: int) -> list[tuple[int, int]]:
        """(addr, len) of up to ``limit`` received descriptors; consumes them."""
        prod_off, cons_off, _desc, _fl = self._rx_off
        prod, cons = self._u32(self._rx, prod_off), self._u32(self._rx, cons_off)
        n = min((prod - cons) & 0xFFFFFFFF, limit)
        mask, q, out = self.frames - 1, self._rxq, []
        for i in range(n):
            j = ((cons + i) & mask) * 2
            out.append((q[j], q[j + 1] & 0xFFFFFFFF))
        if n:
            struct.pack_into("<I", self._rx, cons_off, (cons + n) & 0xFFFFFFFF)
        return out

    def _refill(self, addrs: list[int]) -> None:
        """Offer UMEM chunks at ``addrs`` (byte offsets) on the fill ring again."""
        prod_off, _cons, _desc, _fl = self._fr_off
        prod, mask, q = self._u32(self._fr, prod_off), self.frames - 1, self._frq
        for i, a in enumerate(addrs):
            q[(prod + i) & mask] = a - a % self.frame_size
        struct.pack_into("<I", self._fr, prod_off, (prod + len(addrs)) & 0xFFFFFFFF)

    def rx_drop(self, limit: int = 4096) -> int:
        """Receive up to ``limit`` frames and give their chunks straight back to the fill
        ring (xdpsock ``rxdrop``); returns how many.  Does not wait."""
        got = self._take_rx(limit)
        if got:
            self._refill([a for a, _n in got])
        return len(got)

    def l2fwd(self, limit: int = 4096) -> int:
        """Send received frames back out of the interface with source and destination
        MAC addresses swapped (xdpsock ``l2fwd``), reap completed sends onto the fill ring;
        returns how many frames were put on the TX ring.  Needs ``tx``; does not wait
        (the send is kicked with a non-blocking ``sendto``, copy mode's transmit path)."""
        got = self._take_rx(limit)
        u = self.umem
        for a, _n in got:
            dst = u[a : a + 6]
            u[a : a + 6] = u[a + 6 : a + 12]
            u[a + 6 : a + 12] = dst
        if got:
            prod_off, _cons, _desc, _fl = self._tx_off
            prod, mask, q = self._u32(self._tx, prod_off), self.frames - 1, self._txq
            for i, (a, n) in enumerate(got):
                j = ((prod + i) & mask) * 2
                q[j], q[j + 1] = a, n
            struct.pack_into("<I", self._tx, prod_off, (prod + len(got)) & 0xFFFFFFFF)
        self._kick()
        self._reap()
        return len(got)

    def _kick(self, tries: int = 64) -> None:
        """sendto(fd, NULL, 0, MSG_DONTWAIT) until the kernel took every TX descriptor
        (copy mode sends at most 32 per call, net/xdp/xsk.c TX_BATCH_SIZE); bounded."""
        prod_off, cons_off, _desc, _fl = self._tx_off
        for _ in range(tries):
            if self._u32(self._tx, prod_off) == self._u32(self._tx, cons_off):
                return
            try:
                self.sock.send(b"", socket.MSG_DONTWAIT)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                if e.errno not in (errno.ENOBUFS, errno.EBUSY):
                    raise

    def _reap(self) -> int:
        prod_off, cons_off, _desc, _fl = self._cr_off
        prod, cons = self._u32(self._cr, prod_off), self._u32(self._cr, cons_off)
        n = (prod - cons) & 0xFFFFFFFF
        if n:
            mask, q = self.frames - 1, self._crq
            self._refill([q[(cons + i) & mask] for i in range(n)])
            struct.pack_into("<I", self._cr, cons_off, (cons + n) & 0xFFFFFFFF)
        return n

    def wait(self, timeout: float) -> None:
        """Sleep until a frame is on the RX ring or ``timeout`` seconds passed."""
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.poll(max(1, int(timeout * 1000)))

    def statistics(self) -> dict[str, int]:
        """The socket's ``struct xdp_statistics`` (getsockopt XDP_STATISTICS): frames the
        kernel dropped (``rx_dropped``, ``rx_ring_full``, ``rx_fill_ring_empty_descs``) and
        bad descriptors, counted since the socket was made."""
        raw = self.sock.getsockopt(SOL_XDP, XDP_STATISTICS, 8 * len(_STATS))
        vals = struct.unpack_from(f"<{len(raw) // 8}Q", raw)
        return dict(zip(_STATS, vals, strict=False))

    def close(self) -> None:
        for v in self._views:
            v.release()
        self._views.clear()
        for m in self._maps:
            m.close()
        self._maps.clear()
        self.sock.close()
        if getattr(self, "umem", None) is not None:
            del self._umem_ptr
            self.umem.close()
            del self.umem

    def __enter__(self) -> XskSocket:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
