"""Event rings shared with the kernel (kernel side): the ring buffer map's mmap, perf events
with their mmap rings, and epoll over both -- the system calls of reading BPF events.

:class:`RingbufRing` maps a BPF_MAP_TYPE_RINGBUF map as libbpf's ringbuf.c does (the
consumer page read-write at offset 0, the producer page and the data pages, mapped twice
in a row so a record that wraps reads as one piece, read-only after it) and takes
committed records: each starts with an 8-byte header, ``u32 len`` with the BUSY bit (not
committed yet: stop) and the DISCARD bit (skip it), and takes ``round_up(len + 8, 8)``
bytes.  :class:`PerfRing` is one CPU's ``perf_event_open(PERF_TYPE_SOFTWARE,
PERF_COUNT_SW_BPF_OUTPUT)`` event with its ring (a header page, then 2**n data pages), read
as libbpf's perf_buffer does: PERF_RECORD_SAMPLE (here ``u64 time`` -- CLOCK_MONOTONIC ns
-- then ``u32 size`` and the raw bytes the program wrote, padded to 8 bytes) and
PERF_RECORD_LOST (records the kernel dropped because the ring was full).  :class:`Poller`
is epoll over ring buffer map fds and perf event fds.

Constants are the kernel's (include/uapi/linux/perf_event.h, linux/bpf.h).  Memory order:
positions are read and written with one 8-byte access each; on the x86-64 hosts bpfdsl runs
on (TSO) that gives the acquire/release order libbpf's smp_load_acquire/smp_store_release
ask for.
"""

from __future__ import annotations

import ctypes as C
import fcntl
import mmap
import os
import select
import struct

from bpfdsl.abi.flags import BPF_RINGBUF_BUSY_BIT, BPF_RINGBUF_DISCARD_BIT, BPF_RINGBUF_HDR_SZ
from bpfdsl.abi.perf import (
    PERF_COUNT_SW_BPF_OUTPUT,
    PERF_EVENT_IOC_DISABLE,
    PERF_EVENT_IOC_ENABLE,
    PERF_FLAG_FD_CLOEXEC,
    PERF_RECORD_LOST,
    PERF_RECORD_SAMPLE,
    PERF_SAMPLE_RAW,
    PERF_SAMPLE_TIME,
    PERF_TYPE_SOFTWARE,
)
from bpfdsl.kernel import libc

_ATTR_USE_CLOCKID = 1 << 25  # perf_event_attr flag bits: use_clockid
CLOCK_MONOTONIC = 1
# struct perf_event_mmap_page: data_head, data_tail (u64 each) at these byte offsets
_DATA_HEAD, _DATA_TAIL = 1024, 1032

_NR_PERF_EVENT_OPEN = {
    "x86_64": 298,
    "aarch64": 241,
    "armv7l": 364,
    "riscv64": 241,
    "ppc64le": 319,
    "s390x": 331,
}
HOST_PAGE_SIZE = mmap.PAGESIZE  # bytes: this machine's (abi.map_types.PAGE_SIZE: the model's)
_U32 = struct.Struct("<I")


class PerfEventAttr(C.Structure):
    """``struct perf_event_attr`` (PERF_ATTR_SIZE_VER8, 136 bytes); ``flags`` holds the
    bit fields (disabled, inherit, ..., use_clockid = bit 25)."""

    _fields_ = [
        ("type", C.c_uint32),
        ("size", C.c_uint32),
        ("config", C.c_uint64),
        ("sample_period", C.c_uint64),
        ("sample_type", C.c_uint64),
        ("read_format", C.c_uint64),
        ("flags", C.c_uint64),
        ("wakeup_events", C.c_uint32),
        ("bp_type", C.c_uint32),
        ("config1", C.c_uint64),
        ("config2", C.c_uint64),
        ("branch_sample_type", C.c_uint64),
        ("sample_regs_user", C.c_uint64),
        ("sample_stack_user", C.c_uint32),
        ("clockid", C.c_int32),
        ("sample_regs_intr", C.c_uint64),
        ("aux_watermark", C.c_uint32),
        ("sample_max_stack", C.c_uint16),
        ("_reserved_2", C.c_uint16),
        ("aux_sample_size", C.c_uint32),
        ("_reserved_3", C.c_uint32),
        ("sig_data", C.c_uint64),
        ("config3", C.c_uint64),
    ]


def perf_event_open(attr: PerfEventAttr, cpu: int, pid: int = -1, group_fd: int = -1) -> int:
    """perf_event_open(2) with PERF_FLAG_FD_CLOEXEC; the new fd.  Raises OSError
    (EACCES/EPERM: needs CAP_PERFMON or CAP_SYS_ADMIN; ENODEV: ``cpu`` is offline)."""
    nr = _NR_PERF_EVENT_OPEN.get(os.uname().machine)
    if nr is None:
        raise OSError(38, f"perf_event_open: unsupported architecture {os.uname().machine}")
    attr.size = C.sizeof(attr)
    fd = libc.syscall(
        nr, C.byref(attr), C.c_int(pid), C.c_int(cpu), C.c_int(group_fd),
        C.c_ulong(PERF_FLAG_FD_CLOEXEC),
    )  # fmt: skip
    if fd < 0:
        err = libc.get_errno()
        raise OSError(err, f"perf_event_open(cpu {cpu}): {os.strerror(err)}")
    return fd


def bpf_output_attr() -> PerfEventAttr:
    """The event libbpf's perf_buffer opens per CPU: PERF_COUNT_SW_BPF_OUTPUT, a sample
    per record (period 1, wake up on each), samples with the time (CLOCK_MONOTONIC) and the
    raw bytes."""
    a = PerfEventAttr()
    a.type = PERF_TYPE_SOFTWARE
    a.config = PERF_COUNT_SW_BPF_OUTPUT
    a.sample_period = 1
    a.wakeup_events = 1
    a.sample_type = PERF_SAMPLE_TIME | PERF_SAMPLE_RAW
    a.flags = _ATTR_USE_CLOCKID
    a.clockid = CLOCK_MONOTONIC
    return a


class PerfRing:
    """One CPU's BPF output event and its mmap ring of ``pages`` data pages (a power of 2).

    ``fd`` goes into the perf event array's slot ``cpu``; :meth:`read` takes what arrived:
    ``("sample", time_ns, raw_bytes)`` and ``("lost", 0, count)`` tuples, oldest first."""

    def __init__(self, cpu: int, pages: int = 16):
        if pages < 1 or pages & (pages - 1):
            raise ValueError(f"perf ring pages must be a power of 2, not {pages}")
        self.cpu = cpu
        self.fd = perf_event_open(bpf_output_attr(), cpu)
        self.size = pages * HOST_PAGE_SIZE
        try:
            self.mem = mmap.mmap(self.fd, HOST_PAGE_SIZE + self.size, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE)  # fmt: skip
            fcntl.ioctl(self.fd, PERF_EVENT_IOC_ENABLE, 0)
        except OSError:
            os.close(self.fd)
            raise

    def fileno(self) -> int:
        return self.fd

    def read(self, limit: int = 100_000) -> list[tuple[str, int, bytes | int]]:
        """Records written since the last read (at most ``limit``); frees their space."""
        mem, size = self.mem, self.size
        head = struct.unpack_from("<Q", mem, _DATA_HEAD)[0]
        tail = struct.unpack_from("<Q", mem, _DATA_TAIL)[0]
        out: list[tuple[str, int, bytes | int]] = []
        while tail < head and len(out) < limit:
            off = tail & (size - 1)
            hdr = self._bytes(off, 8)
            rtype, _misc, rsize = struct.unpack("<IHH", hdr)
            if rsize < 8:
                break  # a corrupt header: never loop on it
            body = self._bytes((off + 8) & (size - 1), rsize - 8)
            if rtype == PERF_RECORD_SAMPLE and len(body) >= 12:
                time_ns, n = struct.unpack_from("<QI", body)
                out.append(("sample", time_ns, body[12 : 12 + n]))
            elif rtype == PERF_RECORD_LOST and len(body) >= 16:
                out.append(("lost", 0, struct.unpack_from("<QQ", body)[1]))
            tail += rsize
        struct.pack_into("<Q", mem, _DATA_TAIL, tail)
        return out

    def skip_ready(self) -> None:
        """Drop every record written so far (data_tail := data_head)."""
        mem = self.mem
        struct.pack_into("<Q", mem, _DATA_TAIL, struct.unpack_from("<Q", mem, _DATA_HEAD)[0])

    def skip_position(self) -> tuple[mmap.mmap, int, mmap.mmap, int, int]:
        """``(src, src_off, dst, dst_off, half)``: copying the uint64 at ``src + src_off``
        to ``dst + dst_off`` is :meth:`skip_ready` (data_head to data_tail), done by a loop
        that drops the records without calling back into Python once ``half`` (half the
        ring) bytes of them wait (:meth:`bpfdsl.kernel.syscall.TestRunner.run_spans`)."""
        return self.mem, _DATA_HEAD, self.mem, _DATA_TAIL, self.size // 2

    def _bytes(self, off: int, n: int) -> bytes:
        base, size = HOST_PAGE_SIZE, self.size
        if off + n <= size:
            return self.mem[base + off : base + off + n]
        first = size - off
        return self.mem[base + off : base + size] + self.mem[base : base + n - first]

    def close(self) -> None:
        if self.fd >= 0:
            try:
                fcntl.ioctl(self.fd, PERF_EVENT_IOC_DISABLE, 0)
            except OSError:
                pass
            self.mem.close()
            os.close(self.fd)
            self.fd = -1


class RingbufRing:
    """The mmap of a ring buffer map (``map_fd``, ring of ``size`` bytes = its
    max_entries): :meth:`read` returns the committed, not discarded records in order."""

    def __init__(self, map_fd: int, size: int):
        if size < HOST_PAGE_SIZE or size & (size - 1):
            raise ValueError(f"a ring buffer is a power of 2 of at least a page, not {size}")
        self.map_fd, self.size = map_fd, size
        self.cons = mmap.mmap(map_fd, HOST_PAGE_SIZE, mmap.MAP_SHARED,
                              mmap.PROT_READ | mmap.PROT_WRITE, offset=0)  # fmt: skip
        try:
            self.prod = mmap.mmap(map_fd, HOST_PAGE_SIZE + 2 * size, mmap.MAP_SHARED,
                                  mmap.PROT_READ, offset=HOST_PAGE_SIZE)  # fmt: skip
        except OSError:
            self.cons.close()
            raise

    def fileno(self) -> int:
        return self.map_fd

    def read(self, limit: int = 100_000) -> list[bytes]:
        """Committed records since the last read (at most ``limit``); the consumer
        position moves past them (and past discarded ones), so the kernel reuses the space."""
        cons = struct.unpack_from("<Q", self.cons, 0)[0]
        out: list[bytes] = []
        mask = self.size - 1
        while len(out) < limit:
            prod = struct.unpack_from("<Q", self.prod, 0)[0]
            if cons >= prod:
                break
            while cons < prod and len(out) < limit:
                at = HOST_PAGE_SIZE + (cons & mask)
                hdr = struct.unpack_from("<I", self.prod, at)[0]
                if hdr & BPF_RINGBUF_BUSY_BIT:
                    struct.pack_into("<Q", self.cons, 0, cons)
                    return out  # reserved, not committed yet: the rest follows later
                n = hdr & ~(BPF_RINGBUF_BUSY_BIT | BPF_RINGBUF_DISCARD_BIT)
                if not hdr & BPF_RINGBUF_DISCARD_BIT:
                    start = at + BPF_RINGBUF_HDR_SZ
                    out.append(self.prod[start : start + n])
                cons += (n + BPF_RINGBUF_HDR_SZ + 7) // 8 * 8
                struct.pack_into("<Q", self.cons, 0, cons)
        return out

    def read_raw(self, limit: int = 1 << 20) -> tuple[bytes, list[int], list[int], int]:
        """Every committed record ready now (at most ``limit``) in one piece: ``(blob,
        starts, lengths, stride)``, record ``i`` being ``blob[starts[i] : starts[i] +
        lengths[i]]`` (discarded records left out); ``stride``: bytes from one record to the
        next when all are of one length and none was discarded (else 0).  One copy of the ring's ready bytes (the data pages
        are mapped twice, so it never wraps) and one consumer-position store per call,
        instead of a slice and a store per record as :meth:`read`."""
        cons = struct.unpack_from("<Q", self.cons, 0)[0]
        prod = struct.unpack_from("<Q", self.prod, 0)[0]
        if cons >= prod:
            return b"", [], [], 0
        at = HOST_PAGE_SIZE + (cons & (self.size - 1))
        blob = self.prod[at : at + (prod - cons)]
        busy, discard = BPF_RINGBUF_BUSY_BIT, BPF_RINGBUF_DISCARD_BIT
        end = len(blob)
        h0 = _U32.unpack_from(blob, 0)[0]
        step0 = (h0 + BPF_RINGBUF_HDR_SZ + 7) // 8 * 8
        if not h0 & (busy | discard) and end % step0 == 0 and end // step0 <= limit:
            # the common case, records of one length: every header checked at once (the
            # headers as a strided view of u32s, compared in C), no walk record by record
            heads = memoryview(blob).cast("I")[:: step0 // 4].tolist()
            if heads.count(h0) == len(heads):
                struct.pack_into("<Q", self.cons, 0, cons + end)
                k = len(heads)
                return blob, list(range(BPF_RINGBUF_HDR_SZ, end, step0)), [h0] * k, step0
        starts: list[int] = []
        lengths: list[int] = []
        pos = 0
        unpack = _U32.unpack_from
        mask = ~(busy | discard)
        n0, step = -1, 0
        while pos < end and len(starts) < limit:
            hdr = unpack(blob, pos)[0]
            if hdr == n0:  # the common case: the same length as the record before
                starts.append(pos + BPF_RINGBUF_HDR_SZ)
                lengths.append(n0)
                pos += step
                continue
            if hdr & busy:
                break  # reserved, not committed yet: the rest follows later
            n = hdr & mask
            step = (n + BPF_RINGBUF_HDR_SZ + 7) // 8 * 8
            if not hdr & discard:
                starts.append(pos + BPF_RINGBUF_HDR_SZ)
                lengths.append(n)
                n0 = n
            else:
                n0 = -1
            pos += step
        struct.pack_into("<Q", self.cons, 0, cons + pos)
        return blob, starts, lengths, 0

    def skip_ready(self) -> None:
        """Drop every record written so far: the consumer position moves to the producer's
        (for readers that do not want the records but must keep the ring from filling;
        call it when no program is between reserve and submit, e.g. after a test run)."""
        struct.pack_into("<Q", self.cons, 0, struct.unpack_from("<Q", self.prod, 0)[0])

    def skip_position(self) -> tuple[mmap.mmap, int, mmap.mmap, int, int]:
        """``(src, src_off, dst, dst_off, half)``: copying the uint64 at ``src + src_off``
        to ``dst + dst_off`` is :meth:`skip_ready` (the producer position to the consumer
        position), once ``half`` the ring waits, as :meth:`PerfRing.skip_position`."""
        return self.prod, 0, self.cons, 0, self.size // 2

    def pending(self) -> int:
        """Bytes between the consumer and producer positions (records not read yet)."""
        cons = struct.unpack_from("<Q", self.cons, 0)[0]
        return struct.unpack_from("<Q", self.prod, 0)[0] - cons

    def close(self) -> None:
        self.prod.close()
        self.cons.close()


class Poller:
    """epoll over event fds (ring buffer map fds and perf event fds): :meth:`wait`
    returns the fds with data (a ring buffer map fd is readable when records wait)."""

    def __init__(self) -> None:
        self.ep = select.epoll()

    def add(self, fd: int) -> None:
        self.ep.register(fd, select.EPOLLIN)

    def wait(self, timeout: float) -> list[int]:
        """Fds that became readable within ``timeout`` seconds (EINTR: an empty list)."""
        try:
            return [fd for fd, _ev in self.ep.poll(max(0.0, timeout))]
        except InterruptedError:
            return []

    def close(self) -> None:
        self.ep.close()
