"""bpfdsl.kernel.libc: the one handle on the C library; its system calls report errno and
what failed; no other module opens libc."""

from __future__ import annotations

import ast
import errno
import os
import socket

import pytest
from support.paths import ROOT

from bpfdsl.kernel import libc
from bpfdsl.runtime.attach import BPF_FS_MAGIC, BPFFS, is_bpffs

# the one other ctypes.CDLL: llvmlite's own shared library, not libc
OTHER_LIBRARIES = {"bpfdsl/backend/llvm_c.py"}


def test_only_kernel_libc_opens_the_c_library():
    opened = []
    for path in sorted([*ROOT.glob("bpfdsl/**/*.py"), *ROOT.glob("benchmarks/*.py")]):
        rel = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Call):
                f = node.func
                if (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")) == "CDLL":
                    opened.append(rel)
    assert sorted(set(opened) - OTHER_LIBRARIES) == ["bpfdsl/kernel/libc.py"]


def test_only_kernel_modules_reach_the_libc_handle():
    users = []
    for path in sorted(ROOT.glob("bpfdsl/**/*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("bpfdsl/kernel/"):
            continue
        text = path.read_text()
        if "LIBC" in text or "libc.syscall" in text:
            users.append(rel)
    assert users == []


def test_failures_name_the_call_and_carry_errno(tmp_path):
    with pytest.raises(OSError) as e:
        libc.setns(-1)
    assert e.value.errno == errno.EBADF and str(e.value).endswith("setns: Bad file descriptor")
    with pytest.raises(OSError) as e:
        libc.mount(b"bpf", str(tmp_path / "missing"), b"bpf", what="mount bpffs")
    assert e.value.errno == errno.ENOENT and "mount bpffs: " in str(e.value)
    with socket.socket() as s, pytest.raises(OSError) as e:
        libc.bind(s.fileno(), b"\0" * 4)  # shorter than any sockaddr: EINVAL
    assert e.value.errno == errno.EINVAL and "bind: " in str(e.value)
    assert libc.statfs_type(str(tmp_path / "missing")) is None
    assert libc.umount2(str(tmp_path / "missing")) is False


@pytest.mark.kernel
def test_statfs_tells_bpffs_from_other_filesystems(tmp_path):
    if not os.path.ismount(BPFFS):
        pytest.skip(f"no bpffs mounted at {BPFFS}")
    assert libc.statfs_type(BPFFS) == BPF_FS_MAGIC and is_bpffs(BPFFS)
    assert libc.statfs_type(str(tmp_path)) not in (None, BPF_FS_MAGIC)
    assert not is_bpffs(str(tmp_path))
