"""A 32-bit ``w3 = w1; w3 += -43; if w3 > 1`` (LLVM's ``v - 43 < 2`` on a u32): this
kernel (Linux 6.18.44, with the 2026 stable linked-register backports: BPF_ADD_CONST32,
negative deltas, BPF_SUB) keeps w3 linked to w1 with the delta (its log:
``R3=scalar(id=1-43,...)``), so the branch refines w1 to [43, 44] as well and the
comparisons of w1 with 45 and 46 after it are decided.  The checker links them the same
way (transfer.link_delta, branch._synced: sync_linked_regs with the zero-extension of a
32-bit link, state.IdMap.scalar_ids: regsafe's flag and delta checks), so its walk and
count are the kernel's (before: kernel 47 vs checker 67 at v3, 45 vs 64 at v4).
"""

from __future__ import annotations

import pytest
from support.progrun import kernel_processed

from bpfdsl.checker import CheckOptions, check_object
from bpfdsl.compiler import compile_source
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object

SRC = """license "GPL"
config k1: u32 = 45
config k2: u32 = 46
map out: array<u32, u64>(max_entries: 1)
xdp fn linked(ctx) {
    let v = load u32 at 0 else { return XDP_PASS }
    let bits: u64 = 0
    if v - 43 < 2 {
        if v == k1 { bits |= 4 }
        if v == k2 { bits |= 8 }
        if v >= k1 { bits |= 16 }
    }
    out[0] = bits
    return XDP_PASS
}
"""


@pytest.mark.kernel
@pytest.mark.parametrize("mcpu", ["v3", "v4"])
def test_alu32_add_of_negative_constant_links_as_in_the_kernel(mcpu: str) -> None:
    spec = read_object(compile_source(SRC, "linked.bpfd", mcpu=mcpu, check=False).obj)
    (ours,) = check_object(spec, options=CheckOptions(nr_cpus=syscall.possible_cpus())).programs
    assert ours.ok, ours.errors
    assert ours.insns_processed == kernel_processed(spec)
