"""The kernel functions (kfuncs) bpfdsl calls: one table, read by sema (signatures and
rules), the back end (the extern declaration and its BTF), the loader (which BTF FUNC to
find, whether the program must be device-bound), the checker and the interpreter.

A kfunc is not a helper: the call is ``call -1`` with ``src_reg`` BPF_PSEUDO_CALL and an
R_BPF_64_32 relocation against an undefined symbol whose BTF is a FUNC with linkage extern
in the DATASEC ``.ksyms`` (what clang emits for an ``extern ... __ksym`` declaration); the
loader rewrites it to ``src_reg`` BPF_PSEUDO_KFUNC_CALL, ``imm`` the FUNC's id in the
kernel's BTF and ``off`` 0 for vmlinux (libbpf ``bpf_object__relocate_data``,
RELO_EXTERN_CALL).

The XDP metadata kfuncs (net/core/xdp.c, ``bpf_xdp_metadata_*``) read the RX descriptor's
hints through the driver's ``xdp_metadata_ops``; they need a device-bound program
(verifier: "metadata kfuncs require device-bound program"), and return 0 or a negative
errno: -EOPNOTSUPP where the driver has no such op (and in the kernel's generic
implementations), -ENODATA where this frame has no such hint (veth: a frame that came as
an xdp_frame, not an skb).
"""

from __future__ import annotations

from dataclasses import dataclass

EOPNOTSUPP = 95  # include/uapi/asm-generic/errno.h
ENODATA = 61


@dataclass(frozen=True, slots=True)
class Kfunc:
    """One kfunc: ``name`` in the kernel's BTF, ``builtin`` the language's name, ``outs``
    the (name, language type name) of the values it writes through its pointer arguments
    after ``ctx`` (sizes: u16 2, be16 2, u32 4, u64 8 bytes), ``dev_bound`` whether the
    program must be loaded device-bound, ``since`` the first kernel release that has it
    with this signature; ``c_outs`` the C types of the outputs in the kernel's prototype
    where one is not the language type (``enum NAME``): libbpf checks an extern's
    FUNC_PROTO against the kernel's (bpf_core_types_are_compat: an INT is not an ENUM)
    and refuses the object otherwise."""

    name: str
    builtin: str
    outs: tuple[tuple[str, str], ...]
    dev_bound: bool
    since: str
    c_outs: tuple[str, ...] = ()

    def btf_outs(self) -> tuple[str, ...]:
        """The C type of each output, for the extern's BTF: ``c_outs`` or the language's."""
        return self.c_outs or tuple(t for _, t in self.outs)


KFUNCS: tuple[Kfunc, ...] = (
    # u64 *timestamp: ns, the RX hardware timestamp (6.3)
    Kfunc("bpf_xdp_metadata_rx_timestamp", "rx_timestamp", (("timestamp", "u64"),), True, "6.3"),
    # u32 *hash, enum xdp_rss_hash_type *rss_type (4 bytes; the second argument from 6.5)
    Kfunc(
        "bpf_xdp_metadata_rx_hash",
        "rx_hash",
        (("hash", "u32"), ("rss_type", "u32")),
        True,
        "6.5",
        ("u32", "enum xdp_rss_hash_type"),  # include/net/xdp.h
    ),
    # __be16 *vlan_proto, u16 *vlan_tci (6.8)
    Kfunc(
        "bpf_xdp_metadata_rx_vlan_tag",
        "rx_vlan_tag",
        (("vlan_proto", "be16"), ("vlan_tci", "u16")),
        True,
        "6.8",
    ),
)
BY_NAME: dict[str, Kfunc] = {k.name: k for k in KFUNCS}
# kfuncs that change packet data (kernel verifier.c is_kfunc_pkt_changing, Linux 6.18):
# a subprogram calling one invalidates its callers' packet pointers like a resizing helper
PKT_CHANGING: frozenset[str] = frozenset({"bpf_xdp_pull_data"})
BY_BUILTIN: dict[str, Kfunc] = {k.builtin: k for k in KFUNCS}
