"""Object mutator: compiled progs/*.bpfd objects and clang-19 builds of tests/data/c and
tests/data/loader (plus tests/data/bad_objects), corrupted and run through ``bpfdsl
check``, ``disasm``, ``run`` (interpreter; as root also the kernel) and, as root,
``load`` + ``unload``.  Every command must end with its result or a clean error (a
diagnostic with a code, exit 1/2/3): no traceback, no raw Python message; and nothing
may stay behind: no bpf fd in the process, nothing on bpffs after ``unload`` (the
worker's own bpffs; maps pinned by name, libbpf's LIBBPF_PIN_BY_NAME, stay by design
after ``load`` and are removed by the case).

A mutation is a list of patches on the base object (``(offset, new bytes)`` or a
truncation), so a failure reduces to the few patches that matter.  Mutations: random bit
flips and bytes; truncation; ELF header fields (e_shoff, e_shnum, e_shstrndx,
e_shentsize, class, data, machine); section header fields (name, type, flags, offset,
size, link, info, entsize); instruction fields (opcode, registers, offset, immediate);
symbol table entries; relocation entries; the BTF header, type records (kind, vlen, name,
size/type, array element counts: map type/key/value/max_entries of BTF-defined maps) and
string table; the .BTF.ext header and records; section contents zeroed or copied over
another section's.
"""

from __future__ import annotations

import os
import random
import struct
import tempfile

from .cli_run import judge
from .harness import (
    DATA,
    PROGS,
    Case,
    Fuzzer,
    Result,
    clear_private_pins,
    ddmin,
    private_pins,
)

EDGE32 = [0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF, 0x100, 0xFFFF, 0x10000, 0x7FFFFFFF, 0x80000000,
          0xFFFFFFFE, 0xFFFFFFFF]  # fmt: skip
EDGE64 = EDGE32 + [1 << 32, (1 << 63) - 1, 1 << 63, (1 << 64) - 1]
FRAME = bytes.fromhex(  # Ethernet/IPv4/UDP to port 53, 60 bytes
    "020000000002020000000001080045000032000140004011f8c60a010101c0000201"
    "04d20035001e0000" + "71" * 22
)


# ---- the ELF layout (64-bit little endian, as bpfdsl.obj.collection requires) ----


class Section:
    __slots__ = ("index", "name", "type", "flags", "offset", "size", "link", "info",
                 "entsize", "hdr")  # fmt: skip

    def __init__(self, index, name, typ, flags, offset, size, link, info, entsize, hdr):
        self.index, self.name, self.type, self.flags = index, name, typ, flags
        self.offset, self.size, self.link, self.info = offset, size, link, info
        self.entsize, self.hdr = entsize, hdr


SHDR = struct.Struct("<IIQQQQIIQQ")  # Elf64_Shdr


def sections(data: bytes) -> list[Section]:
    """The section headers of ``data`` (empty when they cannot be read)."""
    try:
        if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
            return []
        (shoff,) = struct.unpack_from("<Q", data, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
        if shentsize != SHDR.size or shnum > 4096:
            return []
        raw = [SHDR.unpack_from(data, shoff + i * SHDR.size) for i in range(shnum)]
        stroff = raw[shstrndx][4]
        out = []
        for i, h in enumerate(raw):
            end = data.find(b"\0", stroff + h[0])
            name = data[stroff + h[0] : end].decode("latin-1") if end >= 0 else "?"
            out.append(Section(i, name, h[1], h[2], h[4], h[5], h[6], h[7], h[9],
                               shoff + i * SHDR.size))  # fmt: skip
        return out
    except (struct.error, IndexError, OverflowError, ValueError):  # a corrupt header
        return []


def apply(base: bytes, patches: list) -> bytes:
    """``base`` with ``patches`` applied in order: ``(offset, bytes)`` overwrites (clipped
    to the data), ``("cut", n)`` truncates to n bytes."""
    data = bytearray(base)
    for p in patches:
        if p[0] == "cut":
            del data[p[1] :]
        else:
            off, new = p
            if off < len(data):
                data[off : off + len(new)] = new[: max(0, len(data) - off)]
    return bytes(data)


class Mutator:
    """Makes patch lists for one base object."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def _u32(self, off: int) -> tuple:
        return (off, struct.pack("<I", self.r.choice(EDGE32 + [self.r.getrandbits(32)])))

    def _u64(self, off: int) -> tuple:
        return (off, struct.pack("<Q", self.r.choice(EDGE64 + [self.r.getrandbits(64)])))

    def _u16(self, off: int) -> tuple:
        return (off, struct.pack("<H", self.r.choice([0, 1, 2, 0xFF, 0x100, 0xFFFF,
                                                      self.r.getrandbits(16)])))  # fmt: skip

    def bitflip(self, data, secs):
        out = []
        for _ in range(self.r.choice((1, 1, 2, 4, 8))):
            off = self.r.randrange(len(data))
            out.append((off, bytes([data[off] ^ (1 << self.r.randrange(8))])))
        return out

    def byte(self, data, secs):
        off = self.r.randrange(len(data))
        return [(off, bytes([self.r.choice((0, 0xFF, 0x7F, 0x80, self.r.getrandbits(8)))]))]

    def truncate(self, data, secs):
        if secs and self.r.random() < 0.5:
            s = self.r.choice(secs)
            return [("cut", max(0, s.offset + self.r.choice((0, 1, s.size // 2, s.size - 1))))]
        return [("cut", self.r.randrange(len(data)))]

    def elf_header(self, data, secs):
        field = self.r.choice(["shoff", "shnum", "shstrndx", "shentsize", "class", "data",
                               "machine", "type", "version"])  # fmt: skip
        if field == "shoff":
            return [self._u64(0x28)]
        if field in ("shnum", "shstrndx", "shentsize"):
            return [self._u16({"shentsize": 0x3A, "shnum": 0x3C, "shstrndx": 0x3E}[field])]
        if field == "class":
            return [(4, bytes([self.r.choice((0, 1, 3))]))]
        if field == "data":
            return [(5, bytes([self.r.choice((0, 2, 3))]))]
        if field == "machine":
            return [(0x12, struct.pack("<H", self.r.choice((0, 62, 0xF6, 0xFFFF))))]
        if field == "type":
            return [(0x10, struct.pack("<H", self.r.choice((0, 2, 3, 4, 0xFFFF))))]
        return [(0x14, struct.pack("<I", self.r.choice((0, 2))))]

    def section_header(self, data, secs):
        if not secs:
            return self.bitflip(data, secs)
        s = self.r.choice(secs)
        field = self.r.randrange(10)
        offs = [0, 4, 8, 16, 24, 32, 40, 44, 48, 56]
        off = s.hdr + offs[field]
        if field in (0, 1, 6, 7):
            return [self._u32(off)]
        if field in (4, 5) and self.r.random() < 0.5:  # offset/size just past the end
            v = len(data) + self.r.choice((-1, 0, 1, 8)) - (s.offset if field == 5 else 0)
            return [(off, struct.pack("<Q", max(0, v)))]
        return [self._u64(off)]

    def _entries(self, secs, pred, size):
        cands = [s for s in secs if pred(s) and s.size >= size]
        if not cands:
            return None, None
        s = self.r.choice(cands)
        return s, s.offset + size * self.r.randrange(s.size // size)

    def insn(self, data, secs):
        s, at = self._entries(secs, lambda s: s.type == 1 and s.flags & 4, 8)  # SHF_EXECINSTR
        if s is None:
            return self.bitflip(data, secs)
        part = self.r.choice(["opcode", "regs", "off", "imm", "ld_imm64", "exit"])
        if part == "opcode":
            return [(at, bytes([self.r.getrandbits(8)]))]
        if part == "regs":  # dst in the low nibble, src in the high (registers above 10 too)
            return [(at + 1, bytes([self.r.randrange(16) | self.r.randrange(16) << 4]))]
        if part == "off":
            return [(at + 2, struct.pack("<h", self.r.choice((0, 1, -1, -2, 0x7FFF, -0x8000,
                                                              self.r.getrandbits(15)))))]  # fmt: skip
        if part == "imm":
            return [self._u32(at + 4)]
        if part == "ld_imm64":
            return [(at, b"\x18"), self._u32(at + 4)]
        return [(at, b"\x95\x00\x00\x00\x00\x00\x00\x00")]

    def symbol(self, data, secs):
        s, at = self._entries(secs, lambda s: s.type == 2, 24)  # SHT_SYMTAB
        if s is None:
            return self.bitflip(data, secs)
        k = self.r.randrange(5)
        if k == 0:
            return [self._u32(at)]  # st_name
        if k == 1:
            return [(at + 4, bytes([self.r.getrandbits(8)]))]  # st_info
        if k == 2:
            return [self._u16(at + 6)]  # st_shndx
        return [self._u64(at + (8 if k == 3 else 16))]  # st_value, st_size

    def relocation(self, data, secs):
        s, at = self._entries(secs, lambda s: s.type == 9, 16)  # SHT_REL
        if s is None:
            return self.bitflip(data, secs)
        k = self.r.randrange(3)
        if k == 0:
            return [self._u64(at)]  # r_offset
        if k == 1:
            return [self._u32(at + 12)]  # symbol index
        return [self._u32(at + 8)]  # type

    def _btf(self, secs, name):
        return next((s for s in secs if s.name == name and s.size >= 24), None)

    def btf(self, data, secs):
        s = self._btf(secs, ".BTF")
        if s is None:
            return self.bitflip(data, secs)
        try:
            hdr_len, type_off, type_len, str_off, str_len = struct.unpack_from(
                "<IIIII", data, s.offset + 4
            )
        except struct.error:
            return self.bitflip(data, secs)
        k = self.r.random()
        if k < 0.25:  # a header field
            return [self._u32(s.offset + self.r.choice((4, 8, 12, 16, 20)))]
        if k < 0.3:
            return [(s.offset, struct.pack("<H", self.r.choice((0, 0x9FEB, 0xEB9E))))]
        types = s.offset + hdr_len + type_off
        if k < 0.75 and type_len >= 12:  # a word of the type records
            at = types + 4 * self.r.randrange(type_len // 4)
            if self.r.random() < 0.5:  # a kind/vlen word: the second or a later one
                return [
                    (at, struct.pack("<I", self.r.randrange(1 << 16) | self.r.randrange(32) << 24))
                ]
            return [self._u32(at)]
        if k < 0.9:  # an ARRAY's nelems: BTF-defined maps encode type/key/value/max_entries so
            spots = _btf_arrays(data, types, type_len)
            if spots:
                return [self._u32(self.r.choice(spots))]
        strs = s.offset + hdr_len + str_off
        if str_len > 1:  # the string table: a NUL becomes text, or text a NUL
            at = strs + self.r.randrange(str_len)
            return [(at, bytes([self.r.choice((0, 0x41, 0x2E, 0xFF))]))]
        return self.bitflip(data, secs)

    def btf_ext(self, data, secs):
        s = self._btf(secs, ".BTF.ext")
        if s is None:
            return self.bitflip(data, secs)
        if self.r.random() < 0.4:
            return [self._u32(s.offset + self.r.choice((4, 8, 12, 16, 20, 24, 28)))]
        at = s.offset + 4 * self.r.randrange(max(1, s.size // 4))
        return [self._u32(at)]

    def section_data(self, data, secs):
        cands = [s for s in secs if s.size and s.type != 8]  # not NOBITS
        if not cands:
            return self.bitflip(data, secs)
        s = self.r.choice(cands)
        if self.r.random() < 0.5 or len(cands) < 2:
            return [(s.offset, bytes(min(s.size, 4096)))]
        o = self.r.choice(cands)
        return [(s.offset, data[o.offset : o.offset + min(s.size, o.size)])]

    WEIGHTS = {"bitflip": 10, "byte": 4, "truncate": 4, "elf_header": 3, "section_header": 8,
               "insn": 10, "symbol": 5, "relocation": 5, "btf": 12, "btf_ext": 5,
               "section_data": 3}  # fmt: skip

    def mutate(self, data: bytes) -> tuple[list, list[str]]:
        names = list(self.WEIGHTS)
        ops = self.r.choices(
            names, weights=[self.WEIGHTS[n] for n in names], k=self.r.choice((1, 1, 2, 3))
        )
        patches: list = []
        cur = data
        for op in ops:
            secs = sections(cur)
            if not cur:
                break
            try:
                new = getattr(self, op)(cur, secs)
            except (struct.error, IndexError, OverflowError, ValueError):  # offsets from a
                new = self.bitflip(cur, secs)  # header an earlier mutation corrupted
            patches += new
            cur = apply(cur, new)
        return patches, ops


def _btf_arrays(data: bytes, start: int, length: int) -> list[int]:
    """File offsets of the ``nelems`` word of every BTF_KIND_ARRAY record.  Record sizes
    after the 12-byte btf_type: kernel include/uapi/linux/btf.h."""
    fixed = {1: 4, 3: 12, 14: 4, 17: 4}  # INT, ARRAY, VAR, DECL_TAG
    per = {4: 12, 5: 12, 6: 8, 13: 8, 15: 12, 19: 12}  # STRUCT UNION ENUM PROTO DATASEC ENUM64
    out, pos, end = [], start, start + length
    try:
        while pos + 12 <= end:
            (info,) = struct.unpack_from("<I", data, pos + 4)
            kind, vlen = (info >> 24) & 0x1F, info & 0xFFFF
            pos += 12
            if kind == 3:
                out.append(pos + 8)
            pos += fixed.get(kind, 0) + vlen * per.get(kind, 0)
    except (struct.error, OverflowError, ValueError):
        pass
    return out


# ---- the corpus ----------------------------------------------------------------------


def base_objects() -> list[tuple[str, bytes]]:
    """(label, ELF bytes): compiled progs, clang builds of tests/data/c and tests/data/loader
    (when clang-19 is installed), and the committed tests/data/bad_objects."""
    import shutil

    from .api import compile_file

    out = [
        (f"progs/{p.name} (compiled)", compile_file(p).obj) for p in sorted(PROGS.glob("*.bpfd"))
    ]
    if shutil.which("clang-19"):
        from support import objbuild  # clang-19 -O2 -g -target bpf, once per session

        for d in ("c", "loader"):
            for src in sorted((DATA / d).glob("*.c")):
                try:
                    out.append(
                        (
                            f"tests/data/{d}/{src.name} (clang-19)",
                            objbuild.build(src.stem).read_bytes(),
                        )
                    )
                except Exception:
                    continue
    out += [(f"tests/data/bad_objects/{p.name}", p.read_bytes())
            for p in sorted((DATA / "bad_objects").glob("*.o"))]  # fmt: skip
    return out


def cases(seed: int, count: int, kernel: bool):
    """``count`` corrupted objects; payload (label, base bytes, patches, kernel, json)."""
    rng = random.Random(seed)
    base = base_objects()
    mut = Mutator(rng)
    for i in range(count):
        label, data = rng.choice(base)
        patches, ops = mut.mutate(data)
        yield Case(
            (label, data, patches, kernel, i % 3 == 0), f"{label} + {', '.join(ops)} (object {i})"
        )


# ---- running one ---------------------------------------------------------------------

_TMP: list[str] = []


def _workdir() -> str:
    if not _TMP or not os.path.isdir(_TMP[0]):
        _TMP[:] = [tempfile.mkdtemp(prefix="bpfdsl-fuzz-obj-")]
    return _TMP[0]


def program_names(path: str) -> list[str]:
    """The programs ``bpfdsl run --prog`` may name (none when the object does not read)."""
    from .api import DiagnosticError, read_object

    try:
        return list(read_object(path).programs)[:2]
    except DiagnosticError:
        return []
    except Exception:
        return []


KERNEL_MEMORY = 256 << 20  # bytes of map memory a case may ask the kernel for


def kernel_memory(path: str) -> int:
    """Roughly the bytes the kernel would preallocate for the maps of ``path``: a corrupted
    max_entries (10^8) is a legal map that takes the kernel minutes and gigabytes of the
    shared machine to create (as libbpf would), so such cases skip the kernel commands."""
    from .api import read_object

    try:
        maps = read_object(path).maps.values()
    except Exception:
        return 0
    return sum(m.max_entries * (m.key_size + m.value_size * 2 + 64) for m in maps)


def commands(path: str, kernel: bool, as_json: bool) -> list[list[str]]:
    j = ["--json"] if as_json else []
    kernel = kernel and kernel_memory(path) <= KERNEL_MEMORY
    out = [j + ["check", path], j + ["disasm", path]]
    for prog in program_names(path) or [None]:
        sel = ["--prog", prog] if prog else []
        out.append(j + ["run", path, *sel, "--hex", FRAME.hex(), "--engine", "interp"])
        if kernel:
            out.append(j + ["run", path, *sel, "--hex", FRAME.hex(), "--engine", "kernel"])
    return out


def run_case(payload) -> Result:
    label, base, patches, kernel, as_json = payload
    path = os.path.join(_workdir(), "mutant.o")
    with open(path, "wb") as f:
        f.write(apply(base, patches))
    worst = Result("accepted")
    for argv in commands(path, kernel, as_json):
        res = judge(argv)
        if res.failed:
            return res
        pins = private_pins()
        if pins:
            clear_private_pins()
            return Result("leak", f"bpfdsl {argv[1] if as_json else argv[0]}: pins",
                          f"$ bpfdsl {' '.join(argv)}\nleft on bpffs: {', '.join(pins)}")  # fmt: skip
        if res.outcome == "error":
            worst = Result("refused")
    if kernel and kernel_memory(path) <= KERNEL_MEMORY:
        pin_dir = "/sys/fs/bpf/fuzz_obj"
        res = judge((["--json"] if as_json else []) + ["load", path, "--pin-dir", pin_dir])
        if res.failed:
            return res
        if res.outcome == "ok":
            res = judge(["unload", pin_dir])
            if res.failed or res.outcome != "ok":
                return Result("leak", "bpfdsl unload failed after a load", res.text)
        else:
            worst = Result("refused")
        left = [p for p in private_pins() if not _by_name(p)]
        clear_private_pins()
        if left:
            return Result("leak", "bpfdsl load/unload: pins", f"left on bpffs: {', '.join(left)}")
    return worst


def _by_name(path: str) -> bool:
    """A map pinned by name (libbpf LIBBPF_PIN_BY_NAME: /sys/fs/bpf/NAME), kept by design."""
    return path.count("/") == 4 and os.path.basename(path) != "fuzz_obj"


def reproducer(payload) -> str:
    label, base, patches, kernel, as_json = payload
    desc = []
    for p in patches:
        if p[0] == "cut":
            desc.append(f"truncate to {p[1]} bytes")
        else:
            off, new = p
            old = base[off : off + len(new)]
            desc.append(
                f"at {off:#x}: {old[:16].hex()} -> {new[:16].hex()}"
                + (" ..." if len(new) > 16 else "")
            )
    cmds = "; ".join(" ".join(c) for c in commands("mutant.o", kernel, as_json))
    return (
        f"mutant.o = {label} with {len(patches)} patch(es):\n  " + "\n  ".join(desc) + f"\n$ {cmds}"
    )


def shrink(payload, fails, deadline: float):
    label, base, patches, kernel, as_json = payload
    if len(patches) > 1:
        patches = ddmin(
            patches, lambda ps: fails((label, base, ps, kernel, as_json)), deadline=deadline
        )
    return (label, base, patches, kernel, as_json)


FUZZER = Fuzzer("objects", cases, run_case, reproducer, shrink, timeout=60.0)
