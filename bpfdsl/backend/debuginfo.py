"""Debug info for the back end: llvmlite.ir metadata from which LLVM's BPF backend emits BTF.

Stage: back end.  Takes an ``llvmlite.ir.Module`` being built by codegen and adds
DWARF-style metadata (``!DICompileUnit``, ``!DISubprogram``, ``!DILocation``,
``!DIGlobalVariable``...) exactly in the shapes clang-19 produces for libbpf-style C
(``clang-19 -O2 -g -target bpf -S -emit-llvm``; see docs/internals-btf.md).  LLVM turns it
into ``.BTF`` (types, FUNC, VAR, DATASEC) and ``.BTF.ext`` (func info, line info naming the
``.bpfd`` file and line).  Also creates the globals libbpf looks for: BTF-defined maps in
``.maps``, the ``license`` string and ``.rodata`` configs.

API (one :class:`DebugInfo` per module)::

    di = DebugInfo(module, "progs/xdp_pass.bpfd", source=text)
    u32 = di.int_type("u32")                  # DIType: .md (metadata), .size/.align (bytes)
    be16 = di.int_type("be16")                # typedef __be16 -> __u16 -> unsigned short
    rec = di.struct_type("rec", [("a", u32), ("b", di.int_type("u64"))])  # offsets 0, 8
    di.array_type(u32, 4); di.pointer_type(rec); di.ctx_type("xdp_md")
    m = di.map_global("counts", MapType.HASH, key=u32, value=rec, max_entries=16, line=3)
    di.license("GPL")
    port = di.config_global("port", be16, 0x3500, line=2)   # 53 stored big-endian, .rodata
    val = load_config(builder, port)                        # volatile load: never folded
    fn_di = di.function(fn, line=5, ctx="xdp_md")            # DISubprogram, nounwind
    di.function(helper, line=9, ctx=None, program=False, params=[("x", u32)])  # inlined fn
    instr.set_metadata("dbg", fn_di.loc(6, 5))               # or builder.debug_metadata = ...
    di.finalize()                                            # llvm.compiler.used

Sizes are bytes unless a name says ``bits``; integers in BTF are host (little-endian) order
for BPF; ``be*`` types are typedefs that only name the byte order for tools.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llvmlite import ir

from bpfdsl.abi.ctx import ctx_struct
from bpfdsl.abi.map_types import MapType, takes_btf_key_value
from bpfdsl.backend.llvm_ext import volatile_load

T = ir.DIToken  # a bare LLVM token operand (DW_TAG_..., flags), printed unquoted

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
_C_BASIC = {  # C scalars by name: (bits, DW encoding)
    "bool": (8, "DW_ATE_boolean"), "char": (8, "DW_ATE_signed_char"), "int": (32, "DW_ATE_signed"),
}  # fmt: skip
_BE = {"be16": "u16", "be32": "u32", "be64": "u64"}  # typedef __beN -> __uN (linux/types.h)

# Kernel context structs (bpfdsl.abi.ctx: include/uapi/linux/bpf.h), member by member:
# "ptr" is the kernel's __bpf_md_ptr (8 bytes); "u32x4" is __u32[4]; in bpf_sock_ops the
# union {args[4]; reply; replylong[4]} is described by its first member.  Laid out with
# natural alignment, they reproduce the kernel offsets (tests compare with vmlinux BTF).
_CTX_KIND = {"__u32": "u32", "__u64": "u64", "__u32[4]": "u32x4", "__bpf_md_ptr": "ptr"}


def _ctx_members(ctx: str) -> list[tuple[str, str]]:
    """(member name, "u32" | "u64" | "u32x4" | "ptr") of context struct ``ctx``; [] for a
    struct abi.ctx does not describe."""
    s = ctx_struct(ctx)
    return [(f.name, _CTX_KIND[f.ctype]) for f in s.layout()] if s is not None else []


@dataclass(frozen=True, slots=True)
class DIType:
    """A debug type: ``md`` is the llvmlite metadata node; ``size``/``align`` in bytes."""

    md: ir.DIValue
    size: int
    align: int


@dataclass(frozen=True, slots=True)
class FunctionDebug:
    """The DISubprogram of one program function; :meth:`loc` makes its ``!dbg`` locations."""

    debug: DebugInfo
    subprogram: ir.DIValue

    def loc(self, line: int, col: int = 0) -> ir.DIValue:
        """``!DILocation(line, column)`` in this function (1-based, as in the .bpfd source)."""
        key = (id(self.subprogram), line, col)
        node = self.debug._locs.get(key)
        if node is None:  # the same node _di() shares, found without building its key
            node = self.debug._di("DILocation", line=line, column=col, scope=self.subprogram)
            self.debug._locs[key] = node
        return node


_NULL = ir.Constant(ir.MetaDataType(), None)  # metadata ``null`` (llvmlite prints "null")


def _key(v: object) -> object:
    """Hashable identity of a metadata operand (tokens by text, nodes by object)."""
    if isinstance(v, ir.DIToken):
        return ("token", v.value)
    if isinstance(v, ir.Value):
        return ("node", id(v))
    return v


def _ref(node: ir.DIValue) -> ir.DIToken:
    """A back-reference (``!N``) as a token: llvmlite hashes operands recursively, so a
    metadata cycle (member -> struct -> members) must not hold the node object itself."""
    return ir.DIToken(node.get_reference())


def load_config(builder: ir.IRBuilder, gv: ir.GlobalVariable, name: str = "") -> ir.Value:
    """Emit a volatile load of a ``.rodata`` config global (as C's ``const volatile``).

    Volatile keeps LLVM from folding the initializer, so a loader may patch ``.rodata``.
    """
    return volatile_load(builder, gv, gv.value_type, gv.align, name)


class DebugInfo:
    """Debug metadata and libbpf-convention globals for one llvmlite module.

    ``filename`` is the .bpfd path as the user gave it (it appears in ``.BTF.ext`` line
    info and in ``bpftool prog dump`` output); ``source`` (the file text) is embedded in the
    DIFile so LLVM puts each source line in BTF without reading the file again.
    """

    def __init__(
        self, module: ir.Module, filename: str, *, source: str | None = None,
        directory: str = "", producer: str = PRODUCER,
    ) -> None:  # fmt: skip
        self.module = module
        self._cache: dict[tuple, ir.Value] = {}
        self._locs: dict[tuple[int, int, int], ir.DIValue] = {}  # FunctionDebug.loc
        extra: dict[str, Any] = {"source": source} if source is not None else {}
        self.file = self._di("DIFile", filename=filename, directory=directory, **extra)
        self.cu = self._di(
            "DICompileUnit", distinct=True, language=T(DW_LANG), file=self.file,
            producer=producer, isOptimized=True, runtimeVersion=0,
            emissionKind=T("FullDebug"), nameTableKind=T("None"),
        )  # fmt: skip
        module.add_named_metadata("llvm.dbg.cu", self.cu)
        flags = module.add_named_metadata("llvm.module.flags")
        i32 = ir.IntType(32)
        flags.add(module.add_metadata([i32(7), "Dwarf Version", i32(5)]))
        flags.add(module.add_metadata([i32(2), "Debug Info Version", i32(3)]))
        # The CU's globals: list, grown in place (so finalize() is only needed for
        # llvm.compiler.used); made directly, not via add_metadata, so no other user shares it.
        self._globals = ir.values.MDValue(module, [], name=str(len(module.metadata)))
        self._set_ops(self.cu, **dict(self.cu.operands), globals=self._globals)
        self._used: list[ir.GlobalValue] = []  # llvm.compiler.used
        self._types: dict[str, DIType] = {}
        self._finalized = False

    # llvmlite's add_debug_info/add_metadata dedupe by hashing operands recursively (the
    # whole type graph, per call); these cache by identity instead.

    def _di(self, kind: str, *, distinct: bool = False, **ops: object) -> ir.DIValue:
        """``!kind(ops...)``; equal non-distinct nodes are shared."""
        items = tuple(sorted(ops.items()))
        key = None if distinct else (kind, tuple((k, _key(v)) for k, v in items))
        node = self._cache.get(key) if key else None
        if node is None:
            name = str(len(self.module.metadata))
            node = ir.values.DIValue(self.module, distinct, kind, items, name=name)
            if key:
                self._cache[key] = node
        return node

    def _md(self, values: Sequence[ir.Value]) -> ir.MDValue:
        """``!{values...}`` (a metadata tuple), shared when equal; a None operand is
        ``null`` (a void return type in a DISubroutineType's ``types``)."""
        key = ("!{}", tuple(_key(v) for v in values))
        node = self._cache.get(key)
        if node is None:
            name = str(len(self.module.metadata))
            ops = [_NULL if v is None else v for v in values]
            node = self._cache[key] = ir.values.MDValue(self.module, ops, name=name)
        return node

    def _set_ops(self, node: ir.DIValue, **ops: object) -> None:
        """Complete a distinct node created earlier (the way to build metadata cycles)."""
        node.operands = tuple(sorted(ops.items()))

    # ---- types -------------------------------------------------------------------------

    def _basic(self, name: str, bits: int, encoding: str) -> DIType:
        key = "basic " + name
        if key not in self._types:
            md = self._di("DIBasicType", name=name, size=bits, encoding=T(encoding))
            self._types[key] = DIType(md, bits // 8, bits // 8)
        return self._types[key]

    def typedef(self, name: str, base: DIType, line: int = 0) -> DIType:
        """``typedef base name;`` (BTF TYPEDEF)."""
        md = self._di(
            "DIDerivedType", tag=T("DW_TAG_typedef"), name=name, file=self.file, line=line,
            baseType=base.md,
        )  # fmt: skip
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
        elif name in _C_BASIC:
            t = self._basic(name if name != "bool" else "_Bool", *_C_BASIC[name])
        else:
            raise ValueError(f"no debug type for scalar {name!r}")
        self._types[name] = t
        return t

    def enum_type(self, name: str) -> DIType:
        """``enum name`` of 4 bytes (BTF ENUM), with one enumerator ``NAME_NONE = 0``
        (``XDP_RSS_TYPE_NONE`` for ``xdp_rss_hash_type``): what a kfunc's prototype needs
        for libbpf to find it compatible with the kernel's (kinds must match, enumerators
        need not)."""
        key = "enum " + name
        if key not in self._types:
            none = {"xdp_rss_hash_type": "XDP_RSS_TYPE_NONE"}.get(name, f"{name.upper()}_NONE")
            item = self._di("DIEnumerator", name=none, value=0, isUnsigned=T("true"))
            md = self._di(
                "DICompositeType", tag=T("DW_TAG_enumeration_type"), name=name,
                file=self.file, line=0, baseType=self._basic("unsigned int", 32, "DW_ATE_unsigned").md, size=32,
                elements=self._md([item]),
            )  # fmt: skip
            self._types[key] = DIType(md, 4, 4)
        return self._types[key]

    def pointer_type(self, base: DIType | None) -> DIType:
        """``base *`` (``None``: ``void *``); 8 bytes on BPF."""
        md = self._di(
            "DIDerivedType", tag=T("DW_TAG_pointer_type"), baseType=base.md if base else None,
            size=64,
        )  # fmt: skip
        return DIType(md, 8, 8)

    def qualified(self, base: DIType, *quals: str) -> DIType:
        """Qualifiers, outermost first: ``qualified(t, "const", "volatile")``."""
        md = base.md
        for q in reversed(quals):
            md = self._di("DIDerivedType", tag=T(f"DW_TAG_{q}_type"), baseType=md)
        return DIType(md, base.size, base.align)

    def array_type(self, elem: DIType, count: int) -> DIType:
        """``elem[count]`` (BTF ARRAY with the ``__ARRAY_SIZE_TYPE__`` index)."""
        sub = self._di("DISubrange", count=count)
        md = self._di(
            "DICompositeType", tag=T("DW_TAG_array_type"), baseType=elem.md,
            size=elem.size * count * 8, elements=self._md([sub]),
        )  # fmt: skip
        return DIType(md, elem.size * count, elem.align)

    def struct_type(
        self, name: str | None, fields: Sequence[tuple[str, DIType] | tuple[str, DIType, int]],
        *, line: int = 0, size: int | None = None,
    ) -> DIType:  # fmt: skip
        """``struct name { ... }`` with C natural alignment (FIELD-BUGS B07).

        ``fields``: ``(name, type)`` laid out at the next multiple of the type's alignment,
        or ``(name, type, byte_offset)`` when the caller fixes the offset (kernel layouts).
        ``size`` defaults to the end of the last member rounded up to the struct alignment.
        ``name=None`` makes an anonymous struct.  Member offsets in BTF are in bits.
        """
        ops: dict[str, object] = {"tag": T("DW_TAG_structure_type"), "file": self.file}
        ops.update({"line": line, "name": name} if name else {"line": line})
        # Members name the struct as scope, so it is created first (distinct) and completed.
        st = self._di("DICompositeType", distinct=True, **ops)
        members: list[ir.DIValue] = []
        off = align = 0
        for f in fields:
            fname, ftype = f[0], f[1]
            off = f[2] if len(f) == 3 else -(-off // ftype.align) * ftype.align
            align = max(align, ftype.align)
            members.append(self._di(
                "DIDerivedType", tag=T("DW_TAG_member"), name=fname, scope=_ref(st),
                file=self.file, line=line, baseType=ftype.md, size=ftype.size * 8,
                offset=off * 8,
            ))  # fmt: skip
            off += ftype.size
        align = max(align, 1)
        total = size if size is not None else -(-off // align) * align
        self._set_ops(st, **ops, size=total * 8, elements=self._md(members))
        return DIType(st, total, align)

    def ctx_type(self, ctx: str) -> DIType:
        """The kernel context struct named ``ctx`` (``prog_types.ProgramKind.ctx``: ``xdp_md``,
        ``sk_msg_md``, ``bpf_sock_ops``); unknown names give an empty struct of that name
        (the kernel matches the program's ctx argument by struct name)."""
        key = "struct " + ctx
        if key not in self._types:
            u32 = self.int_type("u32")
            kinds = {"u32": u32, "u64": self.int_type("u64"), "ptr": self.pointer_type(None)}
            kinds["u32x4"] = self.array_type(u32, 4)
            fields = [(n, kinds[kind]) for n, kind in _ctx_members(ctx)]
            self._types[key] = self.struct_type(ctx, fields)
        return self._types[key]

    # ---- globals -----------------------------------------------------------------------

    def _global_var(self, gv: ir.GlobalVariable, name: str, ty: DIType, line: int) -> None:
        var = self._di(
            "DIGlobalVariable", distinct=True, name=name, scope=_ref(self.cu), file=self.file,
            line=line, type=ty.md, isLocal=False, isDefinition=True,
        )  # fmt: skip
        gve = self._di("DIGlobalVariableExpression", var=var, expr=self._di("DIExpression"))
        gv.set_metadata("dbg", gve)
        self._globals.operands = (*self._globals.operands, gve)
        self.keep(gv)

    def keep(self, *values: ir.GlobalValue) -> None:
        """Add globals/functions to ``llvm.compiler.used`` (never dropped by the optimizer)."""
        self._used.extend(values)

    def map_global(
        self, name: str, map_type: int, *, max_entries: int, key: DIType | None = None,
        value: DIType | None = None, key_size: int | None = None, value_size: int | None = None,
        map_flags: int = 0, pinning: int = 0, line: int = 0,
    ) -> ir.GlobalVariable:  # fmt: skip
        """A BTF-defined map: ``struct { __uint(type, T); __type(key, K); ... } name SEC(".maps")``.

        ``__uint(f, v)`` is member ``f`` of type ``int (*)[v]``; ``__type(f, T)`` is ``T *``
        (libbpf ``bpf_helpers.h``).  For ``map_types.SIZE_ONLY_MAP_TYPES`` (cpumap, devmap,
        sockhash...) key/value types become ``key_size``/``value_size`` as libbpf-style C
        writes them; sizes may also be given directly.  ``map_flags``/``pinning`` (abi.flags
        ``BPF_F_*``, ``LIBBPF_PIN_BY_NAME`` = 1) appear only when nonzero.
        Returns the ``.maps`` global (8 zero bytes per member), kept in compiler.used.
        """
        uint = self.uint_member
        size_only = not takes_btf_key_value(int(map_type))
        fields: list[tuple[str, DIType]] = [("type", uint(int(map_type)))]
        for what, ty, sz in (("key", key, key_size), ("value", value, value_size)):
            if ty is not None and not size_only:
                fields.append((what, self.pointer_type(ty)))
            elif sz is not None:
                fields.append((f"{what}_size", uint(sz)))
            elif ty is not None:
                fields.append((f"{what}_size", uint(ty.size)))
        if max_entries:  # 0: left out, as libbpf-style C does (perf event arrays: the loader
            fields.append(("max_entries", uint(max_entries)))  # sizes them per possible CPU)
        if map_flags:
            fields.append(("map_flags", uint(map_flags)))
        if pinning:
            fields.append(("pinning", uint(pinning)))
        return self.pointer_struct_global(name, ".maps", fields, line)

    def uint_member(self, v: int) -> DIType:
        """libbpf's ``__uint(name, v)`` member type: ``int (*)[v]`` (bpf_helpers.h), the
        value carried as the array's length."""
        return self.pointer_type(self.array_type(self.int_type("int"), v))

    def pointer_struct_global(
        self, name: str, section: str, fields: Sequence[tuple[str, DIType]], line: int = 0
    ) -> ir.GlobalVariable:
        """``struct { __uint(m, v); __type(k, T); ... } name SEC(section);``: members that
        are all pointers (8 zero bytes each), kept in compiler.used.  A BTF map definition
        (``.maps``) and libxdp's ``XDP_RUN_CONFIG`` (bpfdsl.abi.btf.run_config)."""
        st = self.struct_type(None, list(fields), line=line)
        ptr = ir.PointerType()
        gv = ir.GlobalVariable(self.module, ir.LiteralStructType([ptr] * len(fields)), name)
        gv.initializer = ir.Constant(gv.value_type, None)
        gv.section, gv.align = section, 8
        self._global_var(gv, name, st, line)
        return gv

    def records_global(
        self, name: str, section: str, records: Sequence[tuple[str, DIType]]
    ) -> ir.GlobalVariable:
        """``struct { RECORD map_name; ... } name SEC(section);``: one member per event map,
        named after it, of its record type, so BTF describes what each ring buffer / perf
        event array carries (:mod:`bpfdsl.abi.btf.records`).  Zero-filled, in a section no
        loader maps (libbpf skips unknown data sections); kept in compiler.used."""
        st = self.struct_type(None, list(records))
        ty = ir.ArrayType(ir.IntType(8), st.size)
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, bytearray(st.size))
        gv.section, gv.align = section, max(1, st.align)
        self._global_var(gv, name, st, 0)
        return gv

    def prog_array_global(
        self, name: str, *, max_entries: int, slots: int, line: int = 0
    ) -> ir.GlobalVariable:
        """A BTF-defined prog_array as libbpf-style C writes it (clang-19's shape)::

            struct { __uint(type, BPF_MAP_TYPE_PROG_ARRAY); __uint(max_entries, N);
                     __uint(key_size, 4); __array(values, int (void *)); } name SEC(".maps")
                = { .values = { [k] = (void *)&prog, ... } };

        ``values`` is a flexible array of pointers to ``int (void *)`` (BTF: ARRAY of 0
        PTR to FUNC_PROTO); the global holds ``slots`` pointers after the 3 members, which
        the caller sets in its initializer once the programs exist: LLVM then writes a
        ``.rel.maps`` relocation per program, which libbpf, bpftool and bpfdsl's loader
        turn into the slot's program fd (libbpf ``init_prog_array_slots``)."""
        int_t = self.int_type("int")
        uint = self.uint_member
        proto = self._di("DISubroutineType", types=self._md([int_t.md, self.pointer_type(None).md]))
        fptr = self._di("DIDerivedType", tag=T("DW_TAG_pointer_type"), baseType=proto, size=64)
        sub = self._di("DISubrange", count=-1)
        flex = self._di(
            "DICompositeType", tag=T("DW_TAG_array_type"), baseType=fptr,
            elements=self._md([sub]),
        )  # fmt: skip
        fields: list[tuple[str, DIType] | tuple[str, DIType, int]] = [
            ("type", uint(int(MapType.PROG_ARRAY))),
            ("max_entries", uint(max_entries)),
            ("key_size", uint(4)),
            ("values", DIType(flex, 0, 8), 24),
        ]
        st = self.struct_type(None, fields, line=line, size=24)
        ptr = ir.PointerType()
        ty = ir.LiteralStructType([ptr, ptr, ptr, ir.ArrayType(ptr, slots)])
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, None)
        gv.section, gv.align = ".maps", 8
        self._global_var(gv, name, st, line)
        return gv

    def license(self, text: str = "GPL", name: str = "LICENSE") -> ir.GlobalVariable:
        """``char LICENSE[] SEC("license") = text;`` (NUL-terminated; the kernel reads it
        to allow GPL-only helpers)."""
        data = text.encode() + b"\0"
        ty = ir.ArrayType(ir.IntType(8), len(data))
        gv = ir.GlobalVariable(self.module, ty, name)
        gv.initializer = ir.Constant(ty, bytearray(data))
        gv.section, gv.align = "license", 1
        self._global_var(gv, name, self.array_type(self.int_type("char"), len(data)), 0)
        return gv

    def config_global(
        self, name: str, ty: DIType, value: int | bytes, *, line: int = 0,
        ir_type: ir.Type | None = None,
    ) -> ir.GlobalVariable:  # fmt: skip
        """``const volatile T name = value;`` in ``.rodata`` (BTF VAR + DATASEC .rodata), the
        load-time config a loader may overwrite.  ``value``: an int (stored little-endian
        as BPF does; for ``be*`` types pass the already byte-swapped value) or raw bytes of
        ``ty.size``.  Read it with :func:`load_config`."""
        if ir_type is None:
            width = ty.size * 8
            ir_type = (
                ir.IntType(width)
                if isinstance(value, int)
                else ir.ArrayType(ir.IntType(8), ty.size)
            )
        init = bytearray(value) if isinstance(value, bytes) else value
        gv = ir.GlobalVariable(self.module, ir_type, name)
        gv.initializer = ir.Constant(ir_type, init)
        gv.global_constant = True
        gv.section, gv.align = ".rodata", ty.align
        self._global_var(gv, name, self.qualified(ty, "const", "volatile"), line)
        return gv

    def function(
        self, fn: ir.Function, *, line: int, ctx: str | DIType | None = "xdp_md",
        arg_name: str = "ctx", ret: DIType | None = None, program: bool = True,
        params: Sequence[tuple[str, DIType]] = (), void: bool = False,
        arg_tags: dict[int, str] | None = None,
    ) -> FunctionDebug:  # fmt: skip
        """Attach a ``DISubprogram`` to ``fn`` (a program: ``int name(struct ctx *ctx)``).

        LLVM emits it as BTF FUNC + FUNC_PROTO and as ``.BTF.ext`` func info; ``fn`` is
        marked ``nounwind`` (else LLVM adds ``.eh_frame``) and, when ``program``, kept in
        compiler.used.  Helpers take ``ctx=None, program=False`` and their ``params``
        (name, type): inlined, their locations carry ``inlinedAt`` so line info shows the
        helper's lines; if one survives as a BPF-to-BPF subprogram it needs this record
        (the kernel wants func info for every subprogram).  ``internal`` functions get
        ``DISPFlagLocalToUnit`` = BTF linkage static: the kernel does not verify them alone;
        external ones are BTF linkage global (a program, or a global function the kernel
        verifies on its own).  ``void``: the function returns nothing (``ret`` unused).
        ``arg_tags``: parameter index (0-based) -> BTF decl tag, as clang writes
        ``__attribute__((btf_decl_tag("arg:ctx")))`` on a parameter: a DILocalVariable
        with ``annotations: !{!{!"btf_decl_tag", !"arg:ctx"}}``, which LLVM emits as BTF
        DECL_TAG ``arg:ctx`` on the FUNC with ``component_idx`` the parameter's index (the
        kernel's ``__arg_ctx``, Linux 6.8: btf_prepare_func_args).
        """
        ret_md = None if void else (ret or self.int_type("int")).md  # None: void (null)
        args = list(params)
        if ctx is not None:
            cty = self.ctx_type(ctx) if isinstance(ctx, str) else ctx
            args.insert(0, (arg_name, self.pointer_type(cty)))
        sty = self._di("DISubroutineType", types=self._md([ret_md, *(t.md for _, t in args)]))
        local = "DISPFlagLocalToUnit | " if fn.linkage in ("internal", "private") else ""
        ops = dict(
            name=fn.name, scope=self.file, file=self.file, line=line, type=sty, scopeLine=line,
            flags=T("DIFlagPrototyped"), spFlags=T(local + "DISPFlagDefinition | DISPFlagOptimized"),
            unit=self.cu,
        )  # fmt: skip
        sp = self._di("DISubprogram", distinct=True, **ops)
        if args:  # the parameter names BTF shows in FUNC_PROTO come from these variables
            tags = arg_tags or {}
            nodes = [
                self._di("DILocalVariable", name=name, arg=i, scope=_ref(sp), file=self.file,
                         line=line, type=ty.md,
                         **({"annotations": self.decl_tag(tags[i - 1])} if i - 1 in tags else {}))
                for i, (name, ty) in enumerate(args, 1)
            ]  # fmt: skip
            self._set_ops(sp, **ops, retainedNodes=self._md(nodes))
        fn.set_metadata("dbg", sp)
        fn.attributes.add("nounwind")
        if program:
            self.keep(fn)
        return FunctionDebug(self, sp)

    def decl_tag(self, tag: str) -> ir.MDValue:
        """``!{!{!"btf_decl_tag", !"TAG"}}``: the annotations clang gives a declaration
        marked ``__attribute__((btf_decl_tag("TAG")))``."""
        m = self.module
        pair = self._md([ir.MetaDataString(m, "btf_decl_tag"), ir.MetaDataString(m, tag)])
        return self._md([pair])

    def kfunc(self, fn: ir.Function, outs: Sequence[str], *, ctx: str = "xdp_md") -> None:
        """Attach the declaration DISubprogram of a kfunc to ``fn`` (``extern int
        name(const struct ctx *, T *...) __ksym``, ``outs`` the language type names the
        pointers point to), the metadata clang gives it: not distinct, not a definition,
        no unit.  LLVM emits it as a BTF FUNC with linkage extern in DATASEC ``.ksyms``
        (BTFDebug::processFuncPrototypes) when a call of ``fn`` is lowered."""
        cptr = self.pointer_type(self.qualified(self.ctx_type(ctx), "const"))
        outs_t = [
            self.enum_type(t.removeprefix("enum ")) if t.startswith("enum ") else self.int_type(t)
            for t in outs
        ]
        args = [cptr, *(self.pointer_type(t) for t in outs_t)]
        sty = self._di(
            "DISubroutineType", types=self._md([self.int_type("int").md, *(a.md for a in args)])
        )
        sp = self._di(
            "DISubprogram", name=fn.name, scope=self.file, file=self.file, line=0, type=sty,
            flags=T("DIFlagPrototyped"), spFlags=T("DISPFlagOptimized"),
        )  # fmt: skip
        fn.set_metadata("dbg", sp)
        fn.attributes.add("nounwind")

    def finalize(self) -> None:
        """Write ``llvm.compiler.used`` (maps, license, configs, programs); call once, last.

        Optional: external globals survive without it, but clang writes it too."""
        if self._finalized:
            return
        self._finalized = True
        compiler_used(self.module, self._used)


def compiler_used(module: ir.Module, values: Sequence[ir.GlobalValue]) -> None:
    """Write ``llvm.compiler.used`` of ``module`` holding ``values`` (none: nothing written).

    The optimizer keeps each value and treats it as address-taken: a function listed keeps
    its signature (DeadArgumentElimination and IPSCCP's return zapping leave it alone); the
    object gets no section or symbol for the list itself (LLVM LangRef, "The
    llvm.compiler.used Global Variable")."""
    if values:
        ty = ir.ArrayType(ir.PointerType(), len(values))
        used = ir.GlobalVariable(module, ty, "llvm.compiler.used")
        used.linkage, used.section = "appending", "llvm.metadata"
        used.initializer = ir.Constant(ty, list(values))
