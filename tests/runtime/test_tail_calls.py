"""Tail calls: `prog_array` maps whose slots the object fills with its own programs (as
clang's `__array(values, ...)` + `.rel.maps`, so bpftool/libbpf fill them too), and
`tail_call(map, slot) else { ... }` with the failure path explicit.  The loader and the
interpreter fill the slots, `bpfdsl run` follows the calls on both engines, `bpfdsl
progarray` sets slots, and a tail call into a program of another kind, an unknown program
or a missing else are located errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import uuid

import pytest
from scapy.layers.inet import IP, TCP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import ARP, Ether
from support.frames import corpus  # frames of every protocol, and truncations
from support.paths import ROOT

from bpfdsl.compiler import compile_file, compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

DISPATCH = ROOT / "progs" / "xdp_dispatch.bpfd"

LIMIT = """license "GPL"
map jmp: prog_array(max_entries: 1) = { 0: again }
map runs: array<u32, u64>(max_entries: 1)
xdp fn again(ctx) {
    runs[0] += 1
    tail_call(jmp, 0) else { return XDP_PASS }
}
"""


def _v4(ttl: int = 64, dport: int = 53, proto=UDP) -> bytes:
    return bytes(Ether() / IP(src="10.0.0.1", dst="10.0.0.2", ttl=ttl) / proto(dport=dport) / b"x")


def _v6(hlim: int = 64, dport: int = 53) -> bytes:
    return bytes(Ether() / IPv6(src="fd00::1", dst="fd00::2", hlim=hlim) / UDP(dport=dport) / b"x")


ARP_FRAME = bytes(Ether(dst="ff:ff:ff:ff:ff:ff") / ARP(pdst="10.0.0.2"))


def test_prog_array_slots_are_in_the_object_as_clang_writes_them():
    spec = read_object(compile_file(DISPATCH).obj)
    m = spec.maps["parsers"]
    assert m.type_name == "prog_array" and (m.key_size, m.value_size) == (4, 4)
    assert m.values == {0: "parse_v4", 1: "parse_v6"}  # from .rel.maps relocations
    btf = spec.btf
    var = btf.find("parsers")
    names = [x.name for x in btf.resolve(var.type).members]
    assert names == ["type", "max_entries", "key_size", "values"]  # clang's __array shape


@pytest.mark.parametrize(
    "frame,verdict,slot",
    [
        (_v4(), "XDP_PASS", 0),
        (_v4(ttl=1), "XDP_DROP", 0),  # parse_v4: TTL expired (a noinline fn)
        (_v4(dport=9999), "XDP_DROP", 0),
        (_v4(dport=9999, proto=TCP), "XDP_PASS", 0),
        (_v6(), "XDP_PASS", 1),
        (_v6(hlim=1), "XDP_DROP", 1),
        (_v6(dport=9999), "XDP_DROP", 1),
        (ARP_FRAME, "XDP_PASS", 2),  # slot 2 is empty: the tail call fails, else passes
    ],
)
def test_dispatcher_verdicts_follow_the_tail_calls_on_both_engines(
    bpf_program, frame, verdict, slot
):
    prog = bpf_program(DISPATCH, "dispatch")
    assert prog.run(frame).verdict == verdict
    assert prog.maps["seen"].total(slot) == 1


@pytest.mark.kernel
def test_interpreter_agrees_with_the_kernel_on_the_dispatcher():
    from bpfdsl.interp import InterpCollection
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    spec = read_object(compile_file(DISPATCH).obj)
    interp = InterpCollection(spec)
    frames = [*corpus()[:150], ARP_FRAME, _v4(ttl=1), _v6(hlim=0)]
    with load_collection(spec) as coll:
        fd = coll.programs["dispatch"].fd
        for f in frames:
            k = syscall.prog_test_run(fd, f)
            i = interp["dispatch"].run(f)
            assert (i.retval, i.data_out) == (k.retval, k.data_out), f.hex()


def test_tail_calls_stop_after_33_on_both_engines(bpf_program, tmp_path):
    """A program in its own slot runs 1 + 33 times (MAX_TAIL_CALL_CNT), then the call
    fails and the else block decides."""
    src = tmp_path / "limit.bpfd"
    src.write_text(LIMIT)
    prog = bpf_program(src)
    assert prog.run(bytes(64)).verdict == "XDP_PASS"
    assert prog.maps["runs"].get(0) == (34).to_bytes(8, "little")


def _bpfdsl(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bpfdsl", *args],
        capture_output=True, text=True, timeout=timeout, cwd=ROOT,
    )  # fmt: skip


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_bpfdsl_run_follows_tail_calls(engine):
    r = _bpfdsl("run", "--engine", engine, "--prog", "dispatch", "--json", "--hex",
                _v4(dport=9999).hex(), str(DISPATCH))  # fmt: skip
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert [p["verdict"] for p in out["packets"]] == ["XDP_DROP"]  # parse_v4 decided


@pytest.mark.kernel
def test_bpftool_fills_the_slots_from_the_object(tmp_path):
    if shutil.which("bpftool") is None:
        pytest.skip("bpftool not installed")
    obj = tmp_path / "dispatch.o"
    obj.write_bytes(compile_file(DISPATCH).obj)
    tag = uuid.uuid4().hex[:8]
    progs, maps = f"/sys/fs/bpf/bpfdsl_tc_p{tag}", f"/sys/fs/bpf/bpfdsl_tc_m{tag}"
    try:
        subprocess.run(["bpftool", "prog", "loadall", str(obj), progs, "pinmaps", maps],
                       check=True, capture_output=True, timeout=60)  # fmt: skip
        dump = subprocess.run(["bpftool", "-j", "map", "dump", "pinned", f"{maps}/parsers"],
                              check=True, capture_output=True, text=True, timeout=60)  # fmt: skip
        slots = {int(e["key"][0], 16): e["value"] for e in json.loads(dump.stdout)}
        ids = {}
        for name in ("parse_v4", "parse_v6"):
            show = subprocess.run(["bpftool", "-j", "prog", "show", "pinned", f"{progs}/{name}"],
                                  check=True, capture_output=True, text=True, timeout=60)  # fmt: skip
            ids[name] = json.loads(show.stdout)["id"]
        got = {k: int.from_bytes(bytes(int(b, 16) for b in v), "little") for k, v in slots.items()}
        assert got == {0: ids["parse_v4"], 1: ids["parse_v6"]}
    finally:
        shutil.rmtree(progs, ignore_errors=True)
        shutil.rmtree(maps, ignore_errors=True)


@pytest.mark.kernel
def test_progarray_command_sets_shows_and_refuses_another_kind(tmp_path):
    from bpfdsl.kernel import syscall

    tag = uuid.uuid4().hex[:8]
    pin, other = f"/sys/fs/bpf/bpfdsl_tc_{tag}", f"/sys/fs/bpf/bpfdsl_tc_o{tag}"
    frags = tmp_path / "frags.bpfd"
    frags.write_text('license "GPL"\nxdp(frags) fn big(ctx) { return XDP_DROP }\n')
    try:
        r = _bpfdsl("load", str(DISPATCH), "--pin-dir", pin)
        assert r.returncode == 0, r.stderr
        with syscall.obj_get(f"{pin}/progs/dispatch") as fd:
            assert syscall.prog_test_run(fd, ARP_FRAME).retval == 2  # slot 2 empty: PASS
            r = _bpfdsl("progarray", "set", f"{pin}:parsers", "2", "parse_v6")
            assert r.returncode == 0, r.stderr
            assert syscall.prog_test_run(fd, ARP_FRAME).retval == 1  # parse_v6: DROP
        r = _bpfdsl("progarray", "show", "--json", f"{pin}:parsers")
        slots = json.loads(r.stdout)
        assert [s["key"] for s in slots] == [0, 1, 2]
        assert slots[2]["prog_name"] == "parse_v6"  # the program by name, not just its id
        r = _bpfdsl("progarray", "show", f"{pin}:parsers")
        assert "slot 2: parse_v6 (prog id " in r.stdout
        r = _bpfdsl("progarray", "delete", f"{pin}:parsers", "2")
        assert r.returncode == 0 and "emptied" in r.stdout
        r = _bpfdsl("load", str(frags), "--pin-dir", other)
        assert r.returncode == 0, r.stderr
        r = _bpfdsl("progarray", "set", f"{pin}:parsers", "3", f"{other}/progs/big")
        assert r.returncode == 1
        assert "refused it" in r.stderr and "one kind" in r.stderr
        r = _bpfdsl("progarray", "set", f"{pin}:parsers", "4", "parse_v4")
        assert r.returncode == 2 and "slots 0..3" in r.stderr
    finally:
        for d in (pin, other):
            _bpfdsl("unload", d)
            shutil.rmtree(d, ignore_errors=True)


# ---- bad input ------------------------------------------------------------------------

HEAD = 'license "GPL"\n'

# (name, source after HEAD, code, line, col, words in the message, words in the hint)
BAD = [
    (
        "other_kind_in_a_slot",
        "map j: prog_array(max_entries: 2) = { 0: a, 1: b }\n"
        "xdp fn a(ctx) { tail_call(j, 1) else { return XDP_PASS } }\n"
        "xdp(frags) fn b(ctx) { return XDP_PASS }\n",
        "tail-call-kind",
        2,
        48,
        "`b` (xdp(frags)) is in a slot of `j`",
        "separate prog_array",
    ),
    (
        "other_kind_calls",
        "map j: prog_array(max_entries: 2) = { 0: a }\n"
        "xdp fn a(ctx) { return XDP_PASS }\n"
        "xdp(cpumap) fn c(ctx) { tail_call(j, 0) else { return XDP_PASS } }\n",
        "tail-call-kind",
        2,
        42,
        "but `c` tail-calls through it (xdp(cpumap))",
        "attach type",
    ),
    (
        "unknown_program",
        "map j: prog_array(max_entries: 2) = { 0: parse_v9 }\n"
        "xdp fn parse_v4(ctx) { return XDP_PASS }\n",
        "unknown-program",
        2,
        42,
        "no program named `parse_v9`",
        "parse_v4",
    ),
    (
        "fn_in_a_slot",
        "fn helper() -> u32 { return 1 }\n"
        "map j: prog_array(max_entries: 2) = { 0: helper }\n"
        "xdp fn p(ctx) { return XDP_PASS }\n",
        "unknown-program",
        3,
        42,
        "is a fn, not a program",
        "xdp fn",
    ),
    (
        "slot_past_the_end",
        "map j: prog_array(max_entries: 2) = { 2: p }\nxdp fn p(ctx) { return XDP_PASS }\n",
        "map-init",
        2,
        39,
        "slot 2 is outside `j`",
        "more entries",
    ),
    (
        "slot_twice",
        "map j: prog_array(max_entries: 2) = { 0: p, 0: p }\nxdp fn p(ctx) { return XDP_PASS }\n",
        "map-init",
        2,
        45,
        "slot 0 of `j` is given twice",
        "keep one",
    ),
    (
        "entries_on_another_map",
        "map h: hash<u32, u32>(max_entries: 2) = { 0: p }\nxdp fn p(ctx) { return XDP_PASS }\n",
        "map-init",
        2,
        43,
        "takes no initial entries",
        "prog_array",
    ),
    (
        "no_else",
        "map j: prog_array(max_entries: 2)\n"
        "xdp fn p(ctx) {\n    tail_call(j, 0)\n    return XDP_PASS\n}\n",
        "tail-call-else",
        4,
        5,
        "needs an else block",
        "else { return XDP_PASS }",
    ),
    (
        "else_does_not_leave",
        "map j: prog_array(max_entries: 2)\n"
        "xdp fn p(ctx) {\n    tail_call(j, 0) else { }\n    return XDP_PASS\n}\n",
        "else-must-leave",
        4,
        26,
        "must leave",
        "slot is empty",
    ),
    (
        "not_a_prog_array",
        "map h: hash<u32, u32>(max_entries: 2)\n"
        "xdp fn p(ctx) { tail_call(h, 0) else { return XDP_PASS } }\n",
        "tail-call-map",
        3,
        27,
        "not a hash map",
        "prog_array",
    ),
    (
        "in_a_fn",
        "map j: prog_array(max_entries: 2)\n"
        "fn f() -> u32 { tail_call(j, 0) else { return 1 } }\n"
        "xdp fn p(ctx) { return XDP_PASS }\n",
        "tail-call-in-fn",
        3,
        17,
        "only allowed in a program body",
        "tail-call in the program",
    ),
    (
        "else_on_another_call",
        "xdp fn p(ctx) {\n    ktime_get_ns() else { return XDP_PASS }\n    return XDP_PASS\n}\n",
        "call-else",
        3,
        25,
        "has no failure path",
        "tail_call",
    ),
    (
        "written_from_the_program",
        "map j: prog_array(max_entries: 2)\n"
        "xdp fn p(ctx) {\n    j[0] = 1\n    return XDP_PASS\n}\n",
        "map-method",
        4,
        5,
        "cannot be written from a program",
        "bpfdsl progarray set",
    ),
]


@pytest.mark.parametrize("name,src,code,line,col,msg,hint", BAD, ids=[b[0] for b in BAD])
def test_bad_tail_call_is_a_located_error(name, src, code, line, col, msg, hint):
    with pytest.raises(DiagnosticError) as ei:
        compile_source(HEAD + src, "bad.bpfd")
    d = next(d for d in ei.value.diagnostics if d.code == code)
    shown = d.render(ei.value.source)
    assert (d.span.line, d.span.col) == (line, col), shown
    assert msg in d.message and any(hint in h for h in d.hints), shown


def test_unknown_program_in_a_slot_exits_1_on_the_command_line(tmp_path):
    src = tmp_path / "bad.bpfd"
    src.write_text(HEAD + BAD[2][1])
    r = _bpfdsl("compile", str(src), "-o", str(tmp_path / "bad.o"))
    assert r.returncode == 1
    assert f"{src}:2:42" in r.stderr and "^" in r.stderr and "did you mean" in r.stderr
    assert "Traceback" not in r.stderr


TAIL_IN_SUBPROG_C = r"""
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
struct {
    __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
    __uint(max_entries, 4);
    __uint(key_size, 4);
    __uint(value_size, 4);
} jmp SEC(".maps");
static __noinline int sub(struct xdp_md *ctx) { bpf_tail_call(ctx, &jmp, 0); return 0; }
SEC("xdp") int p(struct xdp_md *ctx) {
    char buf[SIZE];
    __builtin_memset(buf, 'a', SIZE);
    buf[SIZE - 1] = 0;
    bpf_trace_printk(buf, SIZE);
    return sub(ctx);
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.mark.kernel
@pytest.mark.parametrize("size", [64, 320])
def test_checker_limits_the_stack_above_a_tail_calling_subprogram_like_the_kernel(tmp_path, size):
    """A subprogram that tail-calls may only be called with less than 256 bytes of stack
    in its callers (the kernel bounds the worst case of 33 tail calls that way)."""
    from support.objbuild import build_text

    from bpfdsl.checker import check_object
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = build_text(TAIL_IN_SUBPROG_C.replace("SIZE", str(size)), tmp_path)
    spec = read_object(obj)
    msgs = [e.message for p in check_object(spec).programs for e in p.errors]
    if size < 256:
        assert msgs == []
        load_collection(spec).close()
        return
    want = f"tail_calls are not allowed when call stack of previous frames is {size} bytes"
    assert msgs == [want + ". Too large"]
    with pytest.raises(VerifierError) as ei:
        load_collection(spec).close()
    assert want in ei.value.log
