"""libxdp run config (#27): ``xdp(priority: N, chain_call: XDP_PASS | ...) fn`` writes
libxdp's ``XDP_RUN_CONFIG`` struct, which libxdp (xdp-loader, bpfman) reads from our
objects and from the kernel the same as from clang's object built with libxdp's own
``xdp/xdp_helpers.h``."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from pathlib import Path

import pytest
import yaml
from support.objbuild import build_text

from bpfdsl.abi.btf.run_config import RunConfig, read_run_config
from bpfdsl.cli import main
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object

ACTIONS = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")  # enum order

SRC = """license "GPL"
const PRIO: u32 = 10
xdp(priority: PRIO, chain_call: XDP_PASS | XDP_DROP) fn xdp_filter(ctx) {
    return XDP_PASS
}
"""

C_TWIN = """#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <xdp/xdp_helpers.h>
struct {
    __uint(priority, 10);
    __uint(XDP_PASS, 1);
    __uint(XDP_DROP, 1);
} XDP_RUN_CONFIG(xdp_filter);
SEC("xdp") int xdp_filter(struct xdp_md *ctx) { return XDP_PASS; }
char _license[] SEC("license") = "GPL";
"""


class LibXdp:
    """libxdp's public API through ctypes (xdp-tools headers/xdp/libxdp.h)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("xdp") or "libxdp.so.1"
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            pytest.skip("libxdp not installed (apt-get install xdp-tools libxdp-dev)")
        vp = ctypes.c_void_p
        lib.xdp_program__open_file.restype = vp
        lib.xdp_program__open_file.argtypes = [ctypes.c_char_p, ctypes.c_char_p, vp]
        lib.xdp_program__from_id.restype = vp
        lib.xdp_program__from_id.argtypes = [ctypes.c_uint32]
        lib.libxdp_get_error.restype = ctypes.c_long
        lib.libxdp_get_error.argtypes = [vp]
        lib.xdp_program__run_prio.restype = ctypes.c_uint
        lib.xdp_program__run_prio.argtypes = [vp]
        lib.xdp_program__chain_call_enabled.restype = ctypes.c_bool
        lib.xdp_program__chain_call_enabled.argtypes = [vp, ctypes.c_int]
        lib.xdp_program__close.argtypes = [vp]
        self.lib = lib

    def _read(self, prog: int | None) -> tuple[int, tuple[str, ...]]:
        err = self.lib.libxdp_get_error(prog)
        assert err == 0, f"libxdp: {os.strerror(-err)}"
        try:
            prio = self.lib.xdp_program__run_prio(prog)
            on = tuple(
                a
                for i, a in enumerate(ACTIONS)
                if self.lib.xdp_program__chain_call_enabled(prog, i)
            )
            return prio, on
        finally:
            self.lib.xdp_program__close(prog)

    def from_file(self, path: Path) -> tuple[int, tuple[str, ...]]:
        """(run priority, chain-call actions) libxdp reads from an object file."""
        return self._read(self.lib.xdp_program__open_file(str(path).encode(), None, None))

    def from_id(self, prog_id: int) -> tuple[int, tuple[str, ...]]:
        """The same for a loaded program: from the BTF the kernel holds."""
        return self._read(self.lib.xdp_program__from_id(prog_id))


def _obj(tmp_path: Path, src: str, name: str = "ours") -> Path:
    out = tmp_path / f"{name}.o"
    out.write_bytes(compile_source(src, f"{name}.bpfd").obj)
    return out


def test_libxdp_reads_our_run_config_as_clangs(tmp_path: Path) -> None:
    xdp = LibXdp()
    ours = _obj(tmp_path, SRC)
    theirs = build_text(C_TWIN, tmp_path, "twin")
    assert xdp.from_file(theirs) == (10, ("XDP_DROP", "XDP_PASS"))
    assert xdp.from_file(ours) == xdp.from_file(theirs)
    spec = read_object(ours)
    assert spec.run_config("xdp_filter") == RunConfig(10, ("XDP_DROP", "XDP_PASS"))
    assert read_run_config(read_object(theirs).btf, "xdp_filter") == spec.run_config("xdp_filter")


@pytest.mark.parametrize(
    ("opts", "want"),
    [
        ("priority: 5", (5, ("XDP_PASS",))),  # libxdp's default chain-call action
        ("chain_call: XDP_DROP", (50, ("XDP_DROP",))),  # XDP_PASS off: every member written
        ("chain_call: none", (50, ())),
        ("frags, priority: 0, chain_call: XDP_TX | XDP_REDIRECT", (0, ("XDP_TX", "XDP_REDIRECT"))),
    ],
)
def test_each_option_reaches_libxdp(tmp_path: Path, opts: str, want: tuple) -> None:
    src = f'license "GPL"\nxdp({opts}) fn xdp_filter(ctx) {{\n    return XDP_PASS\n}}\n'
    assert LibXdp().from_file(_obj(tmp_path, src)) == want


def test_no_run_config_is_libxdps_default(tmp_path: Path) -> None:
    src = 'license "GPL"\nxdp fn xdp_filter(ctx) {\n    return XDP_PASS\n}\n'
    path = _obj(tmp_path, src)
    assert read_object(path).run_config("xdp_filter") is None
    assert LibXdp().from_file(path) == (50, ("XDP_PASS",))


@pytest.mark.parametrize(
    ("variant", "col", "words"),
    [
        ("chain_call: 3", 17, "action names joined by `|`"),  # 3 is XDP_TX, or DROP|PASS?
        ("chain_call: XDP_PASS + XDP_DROP", 17, "action names joined by `|`"),
        ("priorty: 10", 5, "unknown program option `priorty`"),
        ("priority: 1073741824", 15, "priority must be from 0 to 1073741823"),
        ("priority: -1", 15, "priority must be from 0 to"),
        ("cpumap, priority: 10", 13, "not run by a dispatcher"),
        ("frags, cpumap", 12, "takes one variant"),
        ("priority: 1, priority: 2", 18, "given twice"),
    ],
)
def test_bad_run_config_is_located(variant: str, col: int, words: str) -> None:
    src = f'license "GPL"\nxdp({variant}) fn f(ctx) {{\n    return XDP_PASS\n}}\n'
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "chain.bpfd")
    d = ei.value.diagnostics[0]
    assert words in d.message, d.message
    assert (d.span.file, d.span.line, d.span.col) == ("chain.bpfd", 2, col), d
    assert d.hints


def test_run_config_needs_btf() -> None:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(SRC, "chain.bpfd", debug=False)
    d = ei.value.diagnostics[0]
    assert d.code == "run-config" and (d.span.line, d.span.col) == (3, 5)


def test_bpfman_link_takes_priority_and_proceed_on(tmp_path: Path) -> None:
    src = tmp_path / "filter.bpfd"
    src.write_text(SRC)
    out = tmp_path / "cr.yaml"
    argv = ["image", "manifest", str(src), "--image", "q/x:1", "--interface", "eth0"]
    assert main([*argv, "-o", str(out)]) == 0
    (link,) = yaml.safe_load(out.read_text())["spec"]["programs"][0]["xdp"]["links"]
    assert link["priority"] == 10
    assert link["proceedOn"] == ["Drop", "Pass", "DispatcherReturn"]
    assert main([*argv, "--priority", "7", "-o", str(out)]) == 0  # the option wins
    (link,) = yaml.safe_load(out.read_text())["spec"]["programs"][0]["xdp"]["links"]
    assert link["priority"] == 7


def test_bpfman_refuses_a_priority_over_1000(tmp_path: Path, capsys) -> None:
    src = tmp_path / "filter.bpfd"
    src.write_text(SRC.replace("const PRIO: u32 = 10", "const PRIO: u32 = 1001"))
    rc = main(["image", "manifest", str(src), "--image", "q/x:1", "--interface", "eth0"])
    assert rc == 1
    err = capsys.readouterr().err
    assert "declares priority 1001: bpfman takes 0..1000" in err and "filter.bpfd:" in err


@pytest.mark.kernel
def test_the_kernel_keeps_the_run_config(tmp_path: Path) -> None:
    """Loaded by bpfdsl, libxdp reads the priority back from the kernel's copy of the BTF
    (what ``xdp-loader status`` shows for a running program), as for clang's object."""
    from bpfdsl.kernel.syscall import prog_info
    from bpfdsl.runtime.loader import load_collection

    xdp = LibXdp()
    got = []
    for path in (_obj(tmp_path, SRC), build_text(C_TWIN, tmp_path, "twin")):
        with load_collection(read_object(path), pinning=False) as coll:
            got.append(xdp.from_id(prog_info(coll.programs["xdp_filter"].fd).id))
    assert got[0] == got[1]
    assert got[0][0] == 10
