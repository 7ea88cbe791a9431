"""The bpf(2) system call: the ONLY module of bpfdsl that calls it (kernel side).

Takes typed Python values, builds the ``union bpf_attr`` member of each command as a
ctypes structure (layouts from include/uapi/linux/bpf.h as dumped from this machine's
/sys/kernel/btf/vmlinux) and returns kernel objects as :class:`Fd`.  Every failure is a
:class:`BpfError` (``BpfPermissionError``, a PermissionError, for EPERM/EACCES).
Pointers in attrs are ``__u64`` user addresses of buffers kept alive by the caller frame.

One command also has a batch form: :meth:`TestRunner.run_spans` issues BPF_PROG_TEST_RUN
once per frame of a batch, through ``bpfdsl/kernel/_testrun.c`` when it is built (a C
loop over the same attr, given the system call number, the command and the attr's field
offsets from here: still this module's command, in a loop in C instead of in Python), else
through the same loop in Python (:data:`TESTRUN_LOOP` says which).
"""

from __future__ import annotations

import ctypes as C
import errno as E
import os
import struct
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from bpfdsl.abi.bpf_attr import (
    BtfInfo,
    BtfLoadAttr,
    GetIdAttr,
    InfoAttr,
    LinkCreateAttr,
    LinkDetachAttr,
    LinkInfo,
    LinkUpdateAttr,
    MapBatchAttr,
    MapCreateAttr,
    MapElemAttr,
    MapInfo,
    ObjAttr,
    ProgAttachAttr,
    ProgInfo,
    ProgLoadAttr,
    ProgQueryAttr,
    RawTracepointAttr,
    TestRunAttr,
)
from bpfdsl.abi.btf.core import Btf, BtfFormatError, parse_btf
from bpfdsl.abi.commands import BpfCmd
from bpfdsl.abi.flags import BPF_ANY, BPF_F_TEST_XDP_LIVE_FRAMES, BPF_OBJ_NAME_LEN
from bpfdsl.abi.map_types import MapType, empty_slot_delete_errno
from bpfdsl.kernel import libc

try:  # the batch test run in C, built with BPFDSL_COMPILE=1 (setup.py)
    from bpfdsl.kernel import _testrun
except ImportError:  # not built: the same loop in Python
    _testrun = None  # type: ignore[assignment]

_PURE_ENV = "BPFDSL_PURE_PYTHON"  # as for the compiled checker: the Python loops only
if os.environ.get(_PURE_ENV, "") not in ("", "0"):
    _testrun = None  # type: ignore[assignment]
    TESTRUN_LOOP = f"Python ({_PURE_ENV}={os.environ[_PURE_ENV]})"
elif _testrun is None:
    TESTRUN_LOOP = "Python (not compiled (install with BPFDSL_COMPILE=1))"
else:
    TESTRUN_LOOP = "C (bpfdsl/kernel/_testrun.c)"
"""Which loop :meth:`TestRunner.run_spans` runs, for ``bpfdsl --version``."""

Buffer = Any  # an object with the buffer protocol (collections.abc.Buffer from Python 3.12)

_NR_BPF = {
    "x86_64": 321,
    "aarch64": 280,
    "armv7l": 386,
    "riscv64": 280,
    "ppc64le": 361,
    "s390x": 351,
}

_MACHINE = os.uname().machine  # what platform.machine() returns, without importing platform
LOG_MAX = (1 << 30) - 1  # kernel: log_size must be < UINT_MAX >> 2 (bpf_vlog_init)


class BpfError(OSError):
    """A failed bpf(2) command: ``.cmd`` (BpfCmd), ``.errno``, message; ``.log`` is the
    verifier/BTF log when the command produced one ('' otherwise); ``.done``: for the
    BPF_MAP_*_BATCH commands, how many elements were processed before the failure."""

    errno: int  # always set (OSError's may be None)

    def __init__(self, cmd: BpfCmd, errno: int, message: str = "", log: str = ""):
        msg = message or f"bpf({cmd.name}): {os.strerror(errno)}"
        super().__init__(errno, msg)
        self.cmd, self.log, self.message = cmd, log, msg
        self.done = 0

    def __str__(self) -> str:
        return self.message


class BpfPermissionError(BpfError, PermissionError):
    """EPERM/EACCES from bpf(2): the process lacks privileges."""


NEEDS_ROOT = "needs root (CAP_BPF + CAP_NET_ADMIN; CAP_SYS_ADMIN on older kernels)"


class NoPermission(PermissionError):
    """A bpffs path or BPF object this process may not touch; ``str()`` is one line
    (``WHAT: permission denied: needs root (...)``).  The CLI exits with code 3."""

    def __init__(self, what: str):
        self.message = f"{what}: permission denied: {NEEDS_ROOT}"
        super().__init__(E.EACCES, self.message)

    def __str__(self) -> str:
        return self.message


def _error(cmd: BpfCmd, err: int, log: str = "") -> BpfError:
    # EACCES from PROG_LOAD is the verifier's rejection, not a privilege problem.
    if err == E.EPERM or (err == E.EACCES and cmd != BpfCmd.PROG_LOAD):
        return BpfPermissionError(
            cmd,
            err,
            f"bpf({cmd.name}): {os.strerror(err)}: needs root "
            "(CAP_BPF + CAP_NET_ADMIN; CAP_SYS_ADMIN on older kernels)",
            log,
        )
    return BpfError(cmd, err, "", log)


class Backend(Protocol):
    """What answers bpf(2) instead of the kernel (tests: bpfdsl.kernel.fake.FakeKernel)."""

    def bpf(self, cmd: BpfCmd, attr: C.Structure) -> int:
        """The command's result, or OSError with the kernel's errno."""
        ...

    def fd_kind(self, fd: int) -> str:
        """:func:`fd_kind` of a descriptor it made."""
        ...

    def possible_cpus(self) -> int:
        """:func:`possible_cpus` of the machine it stands for."""
        ...


_backend: Backend | None = None  # None: the real bpf(2)


def set_backend(backend: Backend | None) -> Backend | None:
    """Route every :func:`sys_bpf` command (and :func:`fd_kind`) to ``backend``, or back
    to the real bpf(2) for None; returns the previous one.  For tests:
    :func:`bpfdsl.kernel.fake.installed` puts an in-memory kernel here."""
    global _backend
    previous, _backend = _backend, backend
    return previous


def fd_kind(fd: int) -> str:
    """``prog``, ``map``, ``link``, ``btf`` or ``""``: the kind of BPF object behind ``fd``
    (from its anon inode name, ``anon_inode:bpf-link`` etc.: /proc/self/fd)."""
    if _backend is not None:
        return _backend.fd_kind(fd)
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return ""
    if target.startswith("anon_inode:bpf-"):
        return target.removeprefix("anon_inode:bpf-").split("-")[0]
    return "btf" if target == "anon_inode:btf" else ""


def sys_bpf(cmd: BpfCmd, attr: C.Structure) -> int:
    """Call bpf(cmd, &attr, sizeof attr); returns the non-negative result, raises BpfError."""
    if _backend is not None:
        try:
            return _backend.bpf(cmd, attr)
        except OSError as e:
            raise _error(cmd, e.errno or E.EINVAL) from None
    nr = _NR_BPF.get(_MACHINE)
    if nr is None:
        raise BpfError(cmd, E.ENOSYS, f"bpf(): unsupported architecture {_MACHINE}")
    for _ in range(8):  # libbpf retries PROG_LOAD on EAGAIN; everyone on EINTR
        ret = libc.syscall(nr, C.c_int(int(cmd)), C.byref(attr), C.c_uint(C.sizeof(attr)))
        if ret >= 0:
            return ret
        err = libc.get_errno()
        if not (err == E.EINTR or (err == E.EAGAIN and cmd == BpfCmd.PROG_LOAD)):
            break
    raise _error(cmd, err)


class Fd:
    """An owned file descriptor of a kernel object; closes on ``close()``/context exit.

    ``int(fd)`` gives the number.
    """

    __slots__ = ("_fd",)

    def __init__(self, fd: int):
        self._fd = fd

    def __int__(self) -> int:
        if self._fd < 0:
            raise ValueError("use of a closed bpf fd")
        return self._fd

    __index__ = __int__

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def __enter__(self) -> Fd:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Fd({self._fd})"


def _addr(buf: C.Array[C.c_char] | None) -> int:
    """The user address of ``buf`` for an attr's ``__u64`` pointer field (0: NULL)."""
    return C.addressof(buf) if buf is not None else 0


def _buf(data: bytes) -> C.Array[C.c_char]:
    """A ctypes copy of ``data`` (one zero byte when ``data`` is empty)."""
    return C.create_string_buffer(bytes(data), max(len(data), 1))


# ---- maps ----
def map_create(
    map_type: int,
    key_size: int,
    value_size: int,
    max_entries: int,
    *,
    map_flags: int = 0,
    name: str = "",
    inner_map_fd: int = 0,
    btf_fd: int = 0,
    btf_key_type_id: int = 0,
    btf_value_type_id: int = 0,
    map_extra: int = 0,
    numa_node: int = 0,
    ifindex: int = 0,
) -> Fd:
    """BPF_MAP_CREATE; sizes in bytes; ``name`` is cut to 15 bytes (kernel BPF_OBJ_NAME_LEN)."""
    a = MapCreateAttr(
        map_type=int(map_type),
        key_size=key_size,
        value_size=value_size,
        max_entries=max_entries,
        map_flags=map_flags,
        inner_map_fd=inner_map_fd,
        numa_node=numa_node,
        map_name=name.encode()[: BPF_OBJ_NAME_LEN - 1],
        map_ifindex=ifindex,
        btf_fd=btf_fd,
        btf_key_type_id=btf_key_type_id,
        btf_value_type_id=btf_value_type_id,
        map_extra=map_extra,
    )
    return Fd(sys_bpf(BpfCmd.MAP_CREATE, a))


def map_lookup(fd: int | Fd, key: bytes, value_size: int, flags: int = 0) -> bytes | None:
    """BPF_MAP_LOOKUP_ELEM -> value bytes, None when the key is absent (ENOENT).

    For per-CPU maps ``value_size`` is ``percpu_value_size(value_size)``.
    """
    k, v = _buf(key), C.create_string_buffer(max(value_size, 1))
    try:
        sys_bpf(BpfCmd.MAP_LOOKUP_ELEM, MapElemAttr(int(fd), _addr(k), _addr(v), flags))
    except BpfError as e:
        if e.errno == E.ENOENT:
            return None
        raise
    return v.raw[:value_size]


def map_update(fd: int | Fd, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
    """BPF_MAP_UPDATE_ELEM (flags BPF_ANY / BPF_NOEXIST / BPF_EXIST [| BPF_F_LOCK])."""
    k, v = _buf(key), _buf(value)
    sys_bpf(BpfCmd.MAP_UPDATE_ELEM, MapElemAttr(int(fd), _addr(k), _addr(v), flags))


def map_delete(fd: int | Fd, key: bytes) -> bool:
    """BPF_MAP_DELETE_ELEM; False when the key was absent (ENOENT)."""
    k = _buf(key)
    try:
        sys_bpf(BpfCmd.MAP_DELETE_ELEM, MapElemAttr(int(fd), _addr(k), 0, 0))
    except BpfError as e:
        if e.errno == E.ENOENT:
            return False
        raise
    return True


def map_delete_slot(fd: int | Fd, key: bytes, map_type: int, value_size: int) -> bool:
    """BPF_MAP_DELETE_ELEM of ``key`` (bytes as the map stores them); False when the map
    held nothing there.  For the kinds whose delete of an empty slot does not say ENOENT
    (:data:`bpfdsl.abi.map_types.EMPTY_SLOT_DELETE_ERRNO`: devmap, cpumap, xskmap succeed,
    sockmap says EINVAL) the slot is looked up first; where user space cannot read the
    values (xskmap: EOPNOTSUPP; a sockmap with 4-byte values: ENOSPC) the kernel's answer
    to the delete decides.  Raises BpfError."""
    quiet = empty_slot_delete_errno(map_type)
    if quiet is None:
        return map_delete(fd, key)
    try:
        if map_lookup(fd, key, value_size) is None:
            return False
    except BpfPermissionError:
        raise
    except BpfError:
        pass  # not readable from user space: the delete below says
    try:
        return map_delete(fd, key)
    except BpfError as e:
        if quiet and e.errno == quiet:
            return False
        raise


def map_get_next_key(fd: int | Fd, key: bytes | None, key_size: int) -> bytes | None:
    """BPF_MAP_GET_NEXT_KEY: the key after ``key`` (first key when None); None at the end."""
    k = _buf(key) if key is not None else None
    n = C.create_string_buffer(max(key_size, 1))
    try:
        sys_bpf(BpfCmd.MAP_GET_NEXT_KEY, MapElemAttr(int(fd), _addr(k), _addr(n), 0))
    except BpfError as e:
        if e.errno == E.ENOENT:
            return None
        raise
    return n.raw[:key_size]


def map_lookup_batch(
    fd: int | Fd, token: bytes | None, count: int, key_size: int, value_size: int
) -> tuple[bytes, bytes, int, bytes | None]:
    """BPF_MAP_LOOKUP_BATCH: up to ``count`` entries after the position ``token`` (None:
    from the start), as (keys, values, n, next token): ``n`` keys of ``key_size`` bytes and
    ``n`` values of ``value_size`` bytes (per-CPU maps: ``percpu_value_size``) packed, and
    the token to continue with, None once the map is exhausted (the kernel's ENOENT).
    The token is opaque (a bucket or index; 8 bytes suffice for every map kind here).
    Raises BpfError: EINVAL/ENOTSUPP (524) for map kinds without batch operations (lpm_trie,
    fd-holding maps...), ENOSPC when one hash bucket holds more than ``count`` entries."""
    tok_size = max(key_size, 8)
    tin = _buf(token.ljust(tok_size, b"\0")) if token is not None else None
    tout = C.create_string_buffer(tok_size)
    keys = C.create_string_buffer(max(key_size * count, 1))
    vals = C.create_string_buffer(max(value_size * count, 1))
    a = MapBatchAttr(_addr(tin), _addr(tout), _addr(keys), _addr(vals), count, int(fd), 0, 0)
    done = False
    try:
        sys_bpf(BpfCmd.MAP_LOOKUP_BATCH, a)
    except BpfError as e:
        if e.errno != E.ENOENT:
            raise
        done = True
    n = int(a.count)
    return keys.raw[: n * key_size], vals.raw[: n * value_size], n, None if done else tout.raw


def map_update_batch(
    fd: int | Fd, keys: bytes, values: bytes, count: int, elem_flags: int = BPF_ANY
) -> int:
    """BPF_MAP_UPDATE_BATCH of ``count`` packed keys and values; returns how many were
    written.  ``elem_flags``: BPF_ANY, or BPF_F_LOCK for a value with a spin lock: the
    kernel refuses BPF_NOEXIST/BPF_EXIST here with EINVAL (kernel/bpf/syscall.c
    ``generic_map_update_batch``), so those go element by element (:func:`map_update`).
    Raises BpfError (its ``done`` attribute: how many were written before the failing one)."""
    k, v = _buf(keys), _buf(values)
    a = MapBatchAttr(0, 0, _addr(k), _addr(v), count, int(fd), elem_flags, 0)
    try:
        sys_bpf(BpfCmd.MAP_UPDATE_BATCH, a)
    except BpfError as e:
        e.done = int(a.count)
        raise
    return int(a.count)


def map_delete_batch(fd: int | Fd, keys: bytes, count: int) -> int:
    """BPF_MAP_DELETE_BATCH of ``count`` packed keys; returns how many were deleted.
    Raises BpfError (ENOENT: a key was absent; ``done``: how many went before it)."""
    k = _buf(keys)
    a = MapBatchAttr(0, 0, _addr(k), 0, count, int(fd), 0, 0)
    try:
        sys_bpf(BpfCmd.MAP_DELETE_BATCH, a)
    except BpfError as e:
        e.done = int(a.count)
        raise
    return int(a.count)


def map_freeze(fd: int | Fd) -> None:
    """BPF_MAP_FREEZE: no more writes from user space (used for .rodata)."""
    sys_bpf(BpfCmd.MAP_FREEZE, MapElemAttr(map_fd=int(fd)))


def possible_cpus() -> int:
    """Number of possible CPUs (the size of a per-CPU value, the CPUs a cpumap can hold):
    the backend's (:func:`set_backend`) when one is set, else :func:`host_possible_cpus`."""
    if _backend is not None:
        return _backend.possible_cpus()
    return host_possible_cpus()


def host_possible_cpus() -> int:
    """Number of possible CPUs from /sys/devices/system/cpu/possible ("0-3,5"), as libbpf."""
    try:
        text = open("/sys/devices/system/cpu/possible").read().strip()
    except OSError:
        return os.cpu_count() or 1
    n = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        n = max(n, int(hi or lo) + 1)
    return n


def percpu_value_size(value_size: int) -> int:
    """User-space buffer size in bytes of a value of a per-CPU map (``map_types.is_percpu``):
    round_up(size, 8) * possible CPUs (kernel/bpf/syscall.c ``bpf_map_value_size``)."""
    return ((value_size + 7) & ~7) * possible_cpus()


# ---- programs ----
def _log_call(
    cmd: BpfCmd,
    attr: C.Structure,
    size_field: str,
    buf_field: str,
    level_field: str,
    true_field: str,
    log_level: int,
    log_size: int,
) -> tuple[int, str]:
    """Run a command with a verifier log; the buffer grows on ENOSPC (never truncated).

    Returns (result, log text).  On failure raises BpfError with ``.log`` set.
    """
    size = log_size if log_level else 0
    while True:
        buf = C.create_string_buffer(size) if size else None
        setattr(attr, level_field, log_level if size else 0)
        setattr(attr, size_field, size)
        setattr(attr, buf_field, _addr(buf))
        try:
            return sys_bpf(cmd, attr), _text(buf)
        except BpfError as e:
            log = _text(buf)
            if e.errno == E.ENOSPC and size and size < LOG_MAX:
                size = min(LOG_MAX, max(size * 4, int(getattr(attr, true_field)) + 1))
                continue
            raise _error(cmd, e.errno, log) from None


def _text(buf: C.Array[C.c_char] | None) -> str:
    return buf.value.decode(errors="replace") if buf is not None else ""


def prog_load(
    prog_type: int,
    insns: bytes,
    license: str,
    *,
    name: str = "",
    expected_attach_type: int = 0,
    prog_flags: int = 0,
    btf_fd: int = 0,
    func_info: bytes = b"",
    func_info_rec_size: int = 8,
    line_info: bytes = b"",
    line_info_rec_size: int = 16,
    log_level: int = 0,
    log_size: int = 1 << 16,
    retry_with_log: bool = True,
    ifindex: int = 0,
    attach_prog_fd: int = 0,
    attach_btf_id: int = 0,
) -> tuple[Fd, str]:
    """BPF_PROG_LOAD of ``insns`` (encoded, 8 bytes each) -> (Fd, verifier log).

    ``func_info``/``line_info``: packed ``bpf_func_info``/``bpf_line_info`` records with
    insn_off in instructions.  With ``log_level`` 0 and ``retry_with_log`` a rejection
    is loaded again with log level 1 so the raised BpfError carries ``.log`` (as cilium).
    The log buffer grows on ENOSPC up to 1 GiB (kernel limit).
    """
    ib, lic = _buf(insns), C.create_string_buffer(license.encode())
    fi, li = _buf(func_info), _buf(line_info)
    a = ProgLoadAttr(
        prog_type=int(prog_type),
        insn_cnt=len(insns) // 8,
        insns=_addr(ib),
        license=_addr(lic),
        prog_flags=prog_flags,
        prog_name=name.encode()[: BPF_OBJ_NAME_LEN - 1],
        prog_ifindex=ifindex,
        expected_attach_type=int(expected_attach_type),
        prog_btf_fd=btf_fd,
        attach_btf_id=attach_btf_id,
        attach_prog_fd=attach_prog_fd,
    )
    if btf_fd and func_info:
        a.func_info_rec_size, a.func_info = func_info_rec_size, _addr(fi)
        a.func_info_cnt = len(func_info) // func_info_rec_size
    if btf_fd and line_info:
        a.line_info_rec_size, a.line_info = line_info_rec_size, _addr(li)
        a.line_info_cnt = len(line_info) // line_info_rec_size
    args = ("log_size", "log_buf", "log_level", "log_true_size")
    try:
        fd, log = _log_call(BpfCmd.PROG_LOAD, a, *args, log_level, log_size)
    except BpfError as e:
        if log_level or not retry_with_log or isinstance(e, PermissionError):
            raise
        _log_call(BpfCmd.PROG_LOAD, a, *args, 1, log_size)  # raises again, now with a log
        raise  # pragma: no cover - the kernel accepted on the second try
    return Fd(fd), log


def btf_load(data: bytes, *, log_level: int = 0, log_size: int = 1 << 16) -> tuple[Fd, str]:
    """BPF_BTF_LOAD of a raw .BTF blob -> (Fd, log); rejections retry with a log."""
    b = _buf(data)
    a = BtfLoadAttr(btf=_addr(b), btf_size=len(data))
    args = ("btf_log_size", "btf_log_buf", "btf_log_level", "btf_log_true_size")
    try:
        fd, log = _log_call(BpfCmd.BTF_LOAD, a, *args, log_level, log_size)
    except BpfError as e:
        if log_level or isinstance(e, PermissionError):
            raise
        _log_call(BpfCmd.BTF_LOAD, a, *args, 1, log_size)
        raise  # pragma: no cover
    return Fd(fd), log


@dataclass(frozen=True, slots=True)
class TestRunResult:
    """Result of BPF_PROG_TEST_RUN: ``retval`` (program return value), ``data_out`` (the
    packet after the program, bytes), ``duration_ns`` (mean ns per run, kernel-measured),
    ``ctx_out`` (context after the run, bytes, empty when no ctx was given)."""

    retval: int
    data_out: bytes
    duration_ns: int
    ctx_out: bytes = b""


def prog_test_run(
    fd: int | Fd,
    data: bytes,
    repeat: int = 1,
    ctx: bytes | None = None,
    flags: int = 0,
    *,
    cpu: int = 0,
    batch_size: int = 0,
    data_out_size: int | None = None,
) -> TestRunResult:
    """BPF_PROG_TEST_RUN with ``data`` as the packet (bytes, starting at the L2 header).

    ``data_out`` has room for ``len(data) + 4096`` bytes (grown packets) unless
    ``data_out_size`` says otherwise; with BPF_F_TEST_XDP_LIVE_FRAMES no output is read.
    """
    live = bool(flags & BPF_F_TEST_XDP_LIVE_FRAMES)
    din = _buf(data)
    osz = 0 if live else (data_out_size if data_out_size is not None else len(data) + 4096)
    dout = C.create_string_buffer(osz) if osz else None
    cin = _buf(ctx) if ctx is not None else None
    cout = C.create_string_buffer(len(ctx)) if ctx and not live else None
    a = TestRunAttr(
        prog_fd=int(fd),
        data_size_in=len(data),
        data_size_out=osz,
        data_in=_addr(din),
        data_out=_addr(dout),
        repeat=repeat,
        ctx_size_in=len(ctx) if ctx else 0,
        ctx_size_out=len(cout) if cout else 0,
        ctx_in=_addr(cin) if ctx else 0,
        ctx_out=_addr(cout),
        flags=flags,
        cpu=cpu,
        batch_size=batch_size,
    )
    sys_bpf(BpfCmd.PROG_TEST_RUN, a)
    out = dout.raw[: a.data_size_out] if dout is not None else b""
    cbytes = cout.raw[: a.ctx_size_out] if cout is not None else b""
    return TestRunResult(a.retval, out, a.duration, cbytes)


class TestRunner:
    """BPF_PROG_TEST_RUN of one program on many packets, without the per-call setup of
    :func:`prog_test_run`: one ``bpf_attr`` and one input and output buffer (grown when a
    packet needs more) reused for every call, the ``bpf(2)`` entry resolved once.  For the
    loops over a capture (``bpfdsl run --pcap``) where the Python work around the system
    call, not the call, was the cost.

    :meth:`run` takes the packet (bytes, from the L2 header) and returns ``(retval,
    out_len, duration_ns)`` (mean ns per run over ``repeat``); :meth:`data_out` the
    ``out_len`` bytes the program left.  ``ctx``: a fixed ``struct xdp_md`` for every run
    (None: none).  Raises BpfError as :func:`prog_test_run`.
    """

    __slots__ = ("_attr", "_ref", "_din", "_dout", "_cap", "_ctx", "_nr", "_cmd", "_call")

    def __init__(self, fd: int | Fd, repeat: int = 1, ctx: bytes | None = None):
        if _backend is not None:  # its loops call bpf(2) directly: no backend in between
            raise BpfError(
                BpfCmd.PROG_TEST_RUN,
                E.EOPNOTSUPP,
                "bpf(PROG_TEST_RUN): a TestRunner needs the real kernel, not the backend "
                "set with set_backend (the fake kernel runs no programs: use the interpreter)",
            )
        nr = _NR_BPF.get(_MACHINE)
        if nr is None:
            raise BpfError(
                BpfCmd.PROG_TEST_RUN, E.ENOSYS, f"bpf(): unsupported architecture {_MACHINE}"
            )
        self._attr = TestRunAttr(prog_fd=int(fd), repeat=max(1, repeat))
        self._ref = C.byref(self._attr)
        self._cap = 0
        self._din = self._dout = C.create_string_buffer(1)
        self._grow(2048)
        self._ctx = _buf(ctx) if ctx else None
        if ctx:
            self._attr.ctx_size_in = len(ctx)
            self._attr.ctx_in = _addr(self._ctx)
        self._nr = C.c_long(nr)
        self._cmd = C.c_int(int(BpfCmd.PROG_TEST_RUN))
        size = C.c_uint(C.sizeof(self._attr))
        call = libc.LIBC.syscall
        ref, nrc, cmd = self._ref, self._nr, self._cmd
        self._call = lambda: call(nrc, cmd, ref, size)

    def _grow(self, n: int) -> None:
        self._din = C.create_string_buffer(n)
        self._dout = C.create_string_buffer(n + 4096)  # room for grown packets
        self._cap = n
        self._attr.data_in = C.addressof(self._din)
        self._attr.data_out = C.addressof(self._dout)

    def run(self, data: bytes) -> tuple[int, int, int]:
        n = len(data)
        if n > self._cap:
            self._grow(n)
        a = self._attr
        C.memmove(self._din, data, n)
        a.data_size_in = n
        a.data_size_out = n + 4096
        for _ in range(8):
            if self._call() >= 0:
                return a.retval, a.data_size_out, a.duration
            err = libc.get_errno()
            if err != E.EINTR:
                break
        raise _error(BpfCmd.PROG_TEST_RUN, err)

    def data_out(self, n: int) -> bytes:
        """The first ``n`` bytes of the last run's output packet."""
        return C.string_at(self._dout, n)

    def run_spans(
        self,
        data: Buffer,
        offsets: Buffer,
        lengths: Buffer,
        start: int = 0,
        end: int | None = None,
        *,
        min_len: int = 0,
        skips: tuple[tuple[Buffer, int, Buffer, int, int], ...] = (),
        retvals: Buffer | None = None,
    ) -> tuple[int, int, dict[int, int]]:
        """BPF_PROG_TEST_RUN of each frame ``i`` in ``[start, end)`` of a batch: the
        ``lengths[i]`` bytes at ``offsets[i]`` of ``data`` (``offsets``: buffer of uint64,
        ``lengths``: of uint32, e.g. ``array('Q')``/``array('I')``; ``data``: bytes or
        any buffer; the kernel reads each frame where it lies, no copy).  Frames shorter
        than ``min_len`` are not run (retval -1).  ``skips``: ``(src, src_off, dst,
        dst_off, least)`` of little-endian uint64 positions: after a run, when the one at
        ``src`` is ``least`` or more past the one at ``dst``, it is copied there (an
        event ring's consumer position set to its producer's, as ``skip_ready`` does, once
        ``least`` bytes of records wait: the records dropped).  ``retvals``: a writable
        buffer of int64, one per frame (``array('q')``), filled with each frame's retval
        (-1: not run).  The output packets are not kept.

        Returns ``(next, errno, counts)``: the index of the first frame not run (``end``
        when all were), the errno of its failed run (0 if none failed: the caller runs
        that frame with :meth:`run` to learn what the error means, and goes on from
        ``next + 1``), and ``{retval: frames}`` of the frames run (-1: too short).  Runs
        in C (``bpfdsl/kernel/_testrun.c``) when built, else in Python: same results."""
        end = len(memoryview(lengths).cast("B")) // 4 if end is None else end
        if end > start:
            longest = max(memoryview(lengths).cast("B").cast("I")[start:end])
            if longest > self._cap:
                self._grow(longest)
        cap = self._cap + 4096
        a = self._attr
        try:
            if _testrun is not None:
                layout = (_F_DATA_IN, _F_SIZE_IN, _F_SIZE_OUT, _F_RETVAL)
                return _testrun.run_spans(
                    self._nr.value, self._cmd.value, a, layout, data, offsets, lengths,
                    start, end, cap, min_len, skips, retvals,
                )  # fmt: skip
            return self._run_spans_py(data, offsets, lengths, start, end, cap, min_len, skips,
                                      retvals)  # fmt: skip
        finally:
            a.data_in = C.addressof(self._din)  # :meth:`run` copies into its own buffer

    def _run_spans_py(
        self,
        data: Buffer,
        offsets: Buffer,
        lengths: Buffer,
        start: int,
        end: int,
        cap: int,
        min_len: int,
        skips: tuple[tuple[Buffer, int, Buffer, int, int], ...],
        retvals: Buffer | None,
    ) -> tuple[int, int, dict[int, int]]:
        """:meth:`run_spans` without the C loop: the same calls, from Python."""
        a, call = self._attr, self._call
        base = _buffer_address(data)
        offs = memoryview(offsets).cast("B").cast("Q")
        lens = memoryview(lengths).cast("B").cast("I")
        rv = memoryview(retvals).cast("B").cast("q") if retvals is not None else None
        u64 = _U64
        moves = list(skips)
        counts: dict[int, int] = {}
        get = counts.get
        i = start
        for i in range(start, end):
            n = lens[i]
            if n < min_len:
                r = -1
            else:
                a.data_in = base + offs[i]
                a.data_size_in = n
                a.data_size_out = cap
                for _ in range(8):
                    if call() >= 0:
                        break
                    err = libc.get_errno()
                    if err != E.EINTR:
                        return i, err, counts
                else:
                    return i, E.EINTR, counts
                r = a.retval
                for s, so, d, do, least in moves:
                    pos = u64.unpack_from(s, so)[0]
                    if pos - u64.unpack_from(d, do)[0] >= least:
                        u64.pack_into(d, do, pos)
            if rv is not None:
                rv[i] = r
            counts[r] = get(r, 0) + 1
        else:
            i = end
        return i, 0, counts


_U64 = struct.Struct("<Q")
# the attr fields the batch loop sets and reads, by byte offset (uapi union bpf_attr)
_F_DATA_IN = TestRunAttr.data_in.offset
_F_SIZE_IN = TestRunAttr.data_size_in.offset
_F_SIZE_OUT = TestRunAttr.data_size_out.offset
_F_RETVAL = TestRunAttr.retval.offset


def _buffer_address(data: Buffer) -> int:
    """The address of the first byte of ``data`` (bytes, or a writable buffer such as an
    ``mmap.ACCESS_COPY`` mapping or a bytearray), for an attr's data_in."""
    if isinstance(data, bytes):
        return C.cast(C.c_char_p(data), C.c_void_p).value or 0
    return C.addressof(C.c_char.from_buffer(data))


# ---- objects, pins, attach, links ----
def obj_pin(fd: int | Fd, path: str) -> None:
    """BPF_OBJ_PIN ``fd`` at ``path`` (a file in a bpffs mount)."""
    p = C.create_string_buffer(os.fsencode(path))
    sys_bpf(BpfCmd.OBJ_PIN, ObjAttr(pathname=_addr(p), bpf_fd=int(fd)))


def obj_get(path: str, file_flags: int = 0) -> Fd:
    """BPF_OBJ_GET: open the object pinned at ``path`` (flags BPF_F_RDONLY/WRONLY)."""
    p = C.create_string_buffer(os.fsencode(path))
    return Fd(sys_bpf(BpfCmd.OBJ_GET, ObjAttr(pathname=_addr(p), file_flags=file_flags)))


def prog_attach(
    target_fd: int | Fd,
    prog_fd: int | Fd,
    attach_type: int,
    flags: int = 0,
    replace_fd: int | Fd = 0,
) -> None:
    """BPF_PROG_ATTACH (cgroup sock_ops: target = cgroup fd; sk_msg: target = sockmap fd)."""
    sys_bpf(
        BpfCmd.PROG_ATTACH,
        ProgAttachAttr(int(target_fd), int(prog_fd), int(attach_type), flags, int(replace_fd)),
    )


def prog_detach(target_fd: int | Fd, attach_type: int, prog_fd: int | Fd = 0) -> None:
    """BPF_PROG_DETACH."""
    sys_bpf(BpfCmd.PROG_DETACH, ProgAttachAttr(int(target_fd), int(prog_fd), int(attach_type)))


def prog_detach_if_attached(target_fd: int | Fd, attach_type: int, prog_fd: int | Fd = 0) -> bool:
    """BPF_PROG_DETACH; False (instead of BpfError ENOENT) when the program was not attached."""
    try:
        prog_detach(target_fd, attach_type, prog_fd)
    except BpfPermissionError:
        raise
    except BpfError as e:
        if e.errno == E.ENOENT:
            return False
        raise
    return True


def prog_query(
    target_fd: int | Fd, attach_type: int, *, max_progs: int = 64
) -> tuple[list[int], int]:
    """BPF_PROG_QUERY: (ids of the programs attached to ``target_fd`` for ``attach_type``,
    attach flags).  ``target_fd``: a cgroup directory (sock_ops and the other cgroup hooks;
    flags BPF_F_ALLOW_MULTI/OVERRIDE) or a sockmap/sockhash (sk_msg, sk_skb; Linux 5.19+).
    Programs attached directly or through a link, in run order; without
    BPF_F_QUERY_EFFECTIVE, so not those a cgroup inherits (as ``bpftool cgroup tree``)."""
    ids = (C.c_uint32 * max_progs)()
    a = ProgQueryAttr(
        target_fd=int(target_fd),
        attach_type=int(attach_type),
        prog_ids=C.addressof(ids),
        prog_cnt=max_progs,
    )
    sys_bpf(BpfCmd.PROG_QUERY, a)
    return [int(ids[i]) for i in range(min(a.prog_cnt, max_progs))], int(a.attach_flags)


def link_create(prog_fd: int, target: int, attach_type: int, flags: int = 0) -> Fd:
    """BPF_LINK_CREATE; for XDP ``target`` is the ifindex and ``flags`` XDP_FLAGS_*."""
    a = LinkCreateAttr(
        prog_fd=int(prog_fd), target_fd=int(target), attach_type=int(attach_type), flags=flags
    )
    return Fd(sys_bpf(BpfCmd.LINK_CREATE, a))


def link_update(
    link_fd: int | Fd, new_prog_fd: int | Fd, old_prog_fd: int | Fd = 0, flags: int = 0
) -> None:
    """BPF_LINK_UPDATE: atomically swap the link's program (BPF_F_REPLACE with old_prog_fd)."""
    sys_bpf(
        BpfCmd.LINK_UPDATE, LinkUpdateAttr(int(link_fd), int(new_prog_fd), flags, int(old_prog_fd))
    )


def raw_tracepoint_open(name: str, prog_fd: int | Fd) -> Fd:
    """BPF_RAW_TRACEPOINT_OPEN: run BPF_PROG_TYPE_RAW_TRACEPOINT program ``prog_fd`` at
    every hit of tracepoint ``name`` (as in /sys/kernel/tracing/events/*/NAME, e.g.
    ``xdp_cpumap_kthread``).  Closing the returned fd detaches it."""
    tp = C.create_string_buffer(name.encode())
    return Fd(
        sys_bpf(BpfCmd.RAW_TRACEPOINT_OPEN, RawTracepointAttr(name=_addr(tp), prog_fd=int(prog_fd)))
    )


def link_detach(link_fd: int | Fd) -> None:
    """BPF_LINK_DETACH: detach the link's program (the fd stays valid but defunct)."""
    sys_bpf(BpfCmd.LINK_DETACH, LinkDetachAttr(int(link_fd)))


_Info = TypeVar("_Info", bound=C.Structure)


def obj_get_info_by_fd(fd: int | Fd, info: _Info) -> _Info:
    """BPF_OBJ_GET_INFO_BY_FD into ``info`` (ProgInfo / MapInfo / LinkInfo / BtfInfo)."""
    sys_bpf(BpfCmd.OBJ_GET_INFO_BY_FD, InfoAttr(int(fd), C.sizeof(info), C.addressof(info)))
    return info


def prog_info(fd: int | Fd) -> ProgInfo:
    return obj_get_info_by_fd(fd, ProgInfo())


def map_info(fd: int | Fd) -> MapInfo:
    return obj_get_info_by_fd(fd, MapInfo())


def link_info(fd: int | Fd) -> LinkInfo:
    return obj_get_info_by_fd(fd, LinkInfo())


def btf_info(fd: int | Fd) -> BtfInfo:
    return obj_get_info_by_fd(fd, BtfInfo())


def btf_data(btf_id: int) -> bytes:
    """The raw BTF (header, types, strings) of the kernel's BTF object ``btf_id``, as
    ``bpftool btf dump id N`` reads it (BPF_BTF_GET_FD_BY_ID, then bpf_btf_info.btf).
    Raises BpfError (ENOENT: no such id; EPERM: needs CAP_SYS_ADMIN)."""
    with get_fd_by_id("btf", btf_id) as fd:
        size = btf_info(fd).btf_size
        buf = C.create_string_buffer(max(size, 1))
        obj_get_info_by_fd(fd, BtfInfo(btf=C.addressof(buf), btf_size=size))
        return buf.raw[:size]


def kernel_btf(btf_id: int) -> Btf | None:
    """The BTF object ``btf_id`` as the kernel holds it, parsed (:func:`btf_data`); None
    when there is none (id 0), the kernel would not say (EPERM), or it cannot be parsed."""
    if not btf_id:
        return None
    try:
        return parse_btf(btf_data(btf_id))
    except (BpfError, BtfFormatError):
        return None


def prog_map_ids(fd: int | Fd) -> list[int]:
    """Ids of the maps program ``fd`` uses (bpf_prog_info.map_ids)."""
    n = prog_info(fd).nr_map_ids
    buf = (C.c_uint32 * max(n, 1))()
    info = ProgInfo(nr_map_ids=n, map_ids=C.addressof(buf))
    obj_get_info_by_fd(fd, info)
    return list(buf[: min(n, info.nr_map_ids)])


def prog_xlated(fd: int | Fd) -> bytes:
    """The program's instructions as the verifier rewrote them (like bpftool dump xlated)."""
    n = prog_info(fd).xlated_prog_len
    buf = C.create_string_buffer(max(n, 1))
    info = ProgInfo(xlated_prog_len=n, xlated_prog_insns=C.addressof(buf))
    obj_get_info_by_fd(fd, info)
    return buf.raw[:n]


_NEXT = {
    "prog": BpfCmd.PROG_GET_NEXT_ID,
    "map": BpfCmd.MAP_GET_NEXT_ID,
    "link": BpfCmd.LINK_GET_NEXT_ID,
    "btf": BpfCmd.BTF_GET_NEXT_ID,
}
_BY_ID = {
    "prog": BpfCmd.PROG_GET_FD_BY_ID,
    "map": BpfCmd.MAP_GET_FD_BY_ID,
    "link": BpfCmd.LINK_GET_FD_BY_ID,
    "btf": BpfCmd.BTF_GET_FD_BY_ID,
}


def get_next_id(kind: str, start_id: int = 0) -> int | None:
    """*_GET_NEXT_ID for ``kind`` in prog/map/link/btf; None after the last id."""
    a = GetIdAttr(start_id=start_id)
    try:
        sys_bpf(_NEXT[kind], a)
    except BpfError as e:
        if e.errno == E.ENOENT:
            return None
        raise
    return a.next_id


def get_fd_by_id(kind: str, obj_id: int) -> Fd:
    """*_GET_FD_BY_ID for ``kind`` in prog/map/link/btf."""
    return Fd(sys_bpf(_BY_ID[kind], GetIdAttr(start_id=obj_id)))


def map_get_next_id(start_id: int = 0) -> int | None:
    return get_next_id("map", start_id)


def map_get_fd_by_id(map_id: int) -> Fd:
    return get_fd_by_id("map", map_id)


def probe_bpf() -> str | None:
    """None when bpf() works here (a 1-entry array map can be created), else a reason."""
    try:
        with map_create(MapType.ARRAY, 4, 4, 1, name="bpfdsl_probe"):
            return None
    except BpfPermissionError:
        return "bpf() not permitted: needs root (CAP_BPF + CAP_NET_ADMIN)"
    except BpfError as e:
        return f"bpf() unusable: {e}"
    except OSError as e:  # pragma: no cover
        return f"bpf() unusable: {e}"
