"""Objects load on kernels older than their BTF (Linux >= 5.10, README): a kind the kernel
does not know is rewritten before BPF_BTF_LOAD as libbpf does (abi/btf/sanitize.py after
src/libbpf.c bpf_object__sanitize_btf), found by libbpf's probes (kernel/features.py after
src/features.c).  This kernel knows every kind, so an older one is stood for by the
features it lacks: the rewritten BTF must still be taken by this kernel, with the
program verified and giving its verdict, and must hold no type of the missing kind."""

from __future__ import annotations

import copy
import json
import subprocess
import sys

import pytest
from support.objbuild import build

from bpfdsl.abi.btf.core import BTF_FUNC_GLOBAL, Kind, parse_btf
from bpfdsl.abi.btf.sanitize import ENUM64_PLACEHOLDER, BtfFeatures, fixup_arg_ctx, sanitize_for
from bpfdsl.abi.prog_types import XdpAction
from bpfdsl.compiler import compile_source
from bpfdsl.kernel import syscall as S
from bpfdsl.kernel.features import PROBES, btf_features, probe, probe_blob
from bpfdsl.obj.collection import read_object
from bpfdsl.runtime.loader import VerifierError, load_collection
from bpfdsl.runtime.packets import udp_frame

pytestmark = pytest.mark.kernel

FRAME = udp_frame(src_mac="02:00:00:00:00:01", dst_mac="02:00:00:00:00:02",
                  src_ip="10.0.0.1", dst_ip="10.0.0.2", sport=1000, dport=9999,
                  payload=b"x" * 18)  # fmt: skip

# feature the kernel lacks -> (kind gone from the BTF, the changes the loader reports)
LACKS = {
    "decl_tag": (Kind.DECL_TAG, ["DECL_TAG -> INT: 1"]),
    "type_tag": (Kind.TYPE_TAG, ["TYPE_TAG -> CONST: 1"]),
    "float": (Kind.FLOAT, ["FLOAT -> STRUCT: 1"]),
    "enum64": (Kind.ENUM64, ["ENUM64 -> UNION: 1", "ENUM signed -> unsigned: 1"]),
}


def test_the_probes_find_every_feature_of_this_kernel() -> None:
    assert btf_features() == BtfFeatures()


def test_a_probe_of_a_kind_the_kernel_does_not_know_says_no() -> None:
    """What an older kernel does with ENUM64: an unknown kind (31 here) is refused."""
    types, strings = PROBES["enum64"]
    assert probe(types, strings) is True
    assert probe([types[0], 31 << 24, types[2]], strings) is False


def _run(coll, name: str) -> int:
    return S.prog_test_run(coll.programs[name].fd, FRAME).retval


@pytest.mark.parametrize("lacks", [*LACKS, "all"])
def test_a_c_object_with_newer_kinds_loads_where_they_are_missing(lacks: str) -> None:
    spec = read_object(build("btf_new_kinds"))
    before = spec.btf.to_bytes()
    missing = list(LACKS) if lacks == "all" else [lacks]
    feats = BtfFeatures(**{f: False for f in missing})
    with load_collection(spec, pinning=False, btf_features=feats) as coll:
        assert _run(coll, "new_kinds") == XdpAction.PASS
        assert sorted(coll.btf_changes) == sorted(c for f in missing for c in LACKS[f][1])
    assert spec.btf.to_bytes() == before  # the spec's BTF is not changed
    out, _ = sanitize_for(spec.btf, feats)
    kinds = {t.kind for t in out.types[1:]}
    assert not kinds & {LACKS[f][0] for f in missing}
    grew = 1 if "enum64" in missing else 0  # the ENUM64 placeholder INT, appended
    assert len(out.types) == len(spec.btf.types) + grew
    if grew:
        assert out.types[-1].name == ENUM64_PLACEHOLDER and out.types[-1].size == 1


def test_signed_enums_lose_their_sign_where_enum64_is_missing() -> None:
    spec = read_object(build("btf_new_kinds"))
    out, changes = sanitize_for(spec.btf, BtfFeatures(enum64=False))
    (sign,) = [t for t in out.types if t.kind == Kind.ENUM and t.name == "sign"]
    assert not sign.kflag and "ENUM signed -> unsigned: 1" in changes


def test_nothing_missing_loads_the_btf_as_it_is() -> None:
    spec = read_object(build("btf_new_kinds"))
    assert sanitize_for(spec.btf, BtfFeatures()) == (spec.btf, [])
    with load_collection(spec, pinning=False) as coll:
        assert coll.btf_changes == [] and _run(coll, "new_kinds") == XdpAction.PASS


GLOBAL_CTX = """\
license "GPL"

global fn udp_port() -> i32 {
    let eth = parse ethernet else { return -1 }
    if eth.h_proto != ETH_P_IP { return -1 }
    let ip = parse ipv4 else { return -1 }
    if ip.protocol != IPPROTO_UDP { return -1 }
    let udp = parse udp else { return -1 }
    return host(udp.dest) as i32
}

xdp fn f(ctx) {
    if udp_port() == 9999 { return XDP_DROP }
    return XDP_PASS
}
"""


def test_a_global_fn_with_the_context_verifies_without_decl_tags() -> None:
    """bpfdsl tags the context parameter of a global fn ``arg:ctx`` (Linux 6.8) and types
    it ``struct xdp_md *``, which older kernels recognise by name: without DECL_TAG the
    function is still verified with the context and the frame gets its verdict."""
    spec = read_object(compile_source(GLOBAL_CTX, "global_ctx.bpfd").obj)
    with load_collection(spec, pinning=False, btf_features=BtfFeatures(decl_tag=False)) as c:
        assert c.btf_changes == ["DECL_TAG -> INT: 1"]
        assert _run(c, "f") == XdpAction.DROP


@pytest.mark.parametrize("feature", sorted(PROBES))
def test_each_probe_blob_rewritten_for_a_kernel_without_it_loads(feature: str) -> None:
    """The probe of each feature, rewritten for a kernel that lacks it, no longer uses it
    (no such kind, no global FUNC, no '?' DATASEC name) and this kernel takes it."""
    types, strings = PROBES[feature]
    btf = parse_btf(probe_blob(types, strings))
    out, changes = sanitize_for(btf, BtfFeatures(**{feature: False}))
    assert len(changes) == 1
    gone = {
        "func_global": lambda t: t.kind == Kind.FUNC and t.linkage == BTF_FUNC_GLOBAL,
        "float": lambda t: t.kind == Kind.FLOAT,
        "decl_tag": lambda t: t.kind == Kind.DECL_TAG,
        "type_tag": lambda t: t.kind == Kind.TYPE_TAG,
        "enum64": lambda t: t.kind == Kind.ENUM64,
        "qmark_datasec": lambda t: t.kind == Kind.DATASEC and t.name.startswith("?"),
    }[feature]
    assert any(gone(t) for t in btf.types[1:]) and not any(gone(t) for t in out.types[1:])
    fd, _ = S.btf_load(out.to_bytes())
    fd.close()


def test_without_arg_ctx_a_void_ctx_parameter_is_refused() -> None:
    """The premise: without the tag (what a kernel before 6.8 reads) a global function's
    ``void *ctx`` is not the context, and the program is refused."""
    spec = read_object(build("arg_ctx_void"))
    with pytest.raises(VerifierError):
        load_collection(spec, pinning=False, btf_features=BtfFeatures(decl_tag=False)).close()


@pytest.mark.parametrize("decl_tag", [True, False])
def test_a_void_ctx_parameter_is_cloned_as_the_context_struct(decl_tag: bool) -> None:
    """libbpf's bpf_program_fixup_func_info: the global function loads as `struct xdp_md *`
    where the verifier does not read arg:ctx, also with DECL_TAG itself missing (5.10)."""
    spec = read_object(build("arg_ctx_void"))
    feats = BtfFeatures(arg_ctx=False, decl_tag=decl_tag)
    with load_collection(spec, pinning=False, btf_features=feats) as coll:
        assert "global FUNC void *ctx __arg_ctx -> struct ctx *: 1" in coll.btf_changes
        assert _run(coll, "len_gate") == XdpAction.PASS
        assert S.prog_test_run(coll.programs["len_gate"].fd, FRAME[:40]).retval == XdpAction.DROP
        (records,) = coll.func_info.values()
    spec_ids = [f.type_id for f in spec.programs["len_gate"].func_info]
    assert records[0].type_id == spec_ids[0] and records[1].type_id != spec_ids[1]


def test_the_clone_points_the_tagged_parameter_at_the_context_struct() -> None:
    spec = read_object(build("arg_ctx_void"))
    btf = copy.deepcopy(spec.btf)
    ids = [f.type_id for f in spec.programs["len_gate"].func_info]
    new, warnings = fixup_arg_ctx(btf, ids, "xdp_md")
    assert warnings == [] and new[0] == ids[0] and new[1] >= len(spec.btf.types)
    fn = btf[new[1]]
    assert fn.name == "frame_len" and fn.linkage == BTF_FUNC_GLOBAL
    (param,) = btf[fn.type].members
    ptr = btf[param.type]
    assert ptr.kind == Kind.PTR and btf[ptr.type].name == "xdp_md"
    assert any(t.kind == Kind.DECL_TAG and t.type == fn.id for t in btf.types)
    assert spec.btf[ids[1]].type != fn.type  # the original FUNC_PROTO is not changed


def test_a_context_struct_parameter_needs_no_clone() -> None:
    spec = read_object(build("btf_new_kinds"))
    with load_collection(spec, pinning=False, btf_features=BtfFeatures(arg_ctx=False)) as coll:
        assert coll.btf_changes == [] and coll.func_info == {}
        assert _run(coll, "new_kinds") == XdpAction.PASS


def test_load_json_says_how_the_btf_was_rewritten(tmp_path) -> None:
    """`bpfdsl -j load` lists the rewrite (none on this kernel, which takes every kind)."""
    pin = f"/sys/fs/bpf/bpfdsl_btfcompat_{tmp_path.name[-8:]}"
    obj = str(build("btf_new_kinds"))
    run = [sys.executable, "-m", "bpfdsl"]
    try:
        r = subprocess.run([*run, "-j", "load", obj, "--pin-dir", pin], capture_output=True,
                           text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        assert json.loads(r.stdout)["btf_changes"] == []
    finally:
        subprocess.run([*run, "unload", pin], capture_output=True, timeout=60)
