"""Memory model of the userspace BPF machine: regions and (region, offset) pointers.

Every pointer a program holds is a :class:`Ptr` into one :class:`Region` (stack frame,
packet buffer, map value, .rodata, context, opaque socket).  Scalars are plain Python
ints in ``[0, 2**64)``.  Accesses are checked against the region's live bounds, so an
out-of-bounds read that the kernel verifier would have refused raises :class:`Fault`
(the machine adds the instruction and source line).  All multi-byte memory is little
endian (bpfel), as on the kernel's x86_64/arm64 hosts.
"""

from __future__ import annotations

from bpfdsl.abi.limits import MAX_BPF_STACK

M64 = (1 << 64) - 1
M32 = 0xFFFFFFFF


class Fault(Exception):
    """An access the kernel verifier would have rejected (or a helper misuse); no position."""


class NotModelled(Fault):
    """Something the kernel accepts but the interpreter does not model (a helper, a map
    kind): the program is fine, only this engine cannot run it."""


class Region:
    """A byte range a pointer may point into.

    ``kind``: "stack", "packet", "map_value", "rodata", "ctx", "sock", "xsk".
    ``buf``: the bytes (bytearray, shared with the map element / packet buffer).
    ``lo``/``hi``: the valid byte window ``[lo, hi)`` of ``buf`` (the packet region moves
    them on adjust_head/adjust_tail).  ``writable``: stores allowed from the program.
    ``gen``: bumped by packet-changing helpers; a pointer made under an older ``gen``
    is stale (the kernel verifier invalidates such pointers).  ``spill``: pointers
    (and map references) stored on the stack, keyed by byte offset (8-byte slots).
    """

    __slots__ = ("kind", "name", "buf", "lo", "hi", "writable", "gen", "spill")

    def __init__(self, kind: str, buf: bytearray, *, name: str = "", writable: bool = True) -> None:
        self.kind = kind
        self.name = name or kind
        self.buf = buf
        self.lo = 0
        self.hi = len(buf)
        self.writable = writable
        self.gen = 0
        self.spill: dict[int, object] | None = {} if kind == "stack" else None

    def describe(self) -> str:
        return self.name

    def _check(self, p: Ptr, off: int, size: int) -> int:
        o = p.off + off
        if p.gen != self.gen:
            raise Fault(
                f"stale {self.name} pointer: the packet was changed by a helper "
                "(adjust_head/adjust_tail/adjust_meta/msg_pull_data) after it was derived; "
                "re-read data/data_end from the context"
            )
        if o < self.lo or o + size > self.hi:
            raise Fault(
                f"out-of-bounds {size}-byte access to {self.describe()} at offset "
                f"{o - self.base()} (valid: {self.lo - self.base()}..{self.hi - self.base()})"
            )
        return o

    def base(self) -> int:
        """Offset shown as 0 in messages (packet: data; stack: frame top)."""
        return 0

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        """Read ``size`` bytes at ``p + off`` (little endian) as an int, or a spilled pointer."""
        o = p.off + off
        if p.gen != self.gen or o < self.lo or o + size > self.hi:
            o = self._check(p, off, size)  # raises
        sp = self.spill
        if sp:
            if size == 8 and o in sp:
                return sp[o]
            for k in sp:
                if k < o + size and o < k + 8:
                    raise Fault(f"partial read of a pointer spilled to the stack at {o - 512}")
        return int.from_bytes(self.buf[o : o + size], "little", signed=signed) & M64

    def store(self, p: Ptr, off: int, size: int, value: object) -> None:
        """Write ``value`` (int, or on the stack an 8-byte pointer/map reference)."""
        o = self._check(p, off, size)
        if not self.writable:
            raise Fault(f"write into read-only {self.describe()}")
        sp = self.spill
        if type(value) is not int:
            if sp is None:
                raise Fault(
                    f"storing a pointer into {self.describe()} (the verifier rejects "
                    "pointer leaks into memory other than the stack)"
                )
            if size != 8:
                raise Fault("a pointer spilled to the stack must be stored as 8 bytes")
            for k in [k for k in sp if k < o + 8 and o < k + 8]:
                del sp[k]
            sp[o] = value
            self.buf[o : o + 8] = bytes(8)
            return
        if sp:
            for k in [k for k in sp if k < o + size and o < k + 8]:
                del sp[k]
        self.buf[o : o + size] = (value & ((1 << (size * 8)) - 1)).to_bytes(size, "little")

    def read_bytes(self, p: Ptr, size: int) -> bytes:
        """``size`` raw bytes at ``p`` (helper arguments)."""
        o = self._check(p, 0, size)
        return bytes(self.buf[o : o + size])

    def write_bytes(self, p: Ptr, data: bytes) -> None:
        o = self._check(p, 0, len(data))
        if not self.writable:
            raise Fault(f"write into read-only {self.describe()}")
        if self.spill:
            for k in [k for k in self.spill if k < o + len(data) and o < k + 8]:
                del self.spill[k]
        self.buf[o : o + len(data)] = data


class StackRegion(Region):
    """One frame's stack of MAX_BPF_STACK (512) bytes; r10 points at its end."""

    __slots__ = ()

    def __init__(self, depth: int) -> None:
        super().__init__("stack", bytearray(MAX_BPF_STACK), name=f"stack of frame {depth}")

    def base(self) -> int:
        return MAX_BPF_STACK

    def load(self, p: Ptr, off: int, size: int, signed: bool = False) -> object:
        if (p.off + off) % size:
            raise Fault(f"misaligned stack access: {size} bytes at {p.off + off - 512}")
        return Region.load(self, p, off, size, signed)

    def store(self, p: Ptr, off: int, size: int, value: object) -> None:
        # the verifier checks stack alignment strictly (check_ptr_alignment), see B07
        if (p.off + off) % size:
            raise Fault(f"misaligned stack access: {size} bytes at {p.off + off - 512}")
        Region.store(self, p, off, size, value)


class PacketRegion(Region):
    """The packet/message buffer; ``lo`` = data_meta (XDP) or data, ``hi`` = data_end."""

    __slots__ = ("data",)

    def __init__(self, buf: bytearray, data: int, data_end: int, *, name: str = "packet") -> None:
        super().__init__("packet", buf, name=name)
        self.data = data
        self.lo = data
        self.hi = data_end

    def base(self) -> int:
        return self.data


class Ptr:
    """A pointer: ``region`` + byte offset ``off`` into ``region.buf`` (``gen`` = its epoch)."""

    __slots__ = ("region", "off", "gen")

    def __init__(self, region: Region, off: int, gen: int = 0) -> None:
        self.region = region
        self.off = off
        self.gen = gen

    def add(self, delta: int) -> Ptr:
        return Ptr(self.region, self.off + delta, self.gen)

    def __repr__(self) -> str:
        return f"Ptr({self.region.name}+{self.off - self.region.base()})"


def s64(v: int) -> int:
    """Signed view of a 64-bit scalar."""
    return v - (1 << 64) if v >> 63 else v


def s32(v: int) -> int:
    """Signed view of the low 32 bits."""
    v &= M32
    return v - (1 << 32) if v >> 31 else v
