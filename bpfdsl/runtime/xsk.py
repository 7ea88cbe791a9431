"""xskmap entries and a minimal AF_XDP socket (kernel side, layer 6).

:func:`xsk_map_set` puts an AF_XDP socket fd into an xskmap slot (u32 key = rx queue index,
u32 value = socket fd on update; kernel/bpf/xskmap.c).  :class:`XskSocket` is the smallest
useful AF_XDP receiver, after Documentation/networking/af_xdp.rst and libxdp's xsk.c: a UMEM
of ``frames`` x ``frame_size`` bytes (anonymous mmap), fill + completion rings, an RX ring,
bound to (ifindex, queue) in copy mode (works on veth).  Layouts are linux/if_xdp.h
(``struct xdp_umem_reg``, ``xdp_mmap_offsets``, ``sockaddr_xdp``, ``xdp_desc``).
The socket and the interface must be in the calling thread's network namespace.
"""

from __future__ import annotations

import ctypes
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
XDP_MMAP_OFFSETS, XDP_RX_RING, XDP_UMEM_REG = 1, 2, 4
XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING = 5, 6
XDP_COPY = 1 << 1  # sxdp_flags: force copy mode
XDP_PGOFF_RX_RING = 0
XDP_UMEM_PGOFF_FILL_RING = 0x100000000
_RING_OFF = struct.Struct("<4Q")  # struct xdp_ring_offset {producer, consumer, desc, flags}
_DESC = struct.Struct("<QII")  # struct xdp_desc {addr, len, options}


def xsk_map_set(map_fd: int, queue: int, xsk_fd: int, *, map_name: str = "xskmap") -> None:
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
    are offered on the fill ring at start and re-offered after each :meth:`recv`.
    Use as a context manager; ``fileno()`` is what :func:`xsk_map_set` takes.
    Raises OSError from the socket calls (EPERM without CAP_NET_RAW, EINVAL on bad sizes).
    """

    def __init__(self, ifindex: int, queue: int = 0, *, frames: int = 64, frame_size: int = 2048):
        if frames & (frames - 1):
            raise ValueError("frames must be a power of two")
        self.ifindex, self.queue, self.frames, self.frame_size = ifindex, queue, frames, frame_size
        self._maps: list[mmap.mmap] = []
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
        for opt in (XDP_UMEM_FILL_RING, XDP_UMEM_COMPLETION_RING, XDP_RX_RING):
            self.sock.setsockopt(SOL_XDP, opt, struct.pack("<I", n))
        offs = self.sock.getsockopt(SOL_XDP, XDP_MMAP_OFFSETS, 4 * _RING_OFF.size)
        rx = _RING_OFF.unpack_from(offs, 0)
        fr = _RING_OFF.unpack_from(offs, 2 * _RING_OFF.size)
        self._rx = self._ring(rx, n * _DESC.size, XDP_PGOFF_RX_RING)
        self._fr = self._ring(fr, n * 8, XDP_UMEM_PGOFF_FILL_RING)
        self._rx_off, self._fr_off = rx, fr
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
        prod_off, cons_off, desc, _fl = self._rx_off
        deadline = time.monotonic() + timeout
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        out: list[bytes] = []
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
            out.append(bytes(self.umem[addr : addr + length]))
            chunks.append(addr // self.frame_size)
            cons = (cons + 1) & 0xFFFFFFFF
        struct.pack_into("<I", self._rx, cons_off, cons)
        self._fill(chunks)
        return out

    def close(self) -> None:
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
