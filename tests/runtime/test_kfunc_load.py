"""Kfunc calls at load time: the object carries them as clang does (``call -1`` relocated
against an extern FUNC in DATASEC ``.ksyms``); the loader puts the FUNC's id from the
kernel's BTF into the call and loads a program calling the XDP metadata kfuncs
device-bound (prog_ifindex + BPF_F_XDP_DEV_BOUND_ONLY) on the device it is given."""

from __future__ import annotations

import pytest
from support.netns import veth_here

from bpfdsl.abi.btf.core import find_func_id, parse_btf
from bpfdsl.abi.opcodes import BPF_PSEUDO_CALL, BPF_PSEUDO_KFUNC_CALL
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.kfuncs import VMLINUX_BTF, kfunc_btf_id
from bpfdsl.runtime.loader import LoadError, load_collection

HINTS = """
license "GPL"
map out: array<u32, u64>(max_entries: 2)

xdp(dev_bound) fn hints(ctx) {
    let hash: u32 = 0
    let rss_type: u32 = 0
    let err = rx_hash(hash, rss_type)
    out[0] = (err as u32) as u64
    out[1] = hash as u64
    return XDP_PASS
}
"""


def test_the_object_carries_the_kfunc_call_as_clang_does() -> None:
    obj = compile_source(HINTS, "hints.bpfd").obj
    spec = read_object(obj)
    (r,) = [r for r in spec.programs["hints"].relocations if r.kind == "kfunc"]
    assert r.symbol == "bpf_xdp_metadata_rx_hash"
    # read back as a kernel-function call waiting for its id
    assert spec.programs["hints"].insns[r.insn_idx].src == BPF_PSEUDO_KFUNC_CALL
    # in the ELF: clang's form, `call -1` with src_reg BPF_PSEUDO_CALL (libbpf's input)
    assert bytes([0x85, BPF_PSEUDO_CALL << 4]) + b"\0\0" + b"\xff" * 4 in obj
    ksyms = [t for t in spec.btf.datasecs() if t.name == ".ksyms"]
    assert len(ksyms) == 1 and ksyms[0].size == 4  # rewritten as libbpf does before loading


@pytest.mark.kernel
def test_the_kfunc_id_is_the_kernels() -> None:
    want = parse_btf(VMLINUX_BTF.read_bytes()).find("bpf_xdp_metadata_rx_hash")
    assert want is not None
    assert kfunc_btf_id("p", "bpf_xdp_metadata_rx_hash") == want.id
    assert find_func_id(VMLINUX_BTF.read_bytes(), "bpf_xdp_metadata_rx_hash") == want.id


@pytest.mark.kernel
def test_a_kfunc_the_kernel_lacks_is_named() -> None:
    with pytest.raises(DiagnosticError) as ei:
        kfunc_btf_id("p", "bpf_xdp_metadata_rx_nothing")
    d = ei.value.diagnostics[0]
    assert d.code == "kfunc-missing"
    assert "bpf_xdp_metadata_rx_nothing" in d.message and "this kernel (Linux" in d.message


@pytest.mark.kernel
def test_a_dev_bound_program_needs_a_device() -> None:
    spec = read_object(compile_source(HINTS, "hints.bpfd").obj)
    with pytest.raises(LoadError) as ei:
        load_collection(spec, pinning=False)
    assert ei.value.diagnostics[0].code == "dev-bound-needs-device"
    assert "bpf_xdp_metadata_rx_hash" in ei.value.diagnostics[0].message


@pytest.mark.kernel
def test_loads_device_bound_on_a_veth() -> None:
    with veth_here("m17") as ifindex:  # a veth here, its peer in a namespace of its own
        spec = read_object(compile_source(HINTS, "hints.bpfd").obj)
        with load_collection(spec, pinning=False, ifindex=ifindex) as coll:
            assert int(coll.programs["hints"].fd) > 0
