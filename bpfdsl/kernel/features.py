"""What the running kernel's BTF loader takes: libbpf's feature probes.

Each probe is BPF_BTF_LOAD of the smallest BTF that uses one feature, the blob libbpf
loads for it (src/features.c ``probe_kern_btf_global_func``, ``_float``, ``_decl_tag``,
``_type_tag``, ``_enum64``, ``_qmark_datasec``); a kernel that refuses it lacks the
feature.  The answers (:class:`bpfdsl.abi.btf.sanitize.BtfFeatures`) are asked once per
process; the loader rewrites an object's BTF for what is missing
(:func:`bpfdsl.abi.btf.sanitize.sanitize_for`).
"""

from __future__ import annotations

import functools
import struct

from bpfdsl.abi.btf.core import (
    BTF_FUNC_GLOBAL,
    BTF_INT_SIGNED,
    BTF_VAR_STATIC,
    Kind,
    raw_btf,
)
from bpfdsl.abi.btf.sanitize import BtfFeatures
from bpfdsl.kernel import syscall as S


def _info(kind: Kind, vlen: int = 0, kflag: int = 0) -> int:
    """BTF_INFO_ENC(kind, kflag, vlen) of include/uapi/linux/btf.h."""
    return kflag << 31 | int(kind) << 24 | vlen


def _int(name: int, size: int = 4, bits: int = 32, encoding: int = BTF_INT_SIGNED) -> list[int]:
    """BTF_TYPE_INT_ENC(name, encoding, 0, bits, size) of tools/lib/bpf/libbpf_internal.h."""
    return [name, _info(Kind.INT), size, encoding << 24 | bits]


def probe_blob(types: list[int], strings: bytes) -> bytes:
    """The BTF of a probe: its type words (u32, as the C array) and its strings (the C
    literal, without its final NUL), as libbpf__load_raw_btf builds it."""
    words = struct.pack(f"<{len(types)}I", *(t & 0xFFFFFFFF for t in types))
    return raw_btf(words, strings + b"\0")


# feature -> (types, strings): the probe blobs of libbpf's src/features.c, word for word;
# the strings as the C literal (``sizeof`` counts its final NUL: :func:`probe_blob` adds it)
PROBES: dict[str, tuple[list[int], bytes]] = {
    # static void x(int a) {}, with FUNC x global
    "func_global": (
        _int(1)
        + [0, _info(Kind.FUNC_PROTO, 1), 1, 7, 1]
        + [5, _info(Kind.FUNC, BTF_FUNC_GLOBAL), 2],
        b"\0int\0x\0a",
    ),
    "float": ([1, _info(Kind.FLOAT), 4], b"\0float"),
    # int; static VAR x; DECL_TAG "tag" on x
    "decl_tag": (
        _int(0) + [1, _info(Kind.VAR), 1, BTF_VAR_STATIC] + [1, _info(Kind.DECL_TAG), 2, -1],
        b"\0tag",
    ),
    # int; TYPE_TAG "tag" -> int; PTR -> the tag
    "type_tag": (
        _int(0) + [1, _info(Kind.TYPE_TAG), 1] + [0, _info(Kind.PTR), 2],
        b"\0tag",
    ),
    "enum64": ([1, _info(Kind.ENUM64), 8], b"\0enum64"),
    # int; static VAR x; DATASEC "?.data" holding x
    "qmark_datasec": (
        _int(0) + [1, _info(Kind.VAR), 1, BTF_VAR_STATIC] + [3, _info(Kind.DATASEC, 1), 4, 2, 0, 4],
        b"\0x\0?.data",
    ),
}


def probe(types: list[int], strings: bytes) -> bool:
    """True when the kernel loads this BTF (``strings``: the C literal, without its final
    NUL).  Raises BpfPermissionError (no CAP_BPF): a
    kernel that lets nobody load BTF answers nothing about its features."""
    try:
        fd, _ = S.btf_load(probe_blob(types, strings), log_level=1, log_size=4096)
    except S.BpfPermissionError:
        raise
    except S.BpfError:
        return False
    fd.close()
    return True


@functools.cache
def btf_features() -> BtfFeatures:
    """The BTF features of the running kernel (probed once per process, all six).
    Raises BpfPermissionError as :func:`probe` does."""
    return BtfFeatures(**{name: probe(*blob) for name, blob in PROBES.items()})
