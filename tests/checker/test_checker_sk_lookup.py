"""Socket lookups and reference tracking, as the Linux 6.18 verifier rules on them (issue
#23; kernel/bpf/verifier.c acquire_reference / release_reference / check_reference_leak,
net/core/filter.c bpf_sock_is_valid_access): tests/data/checker/sk_lookup.c, built with
clang-19, holds programs the kernel accepts (``ok_*``) and refuses (``bad_*``).  Before,
`bpfdsl check` said "cannot check" (exit 2) for every one of them and accepted a leaked
sockmap lookup the kernel refuses.

Each program is checked by bpfdsl and loaded with BPF_PROG_LOAD through
scripts/difftest_checker.py (kernel_verdict / our_verdict): the verdicts agree, the
kernel's log holds the checker's message, and where both accept they walk the same number
of instructions.  Every (offset, size) read of a socket's fields is asked of the kernel too.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from support.objbuild import compile_c
from support.paths import DATA, ROOT

from bpfdsl.abi import insn as I
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.opcodes import BPF_ADD, BPF_JNE
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.checker import check_insns

SCRIPT = ROOT / "scripts" / "difftest_checker.py"
SOURCE = DATA / "checker" / "sk_lookup.c"
SOCK_TYPES = "sock_common, sock, tcp_sock, xdp_sock, ptr_, trusted_ptr_"

# program -> (the checker's first message, the last line of the kernel's log) for the
# refused ones; both read off this kernel's log (the kernel test checks them again)
REFUSED = {
    "bad_leak": (
        "Unreleased reference id=3 alloc_insn=31",
        "BPF_EXIT instruction in main prog would lead to reference leak",
    ),
    "bad_leak_from_subprog": (
        "Unreleased reference id=3 alloc_insn=37",
        "BPF_EXIT instruction in main prog would lead to reference leak",
    ),
    "bad_msg_sockhash_leak": (
        "Unreleased reference id=2 alloc_insn=6",
        "BPF_EXIT instruction in main prog would lead to reference leak",
    ),
    "bad_sockmap_leak": (
        "Unreleased reference id=2 alloc_insn=6",
        "BPF_EXIT instruction in main prog would lead to reference leak",
    ),
    "bad_tail_call_held": (
        "Unreleased reference id=3 alloc_insn=31",
        "tail_call would lead to reference leak",
    ),
    "bad_release_maybe_null": (f"R1 type=sock_or_null expected={SOCK_TYPES}",) * 2,
    "bad_double_release": (f"R1 type=scalar expected={SOCK_TYPES}",) * 2,
    "bad_release_ctx": (f"R1 type=ctx expected={SOCK_TYPES}",) * 2,
    "bad_release_xsk": ("R1 must be referenced when passed to release function",) * 2,
    "bad_use_after_release": ("R6 invalid mem access 'scalar'",) * 2,
    "bad_sock_field": ("R1 invalid sock access off=50 size=2",) * 2,
    "bad_skc_field": ("R1 invalid sock_common access off=8 size=4",) * 2,
    "bad_write_sock": ("R0 cannot write into sock",) * 2,
    "bad_sock_arith": ("R2 pointer arithmetic on sock prohibited",) * 2,
    "bad_mixed_pointer_insn": ("same insn cannot be used with different pointers",) * 2,
}
ACCEPTED = [
    "ok_tcp_state",
    "ok_udp_count",
    "ok_skc_lookup",
    "ok_tuple_in_packet",
    "ok_across_calls",
    "ok_join_paths",
    "ok_lookup_loop",
    "ok_sockmap_release",
    "ok_msg_sk_narrow",  # narrow loads of the sk_msg context's socket (refused before)
    "ok_sockops_sk_narrow",
]


def _load_script():
    spec = importlib.util.spec_from_file_location("difftest_checker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def dt():
    return _load_script()


@pytest.fixture(scope="module")
def items(dt, tmp_path_factory):
    obj = compile_c(SOURCE, tmp_path_factory.mktemp("sk") / "sk_lookup.o")
    got = {it.name.split(":", 1)[1]: it for it in dt.base_items([str(obj)], lambda o: "c")}
    assert sorted(got) == sorted([*REFUSED, *ACCEPTED])
    return got


@pytest.mark.parametrize("name", ACCEPTED)
def test_checker_accepts(dt, items, name):
    r = dt.our_verdict(items[name])
    assert r.ok, r.errors


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_checker_rejects_with_the_kernels_message(dt, items, name):
    it = items[name]
    r = dt.our_verdict(it)
    assert not r.ok and not r.unchecked, r.errors  # a rejection (exit 1), not "cannot check"
    first, last = REFUSED[name]
    # a leak: the kernel's two lines, "Unreleased reference ..." and "... would lead to
    # reference leak", in one message
    assert r.errors[0].message == (f"{first}: {last}" if first != last else first)


@pytest.mark.kernel
@pytest.mark.parametrize("name", ACCEPTED + sorted(REFUSED))
def test_kernel_agrees(dt, items, name):
    it = items[name]
    maps = dt.Maps()
    try:
        verdict, msg, log = dt.kernel_verdict(it, maps)
    finally:
        maps.close()
    ours = dt.our_verdict(it)
    if name in ACCEPTED:
        assert verdict == "ok", msg
        assert ours.ok, ours.errors
        assert it.our_processed == it.kernel_processed  # the same walk, pruning included
    else:
        first, last = REFUSED[name]
        assert (verdict, msg) == ("rej", last)
        assert first in log.splitlines()
        assert not ours.ok and ours.errors[0].message.startswith(first)
        assert it.our_processed == it.kernel_processed


# ---- every read of a socket's fields ----


def _field_read(lookup: str, off: int, size: int) -> list[I.Insn]:
    """XDP: a zeroed tuple on the stack, ``lookup``, NULL check, one ``size``-byte load at
    ``off`` of the socket, bpf_sk_release, return XDP_PASS."""
    return [
        I.mov64_imm(2, 0),
        *(I.stx_mem(8, 10, 2, -8 * k) for k in range(1, 6)),
        I.mov64_reg(2, 10),
        I.alu64_imm(BPF_ADD, 2, -40),
        I.mov64_imm(3, 12),
        I.mov64_imm(4, -1),  # BPF_F_CURRENT_NETNS
        I.mov64_imm(5, 0),
        I.call(HELPERS[lookup].id),
        I.jmp_imm(BPF_JNE, 0, 0, 2),
        I.mov64_imm(0, 2),
        I.exit_(),
        I.ldx_mem(size, 6, 0, off),
        I.mov64_reg(1, 0),
        I.call(HELPERS["sk_release"].id),
        I.mov64_imm(0, 2),
        I.exit_(),
    ]


CASES = [
    (lk, off, size)
    for lk in ("sk_lookup_tcp", "skc_lookup_tcp")
    for off in range(84)
    for size in (1, 2, 4, 8)
]


def _ours(prog: list[I.Insn]) -> str:
    r = check_insns(prog, ProgramType.XDP)
    return "ok" if r.ok else r.errors[0].message


def test_sock_fields_spot_checks():
    # struct bpf_sock: state u32 at 72 (narrow loads at its start), dst_port __be16 at 48
    # then zero padding, mark u32 at 16 (whole only); sock_common lacks type..priority
    assert _ours(_field_read("sk_lookup_tcp", 72, 4)) == "ok"
    assert _ours(_field_read("sk_lookup_tcp", 72, 1)) == "ok"
    assert _ours(_field_read("sk_lookup_tcp", 73, 1)) == "R0 invalid sock access off=73 size=1"
    assert _ours(_field_read("sk_lookup_tcp", 49, 1)) == "ok"
    assert _ours(_field_read("sk_lookup_tcp", 50, 2)) == "R0 invalid sock access off=50 size=2"
    assert _ours(_field_read("sk_lookup_tcp", 16, 2)) == "R0 invalid sock access off=16 size=2"
    assert _ours(_field_read("sk_lookup_tcp", 80, 4)) == "R0 invalid sock access off=80 size=4"
    assert (
        _ours(_field_read("skc_lookup_tcp", 12, 4)) == "R0 invalid sock_common access off=12 size=4"
    )
    assert _ours(_field_read("skc_lookup_tcp", 4, 4)) == "ok"


@pytest.mark.kernel
def test_sock_field_reads_are_the_kernels(dt):
    """All 672 (lookup, offset, size) reads: the kernel and the checker agree on each."""
    bad = []
    for lk, off, size in CASES:
        prog = _field_read(lk, off, size)
        it = dt.Item("sock_field", f"{lk}_{off}_{size}", prog, ProgramType.XDP, None, 0, {})
        verdict, msg, _log = dt.kernel_verdict(it, dt.Maps())
        want = "ok" if verdict == "ok" else msg
        if _ours(prog) != want:
            bad.append((lk, off, size, want, _ours(prog)))
    assert not bad, bad


def test_source_is_in_the_repo():
    assert Path(SOURCE).exists()


def test_a_leak_names_the_source_line_of_the_lookup(tmp_path):
    """The leak is reported at the exit; the explanation says where the reference was
    taken: its insn (the kernel's alloc_insn) and its source line."""
    from bpfdsl.checker import check_object
    from bpfdsl.obj.collection import read_object

    obj = compile_c(SOURCE, tmp_path / "sk_lookup.o")
    res = {p.name: p for p in check_object(read_object(obj)).programs}
    e = res["bad_leak"].errors[0]
    assert e.message.startswith("Unreleased reference id=3 alloc_insn=31")
    assert "from bpf_sk_lookup_tcp at insn 31 (sk_lookup.c:150: struct bpf_sock *sk = " in (
        e.explain
    ), e.explain
