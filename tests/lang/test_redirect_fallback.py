"""redirect_map with a fallback of 0: the kernel returns the flags' low bits on an empty
slot, so 0 is XDP_ABORTED (dropped, counted as an error).  bpfdsl keeps that value and says
so: the compiler warns where the fallback is the number 0 (not where it is spelled
XDP_ABORTED), ``bpfdsl check`` warns for clang objects, and ``bpfdsl run`` names the empty
slot and the fallback taken -- on the kernel (which returns 0) and the interpreter alike."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from support.objbuild import compile_c

from bpfdsl.cli import main
from bpfdsl.compiler import compile_source

FRAME = (bytes.fromhex("0200000000020200000000010800") + bytes(50)).hex()


def _prog(fallback: str, extra: str = "") -> str:
    return (
        'license "GPL"\n'
        f"{extra}"
        "map tx: devmap(max_entries: 4)\n"
        "xdp fn fwd(ctx) {\n"
        f"    return redirect_map(tx, 2, {fallback})\n"
        "}\n"
    )


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "fallback,extra,warned",
    [
        ("0", "", True),
        ("FB", "const FB: u64 = 0\n", True),
        ("XDP_ABORTED", "", False),  # said on purpose
        ("XDP_PASS", "", False),
        ("XDP_DROP", "", False),
    ],
)
def test_compiler_warns_for_fallback_zero(fallback, extra, warned) -> None:
    res = compile_source(_prog(fallback, extra), "fb.bpfd")
    ws = [w for w in res.warnings if w.code == "redirect-fallback-aborted"]
    assert len(ws) == (1 if warned else 0), [w.concise() for w in res.warnings]
    if warned:
        line = 5 if extra else 4
        col = _prog(fallback, extra).splitlines()[line - 1].index(fallback) + 1
        assert (ws[0].span.line, ws[0].span.col) == (line, col)
        assert "XDP_ABORTED" in ws[0].message and "XDP_PASS" in ws[0].hints[0]


def test_compile_cli_shows_the_warning_with_a_caret(tmp_path) -> None:
    src = tmp_path / "fb.bpfd"
    src.write_text(_prog("0"))
    rc, _, err = _run("compile", str(src), "-o", str(tmp_path / "fb.o"))
    assert rc == 0
    assert "warning[redirect-fallback-aborted]" in err
    assert f"{src}:4:32" in err and "return redirect_map(tx, 2, 0)" in err and "^" in err


def test_check_warns_for_clang_objects(tmp_path) -> None:
    c = tmp_path / "fwd0.c"
    c.write_text(
        "#include <linux/bpf.h>\n#include <bpf/bpf_helpers.h>\n"
        "struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __uint(max_entries, 4);\n"
        '  __type(key, __u32); __type(value, __u32); } tx SEC(".maps");\n'
        'SEC("xdp") int fwd(struct xdp_md *ctx) { return bpf_redirect_map(&tx, 2, 0); }\n'
        'char LICENSE[] SEC("license") = "GPL";\n'
    )
    obj = compile_c(c, tmp_path / "fwd0.o")
    rc, out, _ = _run("check", str(obj))
    assert rc == 0, out
    assert f"{c}:5:" in out and "warning[redirect-fallback-aborted]" in out
    assert "empty slot returns XDP_ABORTED" in out


@pytest.mark.parametrize("engine", ["interp", pytest.param("kernel", marks=pytest.mark.kernel)])
def test_run_names_the_empty_slot_and_the_fallback(tmp_path, engine) -> None:
    src = tmp_path / "fb.bpfd"
    src.write_text(_prog("0"))
    rc, out, err = _run("run", str(src), "--hex", FRAME, "--engine", engine, "--json")
    assert rc == 0, err
    (p,) = json.loads(out)["packets"]
    assert (p["retval"], p["verdict"]) == (0, "XDP_ABORTED")  # the kernel's value, kept
    assert p["outcome"]["redirect_miss"] == {
        "map": "tx",
        "key": 2,
        "flags": "XDP_ABORTED",
        "why": "empty",
    }
    (line,) = p["effects"]
    assert "devmap tx slot 2 is empty; fallback XDP_ABORTED taken" in line
    # the slot filled (ifindex 1, loopback): a redirect, named the same way
    rc, out, err = _run(
        "run", str(src), "--hex", FRAME, "--engine", engine, "--json", "--map", "tx", "2", "1"
    )
    assert rc == 0, err
    (p,) = json.loads(out)["packets"]
    assert p["verdict"] == "XDP_REDIRECT"
    assert p["outcome"]["redirect"] == {"map": "tx", "key": 2, "flags": "XDP_ABORTED"}
