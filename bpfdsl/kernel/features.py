"""What the running kernel's BTF loader takes: libbpf's feature probes.

Each probe is BPF_BTF_LOAD of the smallest BTF that uses one feature, the blob libbpf
loads for it (src/features.c ``probe_kern_btf_global_func``, ``_float``, ``_decl_tag``,
``_type_tag``, ``_enum64``, ``_qmark_datasec``); a kernel that refuses it lacks the
feature.  One more, ``probe_kern_arg_ctx_tag``, loads a program: does the verifier read
the ``arg:ctx`` tag (:func:`bpfdsl.abi.btf.sanitize.fixup_arg_ctx` when not).  The answers (:class:`bpfdsl.abi.btf.sanitize.BtfFeatures`) are asked once per
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
    info_word,
    raw_btf,
)
from bpfdsl.abi.btf.sanitize import BtfFeatures
from bpfdsl.abi.helpers import BPF_FUNC_GET_FUNC_IP
from bpfdsl.abi.insn import Insn, encode
from bpfdsl.abi.opcodes import BPF_CALL, BPF_EXIT, BPF_JMP, BPF_PSEUDO_CALL
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.kernel import syscall as S


def _int(name: int, size: int = 4, bits: int = 32, encoding: int = BTF_INT_SIGNED) -> list[int]:
    """BTF_TYPE_INT_ENC(name, encoding, 0, bits, size) of tools/lib/bpf/libbpf_internal.h."""
    return [name, info_word(Kind.INT), size, encoding << 24 | bits]


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
        + [0, info_word(Kind.FUNC_PROTO, 1), 1, 7, 1]
        + [5, info_word(Kind.FUNC, BTF_FUNC_GLOBAL), 2],
        b"\0int\0x\0a",
    ),
    "float": ([1, info_word(Kind.FLOAT), 4], b"\0float"),
    # int; static VAR x; DECL_TAG "tag" on x
    "decl_tag": (
        _int(0)
        + [1, info_word(Kind.VAR), 1, BTF_VAR_STATIC]
        + [1, info_word(Kind.DECL_TAG), 2, -1],
        b"\0tag",
    ),
    # int; TYPE_TAG "tag" -> int; PTR -> the tag
    "type_tag": (
        _int(0) + [1, info_word(Kind.TYPE_TAG), 1] + [0, info_word(Kind.PTR), 2],
        b"\0tag",
    ),
    "enum64": ([1, info_word(Kind.ENUM64), 8], b"\0enum64"),
    # int; static VAR x; DATASEC "?.data" holding x
    "qmark_datasec": (
        _int(0)
        + [1, info_word(Kind.VAR), 1, BTF_VAR_STATIC]
        + [3, info_word(Kind.DATASEC, 1), 4, 2, 0, 4],
        b"\0x\0?.data",
    ),
}


# arg_ctx (libbpf probe_kern_arg_ctx_tag): a main program 'a' calls the global subprog
# 'b(void *b __arg_ctx)', which passes its argument to bpf_get_func_ip (it needs the context)
ARG_CTX_BTF: tuple[list[int], bytes] = (
    _int(1)  # [1] int
    + [0, info_word(Kind.PTR), 0]  # [2] void *
    + [0, info_word(Kind.FUNC_PROTO, 1), 1, 1, 2]  # [3] int (void *a)
    + [1, info_word(Kind.FUNC, BTF_FUNC_GLOBAL), 3]  # [4] FUNC a
    + [0, info_word(Kind.FUNC_PROTO, 1), 1, 3, 2]  # [5] int (void *b __arg_ctx)
    + [3, info_word(Kind.FUNC, BTF_FUNC_GLOBAL), 5]  # [6] FUNC b
    + [5, info_word(Kind.DECL_TAG), 6, 0],  # [7] DECL_TAG arg:ctx -> b's arg 0
    b"\0a\0b\0arg:ctx",
)
ARG_CTX_INSNS = [
    Insn(BPF_JMP | BPF_CALL, 0, BPF_PSEUDO_CALL, 0, 1),  # call b (pc + 1 + 1)
    Insn(BPF_JMP | BPF_EXIT),
    Insn(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_GET_FUNC_IP),
    Insn(BPF_JMP | BPF_EXIT),
]
ARG_CTX_FUNC_INFO = [(0, 4), (2, 6)]  # insn_off -> FUNC


def _load_btf(blob: bytes) -> S.Fd | None:
    """BPF_BTF_LOAD of ``blob``; None when the kernel refuses it (BpfPermissionError is
    raised: no CAP_BPF answers nothing about features)."""
    try:
        fd, _ = S.btf_load(blob, log_level=1, log_size=4096)
    except S.BpfPermissionError:
        raise
    except S.BpfError:
        return None
    return fd


def probe(types: list[int], strings: bytes) -> bool:
    """True when the kernel loads this BTF (``strings``: the C literal, without its final
    NUL).  Raises BpfPermissionError (no CAP_BPF)."""
    fd = _load_btf(probe_blob(types, strings))
    if fd is None:
        return False
    fd.close()
    return True


def probe_arg_ctx() -> bool:
    """True when the verifier reads ``arg:ctx`` (Linux 6.8): BPF_PROG_LOAD of libbpf's
    KPROBE program whose global subprog gets the context only through the tag.  Raises
    BpfPermissionError (no CAP_BPF)."""
    btf_fd = _load_btf(probe_blob(*ARG_CTX_BTF))
    if btf_fd is None:
        return False
    with btf_fd:
        try:
            fd, _ = S.prog_load(
                ProgramType.KPROBE, encode(ARG_CTX_INSNS), "GPL", name="det_arg_ctx",
                btf_fd=int(btf_fd), retry_with_log=False,
                func_info=b"".join(struct.pack("<II", *r) for r in ARG_CTX_FUNC_INFO),
            )  # fmt: skip
        except S.BpfPermissionError:
            raise
        except S.BpfError:
            return False
    fd.close()
    return True


@functools.cache
def btf_features() -> BtfFeatures:
    """The BTF features of the running kernel (probed once per process: the six kinds and
    arg:ctx).  Raises BpfPermissionError as :func:`probe` does."""
    kinds = {name: probe(*blob) for name, blob in PROBES.items()}
    return BtfFeatures(**kinds, arg_ctx=probe_arg_ctx())
