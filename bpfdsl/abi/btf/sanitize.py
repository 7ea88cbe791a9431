"""BTF for an older kernel: the kinds a kernel does not know rewritten as libbpf does.

A kernel refuses, at BPF_BTF_LOAD, a BTF kind newer than itself ("Invalid kind"): FLOAT
(Linux 5.13), DECL_TAG (5.16: the ``arg:ctx`` tag of a global function), TYPE_TAG (5.17:
``__user``, ``__percpu`` of vmlinux.h), ENUM64 and signed enums (6.0), a DATASEC named
``?...`` (6.x).  libbpf probes each (src/features.c ``probe_kern_btf_*``) and rewrites a copy
of the object's BTF before loading it (src/libbpf.c ``bpf_object__sanitize_btf``); this is
that rewrite, rule for rule, for the kernels bpfdsl loads into (Linux >= 5.10, which has
FUNC, global FUNC and DATASEC):

=================  ==============================================================
kernel lacks        the type becomes
=================  ==============================================================
``decl_tag``        an INT of 1 byte (8 bits, no encoding), its name kept
``type_tag``        a CONST of the same type, unnamed
``float``           an unnamed empty STRUCT of the same size
``enum64``          ENUM64: a UNION of the same size whose members (names kept) are
                    all an INT ``enum64_placeholder`` of 1 byte at offset 0; ENUM:
                    its kflag (signedness) cleared
``qmark_datasec``   a DATASEC named ``?X`` is named ``_X``
``func_global``     a global FUNC becomes static
=================  ==============================================================

Type ids never change (one type may be appended: the ENUM64 placeholder), so the
program's func_info and line_info (.BTF.ext) stay valid.  The features are probed by
:func:`bpfdsl.kernel.features.btf_features`.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, fields

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, BTF_FUNC_STATIC, Btf, BtfType, Kind

ENUM64_PLACEHOLDER = "enum64_placeholder"  # the name libbpf gives the INT (btf__add_int)


@dataclass(frozen=True, slots=True)
class BtfFeatures:
    """Which BTF features the kernel takes (True: supported; the default is a kernel
    that takes them all, such as 6.x).  Names follow libbpf's FEAT_BTF_* of
    src/libbpf_internal.h."""

    func_global: bool = True  # FEAT_BTF_GLOBAL_FUNC, Linux 5.6
    float: bool = True  # FEAT_BTF_FLOAT, Linux 5.13
    decl_tag: bool = True  # FEAT_BTF_DECL_TAG, Linux 5.16
    type_tag: bool = True  # FEAT_BTF_TYPE_TAG, Linux 5.17
    enum64: bool = True  # FEAT_BTF_ENUM64 (and signed enums), Linux 6.0
    qmark_datasec: bool = True  # FEAT_BTF_QMARK_DATASEC, Linux 6.x
    arg_ctx: bool = True  # FEAT_ARG_CTX_TAG: the verifier reads DECL_TAG arg:ctx, Linux 6.8

    def missing(self) -> list[str]:
        """The names of the features this kernel lacks, in declaration order."""
        return [f.name for f in fields(self) if not getattr(self, f.name)]


def sanitize_for(btf: Btf, features: BtfFeatures) -> tuple[Btf, list[str]]:
    """A copy of ``btf`` that a kernel with ``features`` accepts, and what changed (one
    line per rewritten kind, with its count: ``"DECL_TAG -> INT: 2"``).  ``btf`` itself is
    not changed; with no kind missing it is returned as it is (``arg_ctx`` is not a kind:
    :func:`fixup_arg_ctx`)."""
    if not [f for f in features.missing() if f != "arg_ctx"]:
        return btf, []
    out = Btf(copy.deepcopy(btf.types), bytes(btf.strings))
    counts: dict[str, int] = {}
    placeholder = 0

    def note(what: str) -> None:
        counts[what] = counts.get(what, 0) + 1

    for t in out.types[1:]:
        k = t.kind
        if k == Kind.DECL_TAG and not features.decl_tag:
            _make_byte_int(t)
            note("DECL_TAG -> INT")
        elif k == Kind.TYPE_TAG and not features.type_tag:
            t.kind, t.name, t.name_off = Kind.CONST, "", 0
            note("TYPE_TAG -> CONST")
        elif k == Kind.FLOAT and not features.float:
            t.kind, t.name, t.name_off, t.members = Kind.STRUCT, "", 0, []
            note("FLOAT -> STRUCT")
        elif k == Kind.ENUM and not features.enum64 and t.kflag:
            t.kflag = False
            note("ENUM signed -> unsigned")
        elif k == Kind.ENUM64 and not features.enum64:
            if not placeholder:
                placeholder = len(out.types)
                out.types.append(
                    BtfType(placeholder, Kind.INT, ENUM64_PLACEHOLDER,
                            out.add_string(ENUM64_PLACEHOLDER), size=1, bits=8)
                )  # fmt: skip
            t.kind, t.kflag = Kind.UNION, False
            for m in t.members:
                m.type, m.bit_offset, m.bitfield_size, m.value = placeholder, 0, 0, 0
            note("ENUM64 -> UNION")
        elif k == Kind.DATASEC and not features.qmark_datasec and t.name.startswith("?"):
            t.name = "_" + t.name[1:]
            t.name_off = out.add_string(t.name)
            note("DATASEC '?' name -> '_'")
        elif k == Kind.FUNC and not features.func_global and t.linkage == BTF_FUNC_GLOBAL:
            t.linkage = BTF_FUNC_STATIC
            note("FUNC global -> static")
    return out, [f"{what}: {n}" for what, n in counts.items()]


def _make_byte_int(t: BtfType) -> None:
    """``t`` as libbpf's replacement INT: 1 byte, 8 bits, no encoding (name kept)."""
    t.kind, t.kflag, t.size, t.type = Kind.INT, False, 1, 0
    t.encoding, t.int_offset, t.bits, t.component_idx = 0, 0, 8, 0
    t.members = []


ARG_CTX = "arg:ctx"  # the DECL_TAG of __arg_ctx (tools/lib/bpf/bpf_helpers.h)


def fixup_arg_ctx(btf: Btf, func_ids: list[int], ctx: str) -> tuple[list[int], list[str]]:
    """libbpf's ``bpf_program_fixup_func_info`` (src/libbpf.c) for a kernel whose verifier
    does not read ``arg:ctx`` (before Linux 6.8), which finds a global function's context
    by its parameter's type, ``struct CTX *``.

    For each global FUNC of ``func_ids`` (one program's func_info type ids) with a DECL_TAG
    ``arg:ctx`` on a ``void *`` parameter, a clone of the FUNC and its FUNC_PROTO is
    appended to ``btf`` whose tagged parameters point to an empty STRUCT named ``ctx``
    (the program type's context struct, ``xdp_md``...; added once per call), with the tag
    copied to the clone.  A parameter already typed ``struct CTX *`` needs nothing.
    ``btf`` is changed: pass a copy.  Returns the func_info type ids to load with (each
    clone in place of its original) and warnings: a tagged parameter that is neither
    ``void *`` nor ``struct CTX *`` (libbpf warns the same and loads it as it is)."""
    ids, warnings = list(func_ids), []
    ptr_id = 0
    clones: dict[int, int] = {}  # original FUNC -> its clone
    for tag in [t for t in btf.types[1:] if t.kind == Kind.DECL_TAG and t.name == ARG_CTX]:
        fn = btf[tag.type]
        if fn.kind != Kind.FUNC or fn.linkage != BTF_FUNC_GLOBAL or fn.id not in ids:
            continue
        proto = btf[fn.type]
        if proto.kind != Kind.FUNC_PROTO or not 0 <= tag.component_idx < len(proto.members):
            continue
        arg = btf.resolve(proto.members[tag.component_idx].type)  # libbpf skip_mods_and_typedefs
        target = btf.resolve(arg.type) if arg.kind == Kind.PTR else None
        if target is not None and target.kind == Kind.STRUCT and target.name == ctx:
            continue
        if target is None or target.id != 0:  # not a pointer, or not void *
            warnings.append(
                f"subprog '{fn.name}' arg#{tag.component_idx} is expected to be of "
                f"`struct {ctx} *` type"
            )
            continue
        if fn.id not in clones:
            clones[fn.id] = _clone_func(btf, fn, proto)
            ids = [clones[fn.id] if i == fn.id else i for i in ids]
        if not ptr_id:
            struct_id = len(btf.types)
            btf.types.append(BtfType(struct_id, Kind.STRUCT, ctx, btf.add_string(ctx)))
            ptr_id = len(btf.types)
            btf.types.append(BtfType(ptr_id, Kind.PTR, type=struct_id))
        clone = btf[clones[fn.id]]
        btf.types.append(
            BtfType(len(btf.types), Kind.DECL_TAG, ARG_CTX, tag.name_off, type=clone.id,
                    component_idx=tag.component_idx)
        )  # fmt: skip
        btf[clone.type].members[tag.component_idx].type = ptr_id
    return ids, warnings


def _clone_func(btf: Btf, fn: BtfType, proto: BtfType) -> int:
    """Append a copy of FUNC ``fn`` and its FUNC_PROTO ``proto`` (names kept); the new
    FUNC's id (libbpf clone_func_btf_info)."""
    proto_id = len(btf.types)
    copy_proto = copy.deepcopy(proto)
    copy_proto.id = proto_id
    btf.types.append(copy_proto)
    fn_id = len(btf.types)
    btf.types.append(
        BtfType(fn_id, Kind.FUNC, fn.name, fn.name_off, type=proto_id, linkage=fn.linkage)
    )
    return fn_id
