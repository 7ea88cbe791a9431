"""NULL as a helper's memory argument, as the Linux 6.18 verifier rules on it
(kernel/bpf/verifier.c check_func_arg: ARG_PTR_TO_MEM takes NULL only with PTR_MAYBE_NULL,
then only with size 0, check_helper_mem_access).  The checker took NULL with size 0 for
every memory argument: `bpf_ringbuf_output(&rb, NULL, 0, 0)` was a false accept (found
while modelling the socket lookups, #23).  tests/data/checker/null_mem.c, each program
checked and loaded (scripts/difftest_checker.py's kernel_verdict / our_verdict)."""

from __future__ import annotations

import importlib.util
import sys

import pytest
from support.objbuild import compile_c
from support.paths import DATA, ROOT

SCRIPT = ROOT / "scripts" / "difftest_checker.py"
MEM = "fp, pkt, pkt_meta, map_key, map_value, mem, ringbuf_mem, buf, trusted_ptr_"
EXPECTED = {
    "bad_ringbuf_output_null": f"R2 type=scalar expected={MEM}",
    "bad_sk_lookup_null_tuple": f"R2 type=scalar expected={MEM}",
    "bad_csum_diff_null_sized": "R1 type=scalar expected=fp",
    "ok_csum_diff_null": "",
    "ok_sk_lookup_size_zero": "",
}


@pytest.fixture(scope="module")
def dt():
    spec = importlib.util.spec_from_file_location("difftest_checker", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def items(dt, tmp_path_factory):
    obj = compile_c(DATA / "checker" / "null_mem.c", tmp_path_factory.mktemp("nm") / "nm.o")
    got = {it.name.split(":", 1)[1]: it for it in dt.base_items([str(obj)], lambda o: "c")}
    assert sorted(got) == sorted(EXPECTED)
    return got


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_checker(dt, items, name):
    r = dt.our_verdict(items[name])
    assert (r.errors[0].message if r.errors else "") == EXPECTED[name]
    assert r.ok == name.startswith("ok_")


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
    assert (verdict, msg if verdict == "rej" else "") == (it.ours, EXPECTED[name])
    assert it.our_processed == it.kernel_processed
