"""`bpfdsl attach xdp FILE.o` on an object that holds, next to its XDP program, a program of
a section bpfdsl does not load (here a kprobe): the one XDP program is the one picked, and
the load is refused with the loader's diagnostic naming that section, not a Python error;
nothing is attached or left pinned."""

from __future__ import annotations

import os
import shutil

import pytest
from support.netns import bpffs_dir, veth_net
from support.objbuild import build

from bpfdsl.obj.collection import read_object
from bpfdsl.runtime import attach


@pytest.fixture
def net():
    with veth_net("us") as n:
        yield n


@pytest.fixture
def pin_dir():
    d = bpffs_dir("bpfdsl_unksec_")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_fixture_has_a_program_of_unknown_kind() -> None:
    spec = read_object(str(build("xdp_and_kprobe")))
    kinds = {name: p.kind for name, p in spec.programs.items()}
    assert kinds["probe"] is None and kinds["pass_all"] is not None
    assert spec.programs["probe"].program_type is None  # what attach's choice reads


@pytest.mark.kernel
def test_attach_refuses_the_unknown_section_with_a_diagnostic(net, pin_dir) -> None:
    obj = str(build("xdp_and_kprobe"))
    r = net.bpfdsl("attach", "xdp", obj, "--dev", net.xdp_dev, "--pin-dir", pin_dir)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr and "AttributeError" not in r.stderr
    assert "error[unknown-section]" in r.stderr
    assert "'probe'" in r.stderr and "kprobe/do_nothing" in r.stderr
    with net.in_xdp_ns():
        assert attach.xdp_attachment(net.xdp_dev) is None
    assert not os.path.exists(pin_dir)
