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

The burst API moves frames a batch at a time, as libxdp's xsk.h ring protocol does
(``xsk_ring_cons__peek``/``__release``, ``xsk_ring_prod__reserve``/``__submit``): one
load of the other side's index and one store of ours per batch, the descriptors copied
between the mmapped rings and small u64/u32 arrays by strided ``memoryview`` slices (C
loops, no Python work per frame).  :meth:`XskSocket.rx_burst` gives received frames as
:class:`XskFrames` (memoryviews into the UMEM on demand, no copy), :meth:`XskSocket.fill`
offers their chunks back; :meth:`XskSocket.tx_alloc` hands out free chunks of the socket's
TX pool, :meth:`XskSocket.tx_burst` puts them on the TX ring with one ``sendto`` kick,
:meth:`XskSocket.complete` reaps the completion ring.
The socket and the interface must be in the calling thread's network namespace.
"""

from __future__ import annotations

import array
import ctypes
import errno
import mmap
import os
import select
import socket
import struct
import time
from collections.abc import Iterable, Iterator
from functools import cache
from typing import Any, Literal

from bpfdsl.abi.map_types import MapType
from bpfdsl.abi.net import (
    AF_XDP,
    SOL_XDP,
    XDP_COPY,
    XDP_MMAP_OFFSETS,
    XDP_PGOFF_RX_RING,
    XDP_PGOFF_TX_RING,
    XDP_RX_RING,
    XDP_STATISTICS,
    XDP_TX_RING,
    XDP_UMEM_COMPLETION_RING,
    XDP_UMEM_FILL_RING,
    XDP_UMEM_PGOFF_COMPLETION_RING,
    XDP_UMEM_PGOFF_FILL_RING,
    XDP_UMEM_REG,
)
from bpfdsl.diagnostics import DiagnosticError, error
from bpfdsl.kernel import libc
from bpfdsl.kernel import syscall as S
from bpfdsl.runtime.cpumap import check_slot, require_map

try:  # xdpsock's l2fwd step in C, built with BPFDSL_COMPILE=1 (setup.py)
    from bpfdsl.runtime import _xsk
except ImportError:  # not built: the same step in Python (XskSocket.l2fwd)
    _xsk = None  # type: ignore[assignment]
if os.environ.get("BPFDSL_PURE_PYTHON", "") not in ("", "0"):
    _xsk = None  # type: ignore[assignment]
L2FWD_C = _xsk is not None
"""Whether :meth:`XskSocket.l2fwd` runs its step in C (``bpfdsl --version``)."""

_STATS: tuple[str, ...] = ("rx_dropped", "rx_invalid_descs", "tx_invalid_descs", "rx_ring_full")
_STATS += ("rx_fill_ring_empty_descs", "tx_ring_empty_descs")  # struct xdp_statistics, u64s
_RING_OFF = struct.Struct("<4Q")  # struct xdp_ring_offset {producer, consumer, desc, flags}
_DESC = struct.Struct("<QII")  # struct xdp_desc {addr, len, options}
# sendto kick errors that mean "the kernel is busy, try again later" (xdpsock kick_tx)
_KICK_AGAIN = (errno.ENOBUFS, errno.EAGAIN, errno.EBUSY, errno.ENETDOWN)


@cache
def _numpy() -> Any:
    """numpy when installed (imported on first use: ~0.1 s), else None."""
    try:
        import numpy
    except ImportError:
        return None
    return numpy


@cache
def _swap_index() -> tuple[Any, Any]:
    """numpy index rows: bytes 0-11 of a frame, and where each takes its value from."""
    np = _numpy()
    return np.arange(12), np.array([6, 7, 8, 9, 10, 11, 0, 1, 2, 3, 4, 5])


def _u64s(n: int) -> memoryview:
    return memoryview(bytearray(8 * n)).cast("Q")


def _u32s(n: int) -> memoryview:
    return memoryview(bytearray(4 * n)).cast("I")


class XskFrames:
    """A burst of UMEM frames, as :meth:`XskSocket.rx_burst` and :meth:`XskSocket.tx_alloc`
    return them.

    ``addrs[i]``: frame i's UMEM byte offset (u64, ``struct xdp_desc.addr``: for received
    frames the chunk start plus the kernel's headroom, XDP_PACKET_HEADROOM = 256 bytes in
    copy mode); ``lens[i]``: its length in bytes (u32, ``xdp_desc.len``).  Both are
    ``memoryview`` arrays (formats ``Q`` and ``I``) of ``len(self)`` items, writable.
    ``self[i]`` (and iteration, :meth:`views`) is a memoryview of the frame's bytes in the
    UMEM, no copy: ``lens[i]`` bytes for received frames, the whole rest of the chunk
    (up to ``frame_size`` bytes from ``addrs[i]``) for TX frames, to write into.  The
    views are valid while the chunks are the caller's: until :meth:`XskSocket.fill`
    (received frames) or :meth:`XskSocket.tx_burst` (TX frames) gives them back.
    """

    __slots__ = ("addrs", "lens", "_umem", "_room")

    def __init__(
        self, umem: memoryview, addrs: memoryview, lens: memoryview, room: int = 0
    ) -> None:
        self.addrs, self.lens, self._umem, self._room = addrs, lens, umem, room

    def __len__(self) -> int:
        return len(self.addrs)

    def __bool__(self) -> bool:
        return len(self.addrs) > 0

    def __getitem__(self, i: int) -> memoryview:
        a = self.addrs[i]
        if self._room:
            return self._umem[a : a + self._room - a % self._room]
        return self._umem[a : a + self.lens[i]]

    def views(self) -> list[memoryview]:
        """Every frame as a memoryview (one slice each; see the class docstring)."""
        u = self._umem
        if self._room:
            r = self._room
            return [u[a : a + r - a % r] for a in self.addrs]
        return [u[a : a + n] for a, n in zip(self.addrs, self.lens, strict=True)]

    def __iter__(self) -> Iterator[memoryview]:
        return iter(self.views())

    def write(self, i: int, frame: bytes | bytearray | memoryview) -> None:
        """Copy ``frame`` into TX frame i and set ``lens[i]`` to its length."""
        view = self[i] if self._room else self._umem[self.addrs[i] : self.addrs[i] + len(frame)]
        view[: len(frame)] = frame
        self.lens[i] = len(frame)


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
    """Empty slot ``queue``; redirects to it then take the program's fallback action.

    True: the slot is empty now.  Whether a socket was there the kernel does not say (its
    delete of an empty slot succeeds, and user space cannot read an xskmap).  Raises
    UsageError (``xskmap-queue``) for a queue outside the map's slots 0..max_entries-1."""
    info = require_map(map_fd, (MapType.XSKMAP,), map_name)
    check_slot(info, queue, map_name, "xskmap-queue", "queue")
    return S.map_delete_slot(map_fd, struct.pack("<I", queue), info.type, info.value_size)


class XskSocket:
    """An AF_XDP socket receiving the frames XDP redirects to (ifindex, queue), copy mode.

    ``frames`` (power of two) UMEM chunks of ``frame_size`` bytes (2048 or 4096); every
    ring (fill, completion, RX, TX) has ``frames`` descriptors.  All chunks but the last
    ``tx_frames`` are offered on the fill ring at start and re-offered after each
    :meth:`recv`; the last ``tx_frames`` chunks are the TX pool that :meth:`tx_alloc`
    hands out and :meth:`complete` takes back.  With ``tx`` (implied by ``tx_frames``) the
    socket also has a TX ring (and sends out of the same interface).
    Use as a context manager; ``fileno()`` is what :func:`xsk_map_set` takes.
    Raises ValueError on bad sizes, OSError from the socket calls (EPERM without
    CAP_NET_RAW, EINVAL from the kernel on sizes it refuses).
    """

    def __init__(
        self,
        ifindex: int,
        queue: int = 0,
        *,
        frames: int = 64,
        frame_size: int = 2048,
        tx: bool = False,
        tx_frames: int = 0,
    ) -> None:
        if frames <= 0 or frames & (frames - 1):
            raise ValueError("frames must be a power of two")
        if not 0 <= tx_frames < frames:
            raise ValueError("tx_frames must be 0..frames-1 (the fill ring keeps at least one)")
        self.ifindex, self.queue, self.frames, self.frame_size = ifindex, queue, frames, frame_size
        self.tx = tx or tx_frames > 0
        self.tx_frames = tx_frames
        self._tx_base = (frames - tx_frames) * frame_size  # UMEM offset of the TX pool
        self._pool = _u64s(frames)  # free TX chunks, a ring: [_pool_head, _pool_tail)
        self._pool_head = self._pool_tail = 0
        self._fwd = 0  # rx chunks on the TX ring (l2fwd, tx_burst of received frames)
        self._maps: list[mmap.mmap] = []
        self._np_umem: Any = None  # a numpy uint8 view of the UMEM, made by l2fwd
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
        self._rx_words = (rx[0] // 4, rx[1] // 4)  # (producer, consumer) as u32 indices
        self._fr_words = (fr[0] // 4, fr[1] // 4)
        # u64 views of the descriptor arrays for the batch loops (rx/tx: addr, len|options)
        self._rxq = self._view(self._rx, rx[2], n * _DESC.size)
        self._frq = self._view(self._fr, fr[2], n * 8)
        if self.tx:
            self._tx = self._ring(tx, n * _DESC.size, XDP_PGOFF_TX_RING)
            self._cr = self._ring(cr, n * 8, XDP_UMEM_PGOFF_COMPLETION_RING)
            self._tx_off, self._cr_off = tx, cr
            self._tx_words = (tx[0] // 4, tx[1] // 4)
            self._cr_words = (cr[0] // 4, cr[1] // 4)
            self._txq = self._view(self._tx, tx[2], n * _DESC.size)
            self._crq = self._view(self._cr, cr[2], n * 8)
            self._txi = self._view(self._tx, tx[2], n * _DESC.size, "I")
            self._txidx = self._view(self._tx, 0, tx[2], "I")
            self._cridx = self._view(self._cr, 0, cr[2], "I")
            # (producer, consumer, descriptors) byte offsets of rx, fill, tx, completion
            self._l2fwd_offs = (*rx[:3], *fr[:3], *tx[:3], *cr[:3])
        # u32 views: the RX descriptors (len at 4i+2) and the index words of each ring
        self._rxi = self._view(self._rx, rx[2], n * _DESC.size, "I")
        self._rxidx = self._view(self._rx, 0, rx[2], "I")
        self._fridx = self._view(self._fr, 0, fr[2], "I")
        self.umem_view = self._view(self.umem, 0, n * fs, "B")
        for i in range(n - self.tx_frames, n):
            self._pool[self._pool_tail & (n - 1)] = i * fs
            self._pool_tail += 1
        self._fill(range(n - self.tx_frames))
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

    def _view(
        self, m: mmap.mmap, off: int, size: int, fmt: Literal["Q", "I", "B"] = "Q"
    ) -> memoryview:
        base = memoryview(m)
        self._views.append(base)
        v = base[off : off + size].cast(fmt)
        self._views.append(v)
        return v

    def _fill(self, chunks: Iterable[int]) -> None:
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

    def rx_drop(self, limit: int = 4096) -> int:
        """Receive up to ``limit`` frames and give their chunks straight back to the fill
        ring (xdpsock ``rxdrop``): one :meth:`rx_burst` and one :meth:`fill`; returns
        how many.  Does not wait."""
        frames = self.rx_burst(limit)
        if frames:
            self.fill(frames)
        return len(frames)

    def l2fwd(self, limit: int = 4096) -> int:
        """Send received frames back out of the interface with source and destination
        MAC addresses swapped in place in the UMEM (xdpsock ``l2fwd``), reap completed
        sends onto the fill ring; returns how many frames were put on the TX ring.  One
        :meth:`rx_burst`, one :meth:`tx_burst`, kicks until the kernel took the batch
        (copy mode sends 32 per ``sendto``), one :meth:`complete`.  Needs ``tx``; does
        not wait.  For a socket without a TX pool the step runs in C
        (bpfdsl/runtime/_xsk.c) when built (:data:`L2FWD_C`), with the same effect."""
        if _xsk is not None and not self.tx_frames:  # the same step in C (_xsk.c)
            put, done = _xsk.l2fwd(
                self.sock.fileno(), self.umem, self._rx, self._fr, self._tx, self._cr,
                self._l2fwd_offs, self.frames, limit,
            )  # fmt: skip
            self._fwd += put - done
            return put
        self.complete()  # chunks sent since the last call back to the fill ring first
        frames = self.rx_burst(limit)
        put = 0
        if frames:
            self._swap_macs(frames.addrs)
            put = self.tx_burst(frames, kick=False)
            if put < len(frames):  # the TX ring is full: drop the rest, as xdpsock does
                self.fill(frames.addrs[put:])
        self._kick()
        self.complete()
        return put

    def _swap_macs(self, addrs: memoryview) -> None:
        """Swap the destination and source MAC addresses (bytes 0-5 and 6-11) of the frames
        at UMEM offsets ``addrs``: with numpy one gather and one scatter for the batch
        (a few µs for 64 frames), else frame by frame (~0.4 µs each)."""
        np = _numpy()
        if np is None:
            u = self.umem
            for a in addrs.tolist():
                u[a : a + 12] = u[a + 6 : a + 12] + u[a : a + 6]
            return
        if self._np_umem is None:
            self._np_umem = np.frombuffer(self.umem, dtype=np.uint8)
        dst, src = _swap_index()
        base = np.frombuffer(addrs, dtype=np.uint64).astype(np.intp)[:, None]
        self._np_umem[base + dst] = self._np_umem[base + src]

    def _kick(self, tries: int = 64) -> None:
        """:meth:`kick` until the kernel took every TX descriptor (copy mode sends at most
        32 per call, net/xdp/xsk.c TX_BATCH_SIZE); bounded by ``tries``."""
        idx, (prod_i, cons_i) = self._txidx, self._tx_words
        for _ in range(tries):
            if idx[prod_i] == idx[cons_i]:
                return
            self.kick()

    # ---- burst API: one index load and one index store per ring per batch ----

    def rx_burst(self, max_frames: int = 64) -> XskFrames:
        """Take up to ``max_frames`` received frames off the RX ring (does not wait; see
        :meth:`wait`).  The descriptors are copied out and the RX consumer index is
        stored once (``xsk_ring_cons__peek`` + ``__release``); the frames stay in their
        UMEM chunks, which are the caller's until given back with :meth:`fill` (or sent
        with :meth:`tx_burst`, after which :meth:`complete` offers them to the fill ring).
        Returns an :class:`XskFrames` (empty when nothing was waiting)."""
        idx, (prod_i, cons_i) = self._rxidx, self._rx_words
        cons = idx[cons_i]
        n = min((idx[prod_i] - cons) & 0xFFFFFFFF, max_frames)
        addrs, lens = _u64s(n), _u32s(n)
        if n:
            size = self.frames
            i0 = cons & (size - 1)
            k = min(n, size - i0)  # before the ring wraps
            addrs[:k] = self._rxq[2 * i0 : 2 * (i0 + k) : 2]
            lens[:k] = self._rxi[4 * i0 + 2 : 4 * (i0 + k) : 4]
            if k < n:
                addrs[k:] = self._rxq[0 : 2 * (n - k) : 2]
                lens[k:] = self._rxi[2 : 4 * (n - k) : 4]
            idx[cons_i] = (cons + n) & 0xFFFFFFFF
        return XskFrames(self.umem_view, addrs, lens)

    def fill(self, frames: XskFrames | memoryview) -> int:
        """Offer the chunks of ``frames`` (received frames, or a ``Q`` memoryview of UMEM
        offsets) on the fill ring again, one producer store for the batch
        (``xsk_ring_prod__reserve`` + ``__submit``).  Offsets need not be chunk starts: in
        aligned mode the kernel masks them to their chunk (net/xdp/xsk_buff_pool.c
        ``xp_aligned_extract_addr``).  Returns how many were offered (all of them: the
        fill ring has a slot for every chunk)."""
        addrs = frames.addrs if isinstance(frames, XskFrames) else frames
        n = len(addrs)
        if n:
            idx, prod_i = self._fridx, self._fr_words[0]
            prod, size = idx[prod_i], self.frames
            i0 = prod & (size - 1)
            k = min(n, size - i0)
            self._frq[i0 : i0 + k] = addrs[:k]
            if k < n:
                self._frq[0 : n - k] = addrs[k:]
            idx[prod_i] = (prod + n) & 0xFFFFFFFF
        return n

    def tx_alloc(self, max_frames: int = 64, length: int = 0) -> XskFrames:
        """Up to ``max_frames`` free chunks of the TX pool (``tx_frames`` of the
        constructor) as :class:`XskFrames` whose views are the whole chunks to write
        frames into; ``lens`` all start at ``length`` bytes (set them, or use
        :meth:`XskFrames.write`).  A chunk keeps what was last written in it, so frames
        written once can be sent again as they are.  Fewer (or none) when the pool is
        short: call :meth:`complete` to take sent chunks back."""
        n = min(max_frames, self._pool_tail - self._pool_head)
        addrs, lens = _u64s(n), _u32s(n)
        if n:
            size = self.frames
            i0 = self._pool_head & (size - 1)
            k = min(n, size - i0)
            addrs[:k] = self._pool[i0 : i0 + k]
            if k < n:
                addrs[k:] = self._pool[0 : n - k]
            self._pool_head += n
            if length:
                lens[:] = array.array("I", [length]) * n
        return XskFrames(self.umem_view, addrs, lens, self.frame_size)

    def tx_burst(self, frames: XskFrames, *, kick: bool = True) -> int:
        """Put ``frames`` (from :meth:`tx_alloc`, or received ones to send back out) on
        the TX ring, ``lens[i]`` bytes of each, with one producer store, then kick the
        kernel with one ``sendto(MSG_DONTWAIT)`` (copy mode transmits only inside that
        call, at most 32 frames per call by default: net/xdp/xsk.c ``TX_BATCH_SIZE``;
        what is left goes with the next kick, see :meth:`kick`).  Returns how many were
        put on the ring: all of them unless the ring was short of room, in which case the
        rest (``frames.addrs[n:]``) are still the caller's.  Sent chunks come back through
        :meth:`complete`."""
        addrs = frames.addrs
        idx, (prod_i, cons_i) = self._txidx, self._tx_words
        prod, size = idx[prod_i], self.frames
        n = min(len(addrs), size - ((prod - idx[cons_i]) & 0xFFFFFFFF))
        if n > 0:
            i0 = prod & (size - 1)
            k = min(n, size - i0)
            self._txq[2 * i0 : 2 * (i0 + k) : 2] = addrs[:k]
            self._txi[4 * i0 + 2 : 4 * (i0 + k) : 4] = frames.lens[:k]
            if k < n:
                self._txq[0 : 2 * (n - k) : 2] = addrs[k:n]
                self._txi[2 : 4 * (n - k) : 4] = frames.lens[k:n]
            if not frames._room:  # received frames: their chunks go back to the fill ring
                self._fwd += n
            idx[prod_i] = (prod + n) & 0xFFFFFFFF
        else:
            n = 0
        if kick:
            self.kick()
        return n

    def kick(self) -> None:
        """One ``sendto(fd, NULL, 0, MSG_DONTWAIT)``: the kernel sends what is on the TX
        ring (copy mode: up to its per-call budget).  "Busy, try later" errors (ENOBUFS,
        EAGAIN, EBUSY, ENETDOWN) are ignored, as libxdp's xdpsock ``kick_tx`` does."""
        try:
            self.sock.send(b"", socket.MSG_DONTWAIT)
        except OSError as e:
            if e.errno not in _KICK_AGAIN and not isinstance(e, InterruptedError):
                raise

    def complete(self, max_frames: int | None = None) -> int:
        """Reap the completion ring (every completed send, or ``max_frames``), one
        consumer store: chunks of the TX pool return to it (for :meth:`tx_alloc`),
        received chunks that were sent back out return to the fill ring.  Returns how
        many sends completed."""
        idx, (prod_i, cons_i) = self._cridx, self._cr_words
        cons, size = idx[cons_i], self.frames
        n = (idx[prod_i] - cons) & 0xFFFFFFFF
        if max_frames is not None:
            n = min(n, max_frames)
        if not n:
            return 0
        i0 = cons & (size - 1)
        k = min(n, size - i0)
        done = _u64s(n)
        done[:k] = self._crq[i0 : i0 + k]
        if k < n:
            done[k:] = self._crq[0 : n - k]
        idx[cons_i] = (cons + n) & 0xFFFFFFFF
        if self._fwd and not self.tx_frames:  # no TX pool: every chunk is an rx chunk
            self._fwd -= n
            self.fill(done)
        elif self._fwd:  # some are rx chunks: sort them out one by one
            base = self._tx_base
            pool: list[int] = []
            refill: list[int] = []
            for a in done:
                (pool if a >= base and self.tx_frames else refill).append(a)
            self._fwd -= len(refill)
            if refill:
                self.fill(memoryview(array.array("Q", refill)))
            if pool:
                self._to_pool(memoryview(array.array("Q", pool)))
        else:
            self._to_pool(done)
        return n

    def _to_pool(self, addrs: memoryview) -> None:
        n, size = len(addrs), self.frames
        i0 = self._pool_tail & (size - 1)
        k = min(n, size - i0)
        self._pool[i0 : i0 + k] = addrs[:k]
        if k < n:
            self._pool[0 : n - k] = addrs[k:]
        self._pool_tail += n

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
        """Close the socket and unmap the rings and the UMEM (the UMEM stays mapped while
        views of it handed out by :class:`XskFrames` are alive, and goes with the last)."""
        for v in reversed(self._views):
            v.release()
        self._views.clear()
        self._np_umem = None  # numpy's view of the UMEM (l2fwd), before the unmap
        for m in self._maps:
            m.close()
        self._maps.clear()
        self.sock.close()
        if getattr(self, "umem", None) is not None:
            del self._umem_ptr
            try:
                self.umem.close()
            except BufferError:  # a caller still holds frame views: unmapped with the last
                pass
            del self.umem

    def __enter__(self) -> XskSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
