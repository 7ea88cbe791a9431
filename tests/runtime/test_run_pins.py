"""``bpfdsl run`` on an object with maps pinned by name (libbpf ``pinning``
LIBBPF_PIN_BY_NAME in a clang object's BTF map definition) leaves nothing on bpffs and
does not touch a live map pinned under that name: the test run uses private maps."""

from __future__ import annotations

import contextlib
import io
import os
import struct
import uuid

import pytest
from support.objbuild import build_variant

from bpfdsl.abi.map_types import MapType
from bpfdsl.cli import main
from bpfdsl.kernel import syscall as S

pytestmark = pytest.mark.kernel
FRAME = bytes(range(64)).hex()


@pytest.fixture
def pinned_obj():
    """pinned_map.c with a unique map name; yields (object, pin path libbpf would use)."""
    name = f"rp_{uuid.uuid4().hex[:10]}"
    obj = build_variant("pinned_map", name, {"shared_count": name})
    path = f"/sys/fs/bpf/{name}"
    try:
        yield obj, path
    finally:
        if os.path.exists(path):
            os.unlink(path)


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def test_run_pins_nothing(pinned_obj) -> None:
    obj, path = pinned_obj
    assert not os.path.exists(path)
    before = set(os.listdir("/sys/fs/bpf"))
    rc, out, err = _run("run", str(obj), "--engine", "kernel", "--hex", FRAME, "--repeat", "3")
    assert rc == 0, err
    assert "XDP_PASS" in out
    assert "pinned by name" in err and "private copy" in err and path in err
    assert not os.path.exists(path)
    assert os.path.basename(path) not in set(os.listdir("/sys/fs/bpf")) - before


def test_run_leaves_a_live_pin_alone(pinned_obj) -> None:
    """A map already pinned under the name (a running program's counter) keeps its value
    and its pin: the run counted in its own copy."""
    obj, path = pinned_obj
    with S.map_create(MapType.HASH, 4, 8, 8) as live:
        S.map_update(live, bytes(4), struct.pack("<Q", 41))
        S.obj_pin(live, path)
    for _ in range(2):
        rc, out, err = _run("run", str(obj), "--engine", "kernel", "--hex", FRAME)
        assert rc == 0, err
    with S.obj_get(path) as fd:
        assert struct.unpack("<Q", S.map_lookup(fd, bytes(4), 8))[0] == 41
