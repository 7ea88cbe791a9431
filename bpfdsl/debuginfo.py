"""Debug info for the back end: llvmlite.ir metadata from which LLVM's BPF backend emits BTF.

Stage: back end (layer 4).  Takes an ``llvmlite.ir.Module`` being built by codegen and adds
DWARF-style metadata (``!DICompileUnit``, ``!DISubprogram``, ``!DILocation``,
``!DIGlobalVariable``...) exactly in the shapes clang-19 produces for libbpf-style C
(``clang-19 -O2 -g -target bpf -S -emit-llvm``; see docs/internals-btf.md).  LLVM turns it
into ``.BTF`` (types, FUNC, VAR, DATASEC) and ``.BTF.ext`` (func info, line info naming the
``.bpfd`` file and line).  Also creates the globals libbpf looks for: BTF-defined maps in
``.maps``, the ``license`` string and ``.rodata`` configs.

API (one :class:`DebugInfo` per module)::

    di = DebugInfo(module, "progs/x.bpfd", source=text)
    u32 = di.int_type("u32")                  # DIType: .md (metadata), .size/.align (bytes)
    be16 = di.int_type("be16")                # typedef __be16 -> __u16 -> unsigned short
    rec = di.struct_type("rec", [("a", u32), ("b", di.int_type("u64"))])  # offsets 0, 8
    di.array_type(u32, 4); di.pointer_type(rec); di.ctx_type("xdp_md")
    m = di.map_global("counts", MapType.HASH, key=u32, value=rec, max_entries=16, line=3)
    di.license("GPL")
    port = di.config_global("port", be16, 53, line=2)       # const volatile, in .rodata
    val = load_config(builder, port)                        # volatile load: never folded
    fn_di = di.function(fn, line=5, ctx="xdp_md")            # DISubprogram, nounwind
    instr.set_metadata("dbg", fn_di.loc(6, 5))               # or builder.debug_metadata = ...
    di.finalize()                                            # CU globals, llvm.compiler.used

Sizes are bytes unless a name says ``bits``; integers in BTF are host (little-endian) order
for BPF; ``be*`` types are typedefs that only name the byte order for tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llvmlite import ir

from bpfdsl.uapi import MapType

DW_LANG = "DW_LANG_C11"
PRODUCER = "bpfdsl"

# (DWARF base type name, bits, encoding) for each language integer, with its uapi typedef.
_INTS: dict[str, tuple[str, str, int, str]] = {
    # language name: (typedef, C base type, bits, DW encoding)
    "u8": ("__u8", "unsigned char", 8, "DW_ATE_unsigned_char"),
    "u16": ("__u16", "unsigned short", 16, "DW_ATE_unsigned"),
    "u32": ("__u32", "unsigned int", 32, "DW_ATE_unsigned"),
    "u64": ("__u64", "unsigned long long", 64, "DW_ATE_unsigned"),
    "i8": ("__s8", "signed char", 8, "DW_ATE_signed_char"),
    "i16": ("__s16", "short", 16, "DW_ATE_signed"),
    "i32": ("__s32", "int", 32, "DW_ATE_signed"),
    "i64": ("__s64", "long long", 64, "DW_ATE_signed"),
}
_BE = {"be16": "u16", "be32": "u32", "be64": "u64"}  # typedef __beN -> __uN (linux/types.h)

# Map types whose kernel implementation refuses BTF key/value types (map_check_no_btf):
# libbpf-style C declares them with __uint(key_size, N) / __uint(value_size, N).
SIZE_ONLY_MAP_TYPES: frozenset[int] = frozenset(
    {
        MapType.PROG_ARRAY,
        MapType.PERF_EVENT_ARRAY,
        MapType.DEVMAP,
        MapType.DEVMAP_HASH,
        MapType.CPUMAP,
        MapType.XSKMAP,
        MapType.SOCKMAP,
        MapType.SOCKHASH,
        MapType.ARRAY_OF_MAPS,
        MapType.HASH_OF_MAPS,
        MapType.STACK_TRACE,
        MapType.RINGBUF,
    }
)

# Kernel context structs (include/uapi/linux/bpf.h; offsets checked against
# /sys/kernel/btf/vmlinux on 6.18).  Members: (name, kind, byte offset) where kind is
# "u32", "u64", "ptr" (void *, the kernel's __bpf_md_ptr) or "u32x4" (__u32[4]).
_CTX_STRUCTS: dict[str, tuple[int, tuple[tuple[str, str, int], ...]]] = {
    "xdp_md": (
        24,
        tuple(
            (n, "u32", 4 * i)
            for i, n in enumerate(
                "data data_end data_meta ingress_ifindex rx_queue_index egress_ifindex".split()
            )
        ),
    ),
    "sk_msg_md": (
        80,
        (
            ("data", "ptr", 0),
            ("data_end", "ptr", 8),
            ("family", "u32", 16),
            ("remote_ip4", "u32", 20),
            ("local_ip4", "u32", 24),
            ("remote_ip6", "u32x4", 28),
            ("local_ip6", "u32x4", 44),
            ("remote_port", "u32", 60),
            ("local_port", "u32", 64),
            ("size", "u32", 68),
            ("sk", "ptr", 72),
        ),
    ),
    "bpf_sock_ops": (
        224,
        (
            ("op", "u32", 0),
            ("args", "u32x4", 4),
            ("family", "u32", 20),
            ("remote_ip4", "u32", 24),
            ("local_ip4", "u32", 28),
            ("remote_ip6", "u32x4", 32),
            ("local_ip6", "u32x4", 48),
            *(
                (n, "u32", 64 + 4 * i)
                for i, n in enumerate(
                    "remote_port local_port is_fullsock snd_cwnd srtt_us bpf_sock_ops_cb_flags state "
                    "rtt_min snd_ssthresh rcv_nxt snd_nxt snd_una mss_cache ecn_flags rate_delivered "
                    "rate_interval_us packets_out retrans_out total_retrans segs_in data_segs_in "
                    "segs_out data_segs_out lost_out sacked_out sk_txhash".split()
                )
            ),
            ("bytes_received", "u64", 168),
            ("bytes_acked", "u64", 176),
            ("sk", "ptr", 184),
            ("skb_data", "ptr", 192),
            ("skb_data_end", "ptr", 200),
            ("skb_len", "u32", 208),
            ("skb_tcp_flags", "u32", 212),
            ("skb_hwtstamp", "u64", 216),
        ),
    ),
}


@dataclass(frozen=True, slots=True)
class DIType:
    """A debug type: ``md`` is the llvmlite metadata node; ``size``/``align`` in bytes."""

    md: ir.DIValue
    size: int
    align: int


@dataclass(frozen=True, slots=True)
class FunctionDebug:
    """The DISubprogram of one program function; :meth:`loc` makes its ``!dbg`` locations."""

    module: ir.Module
    subprogram: ir.DIValue

    def loc(self, line: int, col: int = 0) -> ir.DIValue:
        """``!DILocation(line, column)`` in this function (1-based, as in the .bpfd source)."""
        return self.module.add_debug_info(
            "DILocation", {"line": line, "column": col, "scope": self.subprogram}
        )


def _ref(node: ir.DIValue) -> ir.DIToken:
    """A back-reference (``!N``) as a token: llvmlite hashes operands recursively, so a
    metadata cycle (member -> struct -> members) must not hold the node object itself."""
    return ir.DIToken(node.get_reference())


class _VolatileLoad(ir.LoadInstr):
    """``load volatile``: llvmlite's LoadInstr has no volatile flag."""

    def descr(self, buf: list[str]) -> None:
        inner: list[str] = []
        super().descr(inner)
        buf.append("".join(inner).replace("load ", "load volatile ", 1))


def load_config(builder: ir.IRBuilder, gv: ir.GlobalVariable, name: str = "") -> ir.Value:
    """Emit a volatile load of a ``.rodata`` config global (as C's ``const volatile``).

    Volatile keeps LLVM from folding the initializer, so a loader may patch ``.rodata``.
    """
    instr = _VolatileLoad(builder.block, gv, name=name, typ=gv.value_type)
    instr.align = gv.align
    builder._insert(instr)
    return instr


class DebugInfo:
    """Debug metadata and libbpf-convention globals for one llvmlite module.

    ``filename`` is the .bpfd path as the user gave it (it appears in ``.BTF.ext`` line
    info and in ``bpftool prog dump`` output); ``source`` (the file text) is embedded in the
    DIFile so LLVM puts each source line in BTF without reading the file again.
    """

    def __init__(
        self,
        module: ir.Module,
        filename: str,
        *,
        source: str | None = None,
        directory: str = "",
        producer: str = PRODUCER,
    ) -> None:
        self.module = module
        file_ops: dict[str, object] = {"filename": filename, "directory": directory}
        if source is not None:
            file_ops["source"] = source
        self.file = module.add_debug_info("DIFile", file_ops)
        self.cu = module.add_debug_info(
            "DICompileUnit",
            {
                "language": ir.DIToken(DW_LANG),
                "file": self.file,
                "producer": producer,
                "isOptimized": True,
                "runtimeVersion": 0,
                "emissionKind": ir.DIToken("FullDebug"),
                "nameTableKind": ir.DIToken("None"),
            },
            is_distinct=True,
        )
        module.add_named_metadata("llvm.dbg.cu", self.cu)
        flags = module.add_named_metadata("llvm.module.flags")
        i32 = ir.IntType(32)
        flags.add(module.add_metadata([i32(7), "Dwarf Version", i32(5)]))
        flags.add(module.add_metadata([i32(2), "Debug Info Version", i32(3)]))
        self._globals: list[ir.DIValue] = []  # DIGlobalVariableExpressions for the CU
        self._used: list[ir.GlobalValue] = []  # llvm.compiler.used
        self._types: dict[str, DIType] = {}
        self._finalized = False

    # ---- types -------------------------------------------------------------------------

    def _basic(self, name: str, bits: int, encoding: str) -> DIType:
        key = "basic " + name
        if key not in self._types:
            md = self.module.add_debug_info(
                "DIBasicType", {"name": name, "size": bits, "encoding": ir.DIToken(encoding)}
            )
            self._types[key] = DIType(md, bits // 8, bits // 8)
        return self._types[key]

    def typedef(self, name: str, base: DIType, line: int = 0) -> DIType:
        """``typedef base name;`` (BTF TYPEDEF)."""
        md = self.module.add_debug_info(
            "DIDerivedType",
            {
                "tag": ir.DIToken("DW_TAG_typedef"),
                "name": name,
                "file": self.file,
                "line": line,
                "baseType": base.md,
            },
        )
        return DIType(md, base.size, base.align)

    def int_type(self, name: str) -> DIType:
        """A language scalar: ``u8..u64``, ``i8..i64`` (as ``__u32``...), ``be16/be32/be64``
        (``__be16`` typedef of ``__u16``), ``bool`` (``_Bool``), ``char``, ``int``."""
        if name in self._types:
            return self._types[name]
        if name in _INTS:
            tdname, cname, bits, enc = _INTS[name]
            t = self.typedef(tdname, self._basic(cname, bits, enc))
        elif name in _BE:
            t = self.typedef("__" + name, self.int_type(_BE[name]))
        elif name == "bool":
            t = self._basic("_Bool", 8, "DW_ATE_boolean")
        elif name == "char":
            t = self._basic("char", 8, "DW_ATE_signed_char")
        elif name == "int":
            t = self._basic("int", 32, "DW_ATE_signed")
        else:
            raise ValueError(f"no debug type for scalar {name!r}")
        self._types[name] = t
        return t

    def pointer_type(self, base: DIType | None) -> DIType:
        """``base *`` (``None``: ``void *``); 8 bytes on BPF."""
        md = self.module.add_debug_info(
            "DIDerivedType",
            {
                "tag": ir.DIToken("DW_TAG_pointer_type"),
                "baseType": base.md if base else None,
                "size": 64,
            },
        )
        return DIType(md, 8, 8)

    def qualified(self, base: DIType, *quals: str) -> DIType:
        """``const``/``volatile`` qualifiers, outermost first: ``qualified(t, "const", "volatile")``."""
        md = base.md
        for q in reversed(quals):
            md = self.module.add_debug_info(
                "DIDerivedType", {"tag": ir.DIToken(f"DW_TAG_{q}_type"), "baseType": md}
            )
        return DIType(md, base.size, base.align)

    def array_type(self, elem: DIType, count: int) -> DIType:
        """``elem[count]`` (BTF ARRAY with the ``__ARRAY_SIZE_TYPE__`` index)."""
        sub = self.module.add_debug_info("DISubrange", {"count": count})
        md = self.module.add_debug_info(
            "DICompositeType",
            {
                "tag": ir.DIToken("DW_TAG_array_type"),
                "baseType": elem.md,
                "size": elem.size * count * 8,
                "elements": self.module.add_metadata([sub]),
            },
        )
        return DIType(md, elem.size * count, elem.align)

    def struct_type(
        self,
        name: str | None,
        fields: Sequence[tuple[str, DIType] | tuple[str, DIType, int]],
        *,
        line: int = 0,
        size: int | None = None,
    ) -> DIType:
        """``struct name { ... }`` with C natural alignment (FIELD-BUGS B07).

        ``fields``: ``(name, type)`` laid out at the next multiple of the type's alignment,
        or ``(name, type, byte_offset)`` when the caller fixes the offset (kernel layouts).
        ``size`` defaults to the end of the last member rounded up to the struct alignment.
        ``name=None`` makes an anonymous struct.  Member offsets in BTF are in bits.
        """
        members: list[ir.DIValue] = []
        ops: dict[str, object] = {
            "tag": ir.DIToken("DW_TAG_structure_type"),
            "file": self.file,
            "line": line,
        }
        if name:
            ops["name"] = name
        # The struct node must exist before its members (they name it as scope); it is
        # distinct, so fill in size/elements afterwards.
        st = self.module.add_debug_info("DICompositeType", dict(ops, size=0), is_distinct=True)
        off = 0
        align = 1
        for f in fields:
            fname, ftype = f[0], f[1]
            if len(f) == 3:
                off = f[2]
            else:
                off = -(-off // ftype.align) * ftype.align
            align = max(align, ftype.align)
            members.append(
                self.module.add_debug_info(
                    "DIDerivedType",
                    {
                        "tag": ir.DIToken("DW_TAG_member"),
                        "name": fname,
                        "scope": _ref(st),
                        "file": self.file,
                        "line": line,
                        "baseType": ftype.md,
                        "size": ftype.size * 8,
                        "offset": off * 8,
                    },
                )
            )
            off += ftype.size
        total = size if size is not None else -(-off // align) * align
        ops.update(size=total * 8, elements=self.module.add_metadata(members))
        st.operands = tuple(sorted(self.module._fix_di_operands(ops.items())))
        return DIType(st, total, align)

    def ctx_type(self, ctx: str) -> DIType:
        """The kernel context struct named ``ctx`` (``uapi.ProgramKind.ctx``: ``xdp_md``,
        ``sk_msg_md``, ``bpf_sock_ops``); unknown names give an empty struct of that name
        (the kernel matches the program's ctx argument by struct name)."""
        key = "struct " + ctx
        if key not in self._types:
            size, layout = _CTX_STRUCTS.get(ctx, (0, ()))
            kinds = {
                "u32": self.int_type("u32"),
                "u64": self.int_type("u64"),
                "ptr": self.pointer_type(None),
            }
            kinds["u32x4"] = self.array_type(kinds["u32"], 4)
            self._types[key] = self.struct_type(
                ctx, [(n, kinds[k], o) for n, k, o in layout], size=size
            )
        return self._types[key]

    # ---- globals -----------------------------------------------------------------------

    def _global_var(self, gv: ir.GlobalVariable, name: str, ty: DIType, line: int) -> None:
        var = self.module.add_debug_info(
            "DIGlobalVariable",
            {
                "name": name,
                "scope": _ref(self.cu),
                "file": self.file,
                "line": line,
                "type": ty.md,
                "isLocal": False,
                "isDefinition": True,
            },
            is_distinct=True,
        )
        gve = self.module.add_debug_info(
            "DIGlobalVariableExpression",
            {"var": var, "expr": self.module.add_debug_info("DIExpression", {})},
        )
        gv.set_metadata("dbg", gve)
        self._globals.append(gve)

    def keep(self, *values: ir.GlobalValue) -> None:
        """Add globals/functions to ``llvm.compiler.used`` (never dropped by the optimizer)."""
        self._used.extend(values)

    def map_global(
        self,
        name: str,
        map_type: int,
        *,
        max_entries: int,
        key: DIType | None = None,
        value: DIType | None = None,
        key_size: int | None = None,
        value_size: int | None = None,
        map_flags: int = 0,
        pinning: int = 0,
        line: int = 0,
    ) -> ir.GlobalVariable:
        """A BTF-defined map: ``struct { __uint(type, T); __type(key, K); ... } name SEC(".maps")``.

        ``__uint(f, v)`` is member ``f`` of type ``int (*)[v]``; ``__type(f, T)`` is ``T *``
        (libbpf ``bpf_helpers.h``).  For :data:`SIZE_ONLY_MAP_TYPES` (cpumap, devmap,
        sockhash...) key/value types become ``key_size``/``value_size`` as libbpf-style C
        writes them; sizes may also be given directly.  ``map_flags``/``pinning`` (uapi
        ``BPF_F_*``, ``LIBBPF_PIN_BY_NAME`` = 1) appear only when nonzero.
        Returns the ``.maps`` global (32+ bytes of zeroed pointers), kept in compiler.used.
        """
        int_t = self.int_type("int")

        def uint(v: int) -> DIType:
            return self.pointer_type(self.array_type(int_t, v))

        size_only = int(map_type) in SIZE_ONLY_MAP_TYPES
        fields: list[tuple[str, DIType]] = [("type", uint(int(map_type)))]
        for what, ty, sz in (("key", key, key_size), ("value", value, value_size)):
            if ty is not None and not size_only:
                fields.append((what, self.pointer_type(ty)))
            elif ty is not None or sz is not None:
                fields.append((f"{what}_size", uint(sz if sz is not None else ty.size)))
        fields.append(("max_entries", uint(max_entries)))
        if map_flags:
            fields.append(("map_flags", uint(map_flags)))
        if pinning:
            fields.append(("pinning", uint(pinning)))
        st = self.struct_type(None, fields, line=line)
        ptr = ir.PointerType()
        gv = ir.GlobalVariable(self.module, ir.LiteralStructType([ptr] * len(fields)), name)
        gv.initializer = ir.Constant(gv.value_type, None)
        gv.section = ".maps"
        gv.align = 8
        self._global_var(gv, name, st, line)
        self.keep(gv)
        return gv

    def license(self, text: str = "GPL", name: str = "LICENSE") -> ir.GlobalVariable:
        """``char LICENSE[] SEC("license") = text;`` (NUL-terminated; the kernel reads it
        to allow GPL-only helpers)."""
        data = text.encode() + b"\0"
        ty = ir.ArrayType(ir.IntType(8), len(data))
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, bytearray(data))
        gv.section = "license"
        gv.align = 1
        self._global_var(gv, name, self.array_type(self.int_type("char"), len(data)), 0)
        self.keep(gv)
        return gv

    def config_global(
        self,
        name: str,
        ty: DIType,
        value: int | bytes,
        *,
        line: int = 0,
        ir_type: ir.Type | None = None,
    ) -> ir.GlobalVariable:
        """``const volatile T name = value;`` in ``.rodata`` (BTF VAR + DATASEC .rodata), the
        load-time config a loader may overwrite.  ``value``: an int (stored in host order —
        for ``be*`` types pass the already byte-swapped value) or raw bytes of ``ty.size``.
        Read it with :func:`load_config`."""
        if ir_type is None:
            ir_type = (
                ir.IntType(ty.size * 8)
                if isinstance(value, int)
                else ir.ArrayType(ir.IntType(8), ty.size)
            )
        gv = ir.GlobalVariable(self.module, ir_type, name)
        gv.initializer = ir.Constant(
            ir_type, bytearray(value) if isinstance(value, bytes) else value
        )
        gv.global_constant = True
        gv.section = ".rodata"
        gv.align = ty.align
        self._global_var(gv, name, self.qualified(ty, "const", "volatile"), line)
        self.keep(gv)
        return gv

    def function(
        self,
        fn: ir.Function,
        *,
        line: int,
        ctx: str | DIType | None = "xdp_md",
        arg_name: str = "ctx",
        ret: DIType | None = None,
    ) -> FunctionDebug:
        """Attach a ``DISubprogram`` to ``fn`` (a program: ``int name(struct ctx *ctx)``).

        LLVM emits it as BTF FUNC + FUNC_PROTO and as ``.BTF.ext`` func info; ``fn`` is
        marked ``nounwind`` (else LLVM adds ``.eh_frame``) and kept in compiler.used.
        """
        ret = ret or self.int_type("int")
        params: list[DIType] = []
        if ctx is not None:
            cty = self.ctx_type(ctx) if isinstance(ctx, str) else ctx
            params.append(self.pointer_type(cty))
        sty = self.module.add_debug_info(
            "DISubroutineType",
            {"types": self.module.add_metadata([ret.md, *(p.md for p in params)])},
        )
        ops = {
            "name": fn.name,
            "scope": self.file,
            "file": self.file,
            "line": line,
            "type": sty,
            "scopeLine": line,
            "flags": ir.DIToken("DIFlagPrototyped"),
            "spFlags": ir.DIToken("DISPFlagDefinition | DISPFlagOptimized"),
            "unit": self.cu,
        }
        sp = self.module.add_debug_info("DISubprogram", ops, is_distinct=True)
        if params:
            arg = self.module.add_debug_info(
                "DILocalVariable",
                {
                    "name": arg_name,
                    "arg": 1,
                    "scope": _ref(sp),
                    "file": self.file,
                    "line": line,
                    "type": params[0].md,
                },
            )
            ops["retainedNodes"] = self.module.add_metadata([arg])
            sp.operands = tuple(sorted(self.module._fix_di_operands(ops.items())))
        fn.set_metadata("dbg", sp)
        fn.attributes.add("nounwind")
        self.keep(fn)
        return FunctionDebug(self.module, sp)

    def finalize(self) -> None:
        """Write the CU's ``globals:`` list and ``llvm.compiler.used``; call once, last."""
        if self._finalized:
            return
        self._finalized = True
        if self._globals:
            ops = dict(self.cu.operands)
            ops["globals"] = self.module.add_metadata(list(self._globals))
            self.cu.operands = tuple(sorted(self.module._fix_di_operands(ops.items())))
        if self._used:
            ptr = ir.PointerType()
            ty = ir.ArrayType(ptr, len(self._used))
            used = ir.GlobalVariable(self.module, ty, "llvm.compiler.used")
            used.linkage = "appending"
            used.section = "llvm.metadata"
            used.initializer = ir.Constant(ty, [v for v in self._used])
