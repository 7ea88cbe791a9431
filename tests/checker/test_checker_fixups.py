"""The checker's model of the kernel's rewrite after verification (bpfdsl/checker/fixups.py)
against the kernel's: the rewritten length the model computes is the kernel's
``xlated_prog_len / 8`` (BPF_OBJ_GET_INFO_BY_FD) for every program of progs/ and for
programs made to hold each rewrite the model knows -- dead code and nops removed, ctx
fields of xdp, sk_msg and sock_ops converted, array / hash / lru_hash / percpu_array /
percpu_hash lookups inlined (lru_percpu_hash not), div by a register checked,
bpf_get_smp_processor_id and bpf_jiffies64 inlined, tail calls left one insn."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.acl import acl_source
from support.paths import PROGS

from bpfdsl.checker import check_object
from bpfdsl.compiler import compile_source
from bpfdsl.obj.collection import read_object

MAPS = """\
license "GPL"
map h: hash<u32, u64>(max_entries: 16)
map l: lru_hash<u32, u64>(max_entries: 16)
map ph: percpu_hash<u32, u64>(max_entries: 16)
map pa: percpu_array<u32, u64>(max_entries: 16)
map lp: lru_percpu_hash<u32, u64>(max_entries: 16)
map out: array<u32, u64>(max_entries: 4)
xdp fn m(ctx) {
    let k = ctx.rx_queue_index
    if let v = h.lookup(k) { out[0] = v }
    if let v = l.lookup(k) { out[0] = v }
    if let v = ph.lookup(k) { out[0] = v }
    if let v = pa.lookup(k) { out[0] = v }
    if let v = lp.lookup(k) { out[0] = v }
    let d: u32 = ctx.ingress_ifindex
    let q: u64 = ctx.ingress_ifindex as u64 + 3
    out[0] = (k / d) as u64
    out[1] = (k % d) as u64
    out[2] = 1000 / q + 1000 % q
    out[3] = get_smp_processor_id() as u64 + bpf_jiffies64()
    return XDP_PASS
}
"""

SOCK_OPS = """\
license "GPL"
struct seen_t { op: u32, cwnd: u32, state: u32, lport: u16, rport: be16, remote_ip: be32 }
map seen: array<u32, seen_t>(max_entries: 1)
sock_ops fn t(skops) {
    seen[0] = seen_t(op: skops.op, cwnd: skops.snd_cwnd, state: skops.state,
                     lport: skops.local_port, rport: skops.remote_port,
                     remote_ip: skops.remote_ip4)
    if skops.op == BPF_SOCK_OPS_TCP_CONNECT_CB { sock_ops_cb_flags_set(BPF_SOCK_OPS_STATE_CB_FLAG) }
    if skops.op == BPF_SOCK_OPS_RTO_CB { return 0 }
    return 1
}
"""

# name -> (source, mcpu); the 300-rule ACL has branches the walk never takes (dead code)
SOURCES = {
    "maps_div_inlined_helpers": (MAPS, "v3"),
    "sock_ops_fields": (SOCK_OPS, "v3"),
    "acl_300_rules": (acl_source(300), "v3"),
    **{p.stem: (p.read_text(), "v3") for p in sorted(PROGS.glob("*.bpfd"))},
}


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(SOURCES))
def test_model_length_is_the_kernels_xlated_length(name: str) -> None:
    """For each program of the object, the checker's rewritten length (ProgramResult.
    xlated_count) is the kernel's xlated_prog_len / 8, and the checker accepts it."""
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    text, mcpu = SOURCES[name]
    obj = compile_source(text, f"{name}.bpfd", mcpu=mcpu, check=False).obj
    spec = read_object(obj)
    model = {p.name: p for p in check_object(spec).programs}
    assert all(p.ok for p in model.values()), {n: p.errors for n, p in model.items()}
    with load_collection(spec) as coll:
        kernel = {n: syscall.prog_info(p.fd).xlated_prog_len // 8 for n, p in coll.programs.items()}
    assert {n: p.xlated_count for n, p in model.items()} == kernel, {
        n: p.insn_count for n, p in model.items()
    }


def test_dead_code_is_not_counted(tmp_path: Path) -> None:
    """The 300-rule ACL has branches the walk never takes: its rewritten length is below
    the original plus the lookups' growth (the removed insns are not counted)."""
    obj = compile_source(acl_source(300), "acl.bpfd", mcpu="v3", check=False).obj
    (p,) = check_object(read_object(obj)).programs
    assert p.ok
    assert p.xlated_count < p.insn_count + 300 * 6


# ---- the 16-bit boundary on raw instructions (no LLVM in between) ----


def lookups_over(k: int, map_fd: int = 0) -> list:
    """XDP: ``if bpf_get_prandom_u32() == 0 goto out`` over ``k`` lookups of key 0 in an
    array map (6 insns each; inlined by the kernel into 7: the jump grows by 6 a lookup);
    out: return XDP_PASS."""
    from bpfdsl.abi import insn as I
    from bpfdsl.abi.helpers import HELPERS
    from bpfdsl.abi.opcodes import BPF_ADD, BPF_JEQ

    body = [
        I.st_mem(4, 10, -4, 0),
        I.mov64_reg(2, 10),
        I.alu64_imm(BPF_ADD, 2, -4),
        I.ld_map_fd(1, map_fd),
        I.call(HELPERS["map_lookup_elem"].id),
    ]
    return [
        I.call(HELPERS["get_prandom_u32"].id),
        I.jmp_imm(BPF_JEQ, 0, 0, 6 * k),
        *(body * k),
        I.mov64_imm(0, 2),
        I.exit_(),
    ]


def check_lookups(k: int):
    from bpfdsl.abi.map_types import MapType
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.checker import DataMap, check_insns
    from bpfdsl.checker.env import MapRef

    insns = lookups_over(k)
    m = DataMap("a", bytes(8), False, MapType.ARRAY, 4, 4)
    refs = {i: MapRef(m) for i, x in enumerate(insns) if x.is_ld_imm64}
    return check_insns(insns, ProgramType.XDP, map_refs=refs)


def _refused_insn(text: str) -> int | None:
    import re

    m = re.search(r"insn (\d+) cannot be patched due to 16-bit range", text)
    return int(m.group(1)) if m else None


def test_checker_refuses_the_first_lookup_that_overflows_the_jump() -> None:
    """The jump's offset is 6k before the rewrite and 12k after (array_map_gen_lookup: 7
    insns for the call); 12k fits s16 up to k = 2730.  At k = 2731 the last lookup's patch
    is the one that overflows (6k + 6j > 32767 first at j = k), at slot 2 + 6k - 1."""
    ok = check_lookups(2730)
    assert ok.ok, ok.errors
    assert ok.xlated_count == 4 + 12 * 2730
    bad = check_lookups(2731)
    (e,) = bad.errors
    assert e.code == "patch-range" and _refused_insn(e.message) == 2 + 6 * 2731 - 1
    assert "insn 1" in e.explain  # the jump


@pytest.mark.kernel
def test_kernel_boundary_of_the_jump_is_the_checkers() -> None:
    """Bisect k on the kernel for the last program it loads; the checker accepts that one
    and refuses the next with the same insn the kernel names (errno ENOMEM)."""
    from bpfdsl.abi.insn import encode
    from bpfdsl.abi.map_types import MapType
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.kernel import syscall

    with syscall.map_create(MapType.ARRAY, 4, 8, 4, name="patchrange") as fd:

        def kernel(k: int) -> str | None:
            try:
                prog, _ = syscall.prog_load(
                    ProgramType.XDP, encode(lookups_over(k, int(fd))), "GPL", log_level=1,
                    log_size=1 << 20,
                )  # fmt: skip
            except syscall.BpfError as e:
                assert e.errno == 12, (e.errno, e.log[-300:])
                return e.log
            prog.close()
            return None

        lo, hi = 1000, 5000
        assert kernel(lo) is None and kernel(hi) is not None
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if kernel(mid) is None else (lo, mid)
        refusal = kernel(hi) or ""
    assert check_lookups(lo).ok
    (e,) = check_lookups(hi).errors
    assert _refused_insn(e.message) == _refused_insn(refusal) is not None, (hi, refusal[-300:])
