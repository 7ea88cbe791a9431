"""The checker walks programs with subprograms as the kernel verifier (Linux 6.18) does, so
its processed-instruction count is the kernel's: global functions verified once each, on
their own, after the program (their instructions count toward the same limit); static
subprograms in the caller's frame stack, with scalars linked across the call (a 32-bit
move of a value that fits links the copy: assign_scalar_id_before_mov); a constant
tail_call index marked precise (record_func_key); bpf_loop callbacks pushed at the call,
back to it at their exit, at most umax(count) visits (push_callback_call, callback_depth).
Each kernel test loads the same object and compares the counts."""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import sys

import pytest
from support.objbuild import build_text
from support.paths import ROOT
from support.progrun import kernel_processed

from bpfdsl.abi import insn as I
from bpfdsl.abi.opcodes import BPF_PSEUDO_MAP_FD
from bpfdsl.checker import check_insns, check_object, map_refs_for
from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.obj.collection import read_object


def _acl_gen():
    spec = importlib.util.spec_from_file_location("acl_gen", ROOT / "benchmarks" / "acl_gen.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _kernel_processed_without_btf(spec, prog) -> int:
    """support.progrun.kernel_processed's count, loaded without BTF: every subprogram is
    then static to the kernel."""
    from bpfdsl.kernel import syscall as S

    fds, ins = [], list(prog.insns)
    refs = map_refs_for(prog, spec.maps, spec.data_sections)
    try:
        for idx, ref in refs.items():
            m = ref.map
            fd = S.map_create(m.map_type, m.key_size, m.value_size, m.max_entries)
            fds.append(fd)
            ins[idx] = dataclasses.replace(ins[idx], src=BPF_PSEUDO_MAP_FD, imm=int(fd))
        fd, log = S.prog_load(
            prog.kind.program_type, I.encode(ins), "GPL", log_level=1 | 4, log_size=1 << 20
        )
        fd.close()
    finally:
        for fd in fds:
            fd.close()
    return int(re.search(r"processed (\d+) insns", log).group(1))


@pytest.mark.kernel
@pytest.mark.parametrize("rules", [2, 25])
def test_acl_of_global_functions_walks_the_kernels_count(rules, tmp_path):
    """benchmarks/acl_gen.py's ACL, one global fn per rule: the program, then each rule on its
    own; the total is the kernel's."""
    r = compile_source(_acl_gen().bpfd_source(rules), "acl.bpfd")
    spec = read_object(r.obj)
    (prog,) = check_object(spec).programs
    assert prog.ok
    assert prog.insns_processed == kernel_processed(spec, 1 << 20)


@pytest.mark.kernel
def test_acl_as_static_subprograms_walks_the_kernels_count():
    """Without BTF the kernel takes every rule as a static subprogram, walked in the
    caller's frames for every path that reaches its call: branches inside a rule refine
    the caller's linked registers, as the kernel's do, and the count stays the kernel's."""
    r = compile_source(_acl_gen().bpfd_source(10), "acl.bpfd")
    spec = read_object(r.obj)
    (p,) = spec.programs.values()
    res = check_insns(
        p.insns, p.kind.program_type, p.kind.attach_type,
        map_refs=map_refs_for(p, spec.maps, spec.data_sections),
    )  # fmt: skip
    assert res.ok
    assert res.insns_processed == _kernel_processed_without_btf(spec, p) == 894


@pytest.mark.kernel
def test_dispatcher_tail_call_slots_are_walked_like_the_kernel():
    """progs/xdp_dispatch.bpfd tail-calls slot 0, 1, 2 or 3 by protocol: each constant slot
    is relied on exactly, so the paths are not pruned into one (77 insns on 6.18)."""
    spec = read_object(compile_file(str(ROOT / "progs" / "xdp_dispatch.bpfd")).obj)
    res = check_object(spec)
    (ours,) = [p for p in res.programs if p.name == "dispatch"]
    assert ours.ok
    prog = spec.programs["dispatch"]
    assert ours.insns_processed == _kernel_processed_without_btf(spec, prog) == 77


LOOPS_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
static long nop(__u64 i, void *p) { return 0; }
static long count(__u64 i, void *p) { __u64 *x = p; *x += 1; return *x > 7; }
SEC("xdp") int p(struct xdp_md *ctx) {
    __u64 x = 0;
    bpf_loop(4, nop, 0, 0);
    bpf_loop(100, count, &x, 0);
    return x > 3 ? XDP_DROP : XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.kernel
def test_bpf_loop_callbacks_are_visited_like_the_kernel(tmp_path):
    """Each visit of a callback is pushed at its bpf_loop call and comes back to it; the
    checkpoint there ends the visits once a returning state is covered (by range), or the
    count's maximum does: the walk is the kernel's instruction for instruction."""
    spec = read_object(build_text(LOOPS_C, tmp_path))
    (prog,) = check_object(spec).programs
    assert prog.ok
    assert prog.insns_processed == kernel_processed(spec, 1 << 20)
