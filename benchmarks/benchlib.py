"""Shared helpers of the benchmark scripts in benchmarks/ (not part of the installed package).

Paths of the reference programs, building the clang-19 objects (tests/data/c/build.sh),
timing child processes, statistics and plain-text tables.  Every script imports this module
from its own directory (``python3 benchmarks/NAME.py`` puts benchmarks/ first on sys.path) and puts the
repository root on sys.path so ``bpfdsl`` is taken from the working tree.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROGS = ROOT / "progs"
C_DIR = ROOT / "tests" / "data" / "c"
CLANG = os.environ.get("CLANG", "clang-19")
CLANG_ARGS = ["-O2", "-g", "-target", "bpf", "-c"]

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# Programs compared against C: (name of progs/NAME.bpfd == tests/data/c/NAME.c); every
# progs/ program with a C twin.  clang runs at its default CPU (CLANG_ARGS has no -mcpu):
# what a user of clang -target bpf gets.
REFERENCE_PROGRAMS = (
    "xdp_pass",
    "xdp_drop",
    "xdp_udp_filter",
    "xdp_acl",
    "xdp_reflect",
    "xdp_pong",
    "xdp_vlan_strip",
    "xdp_vxlan_decap",
    "xdp_gre_decap",
    "xdp_cpumap_steer",
    "xdp_devmap_forward",
    "xdp_xsk_redirect",
    "xdp_meta_mark",
    "xdp_router",
    "xdp_sampler",
    "xdp_src_net",
    "sk_msg_redirect_ingress",
    "sk_msg_policy",
)


class BenchError(RuntimeError):
    """A benchmark cannot run here (missing tool, not root); the message says what to do."""


def arch_include() -> str:
    """The multiarch include dir holding <asm/types.h> (clang -target bpf does not search it)."""
    machine = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True)
    name = machine.stdout.strip() if machine.returncode == 0 else f"{os.uname().machine}-linux-gnu"
    return f"/usr/include/{name}"


def clang_cmd(src: Path, out: Path) -> list[str]:
    """The clang-19 command line that compiles one reference C file (same as build.sh)."""
    return [CLANG, *CLANG_ARGS, f"-I{arch_include()}", str(src), "-o", str(out)]


def ours_compile_cmd(src: Path, out: Path, venv: Path | None = None) -> list[str]:
    """The whole-process ``bpfdsl compile`` command line: the ``bpfdsl`` script of ``venv``
    (see :func:`installed_venv`) or, without one, the working tree's package."""
    if venv is not None:
        return [str(venv / "bin" / "bpfdsl"), "compile", str(src), "-o", str(out)]
    return [sys.executable, "-m", "bpfdsl", "compile", str(src), "-o", str(out)]


def _tree_digest() -> str:
    """A digest of what a wheel of the working tree contains (package, grammar, progs)."""
    import hashlib

    h = hashlib.sha256()
    files = [ROOT / "pyproject.toml"]
    for top in ("bpfdsl", "grammar", "progs"):
        files += sorted(
            p for p in (ROOT / top).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    for f in files:
        h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def venv_lock():
    """Hold the bench venv (see :func:`installed_venv`) for one benchmark run: concurrent
    runs wait instead of reinstalling the tree under each other's timed commands (flock on
    a file next to the venv)."""
    import fcntl
    import tempfile

    with open(Path(tempfile.gettempdir()) / "bpfdsl-bench-venv.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        yield


def installed_venv(log=print) -> Path:
    """A venv with the working tree installed as a user installs it (``pip install`` of the
    tree: a non-editable wheel with byte-compiled modules), so whole-process figures are what
    a user's ``bpfdsl`` command costs, not the tree's (no editable-install import hook, no
    byte-compiling on each run when PYTHONDONTWRITEBYTECODE is set).  One venv under the temp
    dir: made with the dependencies on first use (~30 s), bpfdsl reinstalled from the tree
    (~10 s) when the tree changed since (a digest kept in the venv).  Call with
    :func:`venv_lock` held.  Raises BenchError when pip fails (no network and no pip cache
    for the dependencies).

    The checker is installed as plain ``pip install`` installs it: pure Python
    (``BPFDSL_COMPILE=0`` for pip, whatever the caller's environment says: scripts/test.sh
    exports BPFDSL_COMPILE=1, and a mypyc build here took minutes under the tests' timeouts);
    ``BPFDSL_BENCH_COMPILE=1`` installs the compiled checker instead."""
    import tempfile

    venv = Path(tempfile.gettempdir()) / "bpfdsl-bench-venv"
    compiled = os.environ.get("BPFDSL_BENCH_COMPILE", "") == "1"
    pip_env = {**clean_env(), "BPFDSL_COMPILE": "1" if compiled else "0"}
    stamp = venv / ".bpfdsl-tree-digest"
    digest = _tree_digest() + (" compiled" if compiled else " pure")
    if (venv / "bin" / "bpfdsl").exists() and stamp.exists() and stamp.read_text() == digest:
        return venv
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    try:
        if (venv / "bin" / "bpfdsl").exists():
            run([*pip, "--no-deps", "--force-reinstall", str(ROOT)], timeout=600, env=pip_env)
        else:
            log(f"installing the working tree into {venv} (first run only, ~30 s)")
            shutil.rmtree(venv, ignore_errors=True)
            run([sys.executable, "-m", "venv", str(venv)], timeout=300)
            run([*pip, str(ROOT)], timeout=900, env=pip_env)
    except (BenchError, subprocess.TimeoutExpired) as e:
        raise BenchError(f"could not install the tree into {venv}: {e}") from None
    stamp.write_text(digest)
    return venv


def clean_env() -> dict[str, str]:
    """Environment for timing an installed venv's commands: no PYTHONPATH (the tree must not
    shadow the install) and byte-code caching as users have it."""
    return {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")
    }


def time_interleaved(
    cmds: Sequence[Sequence[str]], runs: int, *, env=None, cwd=None
) -> list[list[float]]:
    """Wall-clock seconds of ``runs`` rounds of ``cmds`` run one after another (A B A B ...),
    so a drift of machine load hits every command alike.  Each must exit 0."""
    out: list[list[float]] = [[] for _ in cmds]
    for _ in range(runs):
        for i, cmd in enumerate(cmds):
            t0 = time.perf_counter()
            run(cmd, env=env, cwd=cwd)
            out[i].append(time.perf_counter() - t0)
    return out


def require_tool(name: str, hint: str) -> str:
    """Path of ``name`` on PATH, or BenchError with ``hint``."""
    path = shutil.which(name)
    if path is None:
        raise BenchError(f"{name} not found: {hint}")
    return path


def require_root() -> None:
    """BenchError unless running as root (bpf(), namespaces and veths need it)."""
    if os.geteuid() != 0:
        raise BenchError("needs root (CAP_BPF, CAP_NET_ADMIN): run with sudo")


def env_with_tree() -> dict[str, str]:
    """Environment for child Python processes: the working tree first on PYTHONPATH."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    return env


def run(cmd: Sequence[str], *, timeout: float = 120, check: bool = True, **kw):
    """subprocess.run with captured text output; on failure BenchError naming the command."""
    proc = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, **kw)
    if check and proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise BenchError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n" + "\n".join(tail))
    return proc


def time_process(cmd: Sequence[str], runs: int, *, timeout: float = 120, env=None) -> list[float]:
    """Wall-clock seconds of ``runs`` executions of ``cmd`` (each must exit 0)."""
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        run(cmd, timeout=timeout, env=env)
        out.append(time.perf_counter() - t0)
    return out


def python_floor(runs: int, imports: Sequence[str], venv: Path | None = None) -> dict[str, float]:
    """Median ms of bare interpreter start-up and of start-up + each import in ``imports``:
    the part of a whole-process figure that no compiler or loader work can remove.  With
    ``venv`` (see :func:`installed_venv`) its interpreter and installed package are timed,
    run from the temp dir so the working tree cannot shadow the install."""
    import tempfile

    if venv is None:
        py, env, cwd = sys.executable, env_with_tree(), None
    else:
        py, env, cwd = str(venv / "bin" / "python"), clean_env(), tempfile.gettempdir()
    out = {
        "python -c pass": median(time_interleaved([[py, "-c", "pass"]], runs, env=env, cwd=cwd)[0])
        * 1000
    }
    for mod in imports:
        cmd = [py, "-c", f"import {mod}"]
        out[f"import {mod}"] = median(time_interleaved([cmd], runs, env=env, cwd=cwd)[0]) * 1000
    return out


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    """(mean, sample standard deviation; 0 for fewer than two values)."""
    if not xs:
        return float("nan"), float("nan")
    return statistics.fmean(xs), (statistics.stdev(xs) if len(xs) > 1 else 0.0)


def load_note() -> str | None:
    """A warning when the machine is busy (1-minute load average >= 0.5): the figures of
    a benchmark are only comparable between runs on an otherwise idle machine."""
    try:
        load1 = os.getloadavg()[0]
    except OSError:
        return None
    if load1 < 0.5:
        return None
    return (
        f"load average {load1:.2f} on {os.cpu_count()} CPUs while measuring: other work "
        "competes; rerun on an idle machine for figures to quote"
    )


def verdict(ok: bool | None) -> str:
    """PASS / MISS / n/a for a goal check."""
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A plain-text table, columns left-aligned for text and right-aligned for numbers."""
    cells = [[str(h) for h in headers]] + [["" if c is None else str(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    numeric = [
        all(_is_num(r[i]) for r in cells[1:] if r[i] not in ("", "n/a", "-"))
        for i in range(len(headers))
    ]
    lines = []
    for n, r in enumerate(cells):
        parts = [
            c.rjust(w) if numeric[i] and n > 0 else c.ljust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        lines.append("  ".join(parts).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _is_num(s: str) -> bool:
    try:
        float(s.rstrip("%x").replace("±", "").split()[0] if s.strip() else "x")
    except ValueError:
        return False
    return True


def build_c(out_dir: Path, names: Sequence[str] | None = None) -> dict[str, Path]:
    """Compile the reference C programs (all, or ``names``) into ``out_dir``; name -> .o."""
    require_tool(CLANG, "apt-get install clang-19 (or set CLANG=)")
    out_dir.mkdir(parents=True, exist_ok=True)
    objs = {}
    for src in sorted(C_DIR.glob("*.c")):
        if names is not None and src.stem not in names:
            continue
        obj = out_dir / f"{src.stem}.o"
        run(clang_cmd(src, obj))
        objs[src.stem] = obj
    return objs


def compile_ours(src: Path, out: Path) -> str | None:
    """Compile a .bpfd file with the in-tree compiler into ``out``; None on success, else
    why not (the benchmarks then run with the clang object only and print the reason).

    Uses the library call ``bpfdsl.compiler.compile_source`` (no dependence on the CLI)."""
    if not src.exists():
        return f"{src.relative_to(ROOT)} does not exist yet"
    try:
        from bpfdsl.compiler import compile_source

        res = compile_source(src.read_text(), str(src))
    except Exception as e:  # any compiler failure is reported, not fatal
        msg = str(e).strip().splitlines()
        return f"bpfdsl cannot compile {src.name}: {type(e).__name__}: {msg[0] if msg else ''}"
    out.write_bytes(res.obj)
    return None


def ensure_bpffs() -> None:
    """Mount bpffs on /sys/fs/bpf if it is not mounted (as bpftool does)."""
    if not os.path.ismount("/sys/fs/bpf"):
        run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"])


PROGRAM_SECTIONS = ("xdp", "xdp.frags", "xdp/cpumap", "xdp/devmap", "sk_msg", "sockops")


def program_slots(obj: Path) -> list[tuple[str, str, int]]:
    """[(section, function, slots)] of the programs in ``obj``, by section then symbol order.

    Slots are 8-byte instruction units as the kernel counts them (ld_imm64 = 2), including
    the BPF-to-BPF subprograms the program carries.  Read with ``bpfdsl.obj.collection`` (sum of
    ``Insn.width``; subprograms appended) when it is available, else with pyelftools from
    the symbol table (st_size / 8, plus the size of .text); both agree on clang's objects.
    """
    try:
        from bpfdsl.obj.collection import read_object
    except ImportError:
        return _program_slots_elf(obj)
    spec = read_object(obj)
    progs = [(p.section, p.name, sum(i.width for i in p.insns)) for p in spec.programs.values()]
    return sorted(progs, key=lambda t: t[0])


def _program_slots_elf(obj: Path) -> list[tuple[str, str, int]]:
    from elftools.elf.elffile import ELFFile

    out = []
    with obj.open("rb") as f:
        elf = ELFFile(f)
        text = elf.get_section_by_name(".text")
        sub = (text.data_size // 8) if text is not None else 0
        syms = elf.get_section_by_name(".symtab")
        found = []
        for s in syms.iter_symbols():
            if s["st_info"]["type"] != "STT_FUNC" or s["st_info"]["bind"] != "STB_GLOBAL":
                continue
            sec = elf.get_section(s["st_shndx"]).name
            if sec in PROGRAM_SECTIONS:
                found.append((sec, s["st_value"], s.name, s["st_size"] // 8 + sub))
    for sec, _v, name, n in sorted(found):
        out.append((sec, name, n))
    return out


class Loaded:
    """An object loaded by libbpf (``bpftool prog loadall OBJ DIR pinmaps DIR/maps``) into a
    unique bpffs dir, so objects of both compilers load the same way.

    ``progs``: section name -> program Fd (first program of that section); ``maps``: map name
    -> (Fd, syscall.MapInfo).  ``close()`` closes the fds and removes the pins.
    """

    def __init__(self, obj: Path):
        from bpfdsl.kernel import syscall

        self.pin = Path("/sys/fs/bpf") / f"bpfdsl_bench_{uuid.uuid4().hex[:10]}"
        self.fds = []
        self.progs = {}  # section -> fd (first program of that section)
        self.maps = {}  # name -> (fd, MapInfo)
        try:
            run(
                [
                    "bpftool",
                    "prog",
                    "loadall",
                    str(obj),
                    str(self.pin),
                    "pinmaps",
                    str(self.pin / "maps"),
                ]
            )
            for sec, name, _n in program_slots(obj):
                if sec not in self.progs:
                    self.progs[sec] = self._keep(syscall.obj_get(str(self.pin / name)))
            maps_dir = self.pin / "maps"
            for p in sorted(maps_dir.iterdir()) if maps_dir.exists() else ():
                fd = self._keep(syscall.obj_get(str(p)))
                self.maps[p.name] = (fd, syscall.map_info(fd))
        except BaseException:
            self.close()
            raise

    def _keep(self, fd):
        self.fds.append(fd)
        return fd

    def map_of_type(self, map_type: int, exclude_name_part: str = ".") -> tuple | None:
        for name, (fd, info) in self.maps.items():
            if info.type == map_type and exclude_name_part not in name:
                return fd, info
        return None

    def close(self) -> None:
        for fd in self.fds:
            fd.close()
        shutil.rmtree(self.pin, ignore_errors=True)
