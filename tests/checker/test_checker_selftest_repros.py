"""Verdicts the checker gave unlike the Linux 6.18 verifier's selftests (#23), on minimal
reproductions (tests/data/checker/selftest_repros.c, each program checked and loaded with
scripts/difftest_checker.py's kernel_verdict / our_verdict):

* a sign-extending load (BPF_MEMSX) of xdp_md data / data_end / data_meta: the kernel
  refuses it (net/core/filter.c xdp_is_valid_access, info->is_ldsx; selftests
  verifier_ldsx.c), the checker accepted — and would have typed the result as a pointer;
* a tail call in a bpf_loop callback, directly (backtrack_insn: "callback unexpected regs
  1", selftests tailcall_fail.c) or through a function it calls
  (check_max_stack_depth_subprog: "cannot tail call within callback"): checker OK before;
* a sockmap/sockhash bpf_map_update_elem from XDP: the kernel allows it
  (may_update_sockmap), the checker refused; bpf_map_delete_elem from sk_msg: the kernel
  refuses, the checker accepted; the value must be a socket (resolve_map_arg_type), and
  the arguments are checked before the map fits the helper (check_map_func_compatibility
  last, test_sockmap_invalid_update.c);
* a map-in-map lookup (verifier_map_in_map.c): refused by the checker; its non-NULL
  result is the inner map (mark_ptr_or_null_reg), the selftest's pruning shape is
  processed in 15 insns as by the kernel;
* a static function returning void (test_xdp_noinline.c) exits with r0 unset: the kernel
  hands it back as it is (prepare_func_exit), the checker refused the exit.

The difftest loads without BTF, where the kernel refuses a subprogram's tail call earlier
("tail_call is not allowed in subprogs without BTF"): for those two the verdicts are
compared; their messages are the ones `bpftool prog load` (with BTF) prints on 6.18."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from support.objbuild import compile_c
from support.paths import DATA, ROOT

SCRIPT = ROOT / "scripts" / "difftest_checker.py"
SOCK = "sock_common, sock, tcp_sock, xdp_sock, ptr_, trusted_ptr_"
EXPECTED = {
    "bad_ldsx_xdp_data": "invalid bpf_context access off=0 size=4",
    "bad_ldsx_xdp_data_end": "invalid bpf_context access off=4 size=4",
    "bad_ldsx_xdp_data_meta": "invalid bpf_context access off=8 size=4",
    "ok_ldsx_xdp_ingress_ifindex": "",
    "bad_tail_call_in_loop_cb": "verifier bug: callback unexpected regs 1",
    "bad_tail_call_in_loop_cb_subprog": "cannot tail call within callback",
    "ok_sockmap_update_xdp": "",
    "ok_sockhash_update_xdp": "",
    "bad_sockmap_update_fd": f"R3 type=fp expected={SOCK}",
    "bad_sockmap_delete_sk_msg": "cannot pass map_type 15 into func bpf_map_delete_elem#3",
    "bad_sockmap_update_sock_ops": "cannot pass map_type 15 into func bpf_map_update_elem#2",
    "bad_sockmap_update_sock_ops_null": f"R3 type=sock_or_null expected={SOCK}",
    "ok_sockmap_delete_sock_ops": "",
    "ok_map_in_map_pruning": "",
    "ok_map_in_map_lookup": "",
    # the NULL-able result of a lookup in a map of maps: map_value_or_null here and in the
    # kernel builds this was written on; the 6.18.44-fc-v1252 build types it
    # CONST_PTR_TO_MAP|PTR_MAYBE_NULL, "map_ptr_or_null" (ALSO)
    "bad_map_in_map_no_null_check": "R1 type=map_value_or_null expected=map_ptr",
    "bad_map_in_map_update": "cannot pass map_type 12 into func bpf_map_update_elem#2",
    "ok_static_fn_r0_unset": "",
    "bad_read_unset_r0": "R0 !read_ok",
}
NO_BTF = "tail_call is not allowed in subprogs without BTF"
# what another kernel build says for the same rejection (the verdict and count agree)
ALSO = {"bad_map_in_map_no_null_check": "R1 type=map_ptr_or_null expected=map_ptr"}


@pytest.fixture(scope="module")
def dt():
    spec = importlib.util.spec_from_file_location("difftest_checker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def items(dt, tmp_path_factory):
    src = DATA / "checker" / "selftest_repros.c"
    obj = compile_c(src, tmp_path_factory.mktemp("sr") / "sr.o")
    got = {it.name.split(":", 1)[1]: it for it in dt.base_items([str(obj)], lambda o: "c")}
    assert sorted(got) == sorted(EXPECTED)
    return got


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checker(dt, items, name):
    r = dt.our_verdict(items[name])
    assert (r.errors[0].message if r.errors else "") == EXPECTED[name]
    assert r.ok == name.startswith("ok_")


def test_map_in_map_processed_like_the_selftest(dt, items):
    """verifier_map_in_map.c "map in map state pruning" expects "processed 15 insns"."""
    dt.our_verdict(items["ok_map_in_map_pruning"])
    assert items["ok_map_in_map_pruning"].our_processed == 15


def test_tail_call_error_names_the_call(dt, items):
    """The refusal points at the bpf_tail_call instruction (its source line)."""
    for name in ("bad_tail_call_in_loop_cb", "bad_tail_call_in_loop_cb_subprog"):
        it = items[name]
        r = dt.our_verdict(it)
        x = it.insns[r.errors[0].idx]
        assert x.is_helper_call and x.imm == 12, name  # BPF_FUNC_tail_call


@pytest.mark.kernel
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_kernel_agrees(dt, items, name):
    it = items[name]
    maps = dt.Maps()
    try:
        verdict, msg, _log = dt.kernel_verdict(it, maps)
    finally:
        maps.close()
    dt.our_verdict(it)
    assert verdict == it.ours
    if msg == NO_BTF:
        assert "tail_call" in name
        return
    assert (msg if verdict == "rej" else "") in (EXPECTED[name], ALSO.get(name))
    assert it.our_processed == it.kernel_processed
