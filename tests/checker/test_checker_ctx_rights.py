"""The checker's context rules are the table's (bpfdsl.abi.ctx) and agree with the kernel
verifier access by access, for every program kind with a modelled context."""

from __future__ import annotations

import pytest

from bpfdsl.abi import insn as I
from bpfdsl.abi.ctx import BPF_SOCK_OPS, SK_MSG_MD, XDP_MD, CtxStruct
from bpfdsl.abi.prog_types import AttachType, ProgramType
from bpfdsl.checker import check_insns
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.syscall import BpfError

KINDS: list[tuple[CtxStruct, ProgramType, AttachType]] = [
    (XDP_MD, ProgramType.XDP, AttachType.XDP),
    (XDP_MD, ProgramType.XDP, AttachType.XDP_DEVMAP),
    (SK_MSG_MD, ProgramType.SK_MSG, AttachType.SK_MSG_VERDICT),
    (BPF_SOCK_OPS, ProgramType.SOCK_OPS, AttachType.CGROUP_SOCK_OPS),
]


def _programs(s: CtxStruct):
    """(what, insns) for a load of each width at each element's first bytes, and a store
    of r2 = 0 likewise."""
    for f in s.fields:
        for _name, base in f.elements():
            for d in range(4):
                for size in (1, 2, 4, 8):
                    off = base + d
                    if off % size:
                        continue
                    yield (off, size, "read"), [I.ldx_mem(size, 0, 1, off)]
                    yield (off, size, "write"), [I.mov64_imm(2, 0), I.stx_mem(size, 1, 2, off)]


def test_skb_tcp_flags_narrow_loads_only_at_its_offset() -> None:
    """sock_ops_is_valid_access takes a narrower load of skb_tcp_flags under
    ``case offsetof()``: at byte 212 only; 213..215 fall to the 4-byte default."""
    for off, size, ok in ((212, 1, True), (212, 2, True), (213, 1, False), (214, 2, False)):
        insns = [I.ldx_mem(size, 0, 1, off), I.mov64_imm(0, 1), I.exit_()]
        res = check_insns(insns, ProgramType.SOCK_OPS, AttachType.CGROUP_SOCK_OPS)
        assert res.ok is ok, (off, size, [e.message for e in res.errors])


@pytest.mark.kernel
@pytest.mark.parametrize("s,pt,at", KINDS, ids=lambda v: getattr(v, "name", str(v)))
def test_checker_ctx_access_agrees_with_kernel(
    s: CtxStruct, pt: ProgramType, at: AttachType
) -> None:
    ret = 1 if pt != ProgramType.XDP else 2
    wrong = []
    for what, body in _programs(s):
        insns = [*body, I.mov64_imm(0, ret), I.exit_()]
        ours = check_insns(insns, pt, at).ok
        try:
            fd, _ = S.prog_load(pt, I.encode(insns), "GPL", expected_attach_type=int(at))
            fd.close()
            kernel = True
        except BpfError:
            kernel = False
        if ours != kernel:
            wrong.append((*what, "checker", ours, "kernel", kernel))
    assert not wrong, wrong
