"""CLI misuse: a fixed list of wrong command lines run through the ``bpfdsl`` command
(``python -m bpfdsl`` in a subprocess, as a user runs it): wrong arguments, missing files,
files of the wrong kind, numbers of the wrong type or range, bad pin directories, and, as
far as a root test can drop privileges (``setpriv`` to uid/gid 65534), commands that need
root.  Each must exit with the status it names (1: failed, 2: unusable input or usage,
3: missing privileges) and say why on stderr (a diagnostic ``error[code]`` or argparse's
usage error), never with a traceback or a raw Python message.

The commands run in the fuzz worker (private mount and network namespaces, its own bpffs)
against fixtures it makes once: objects compiled from progs/, a pin dir per map kind
(``bpfdsl load``), a text file posing as an object, a directory, an unreadable file.
"""

from __future__ import annotations

import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile

from .cli_run import judge_output
from .harness import PROGS, ROOT, Case, Fuzzer, Result, keep_pins

FRAME = (
    "02000000000202000000000108004500001c000140004011f8dc0a010101c000020104d200350008" + "00" * 18
)
NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--"]
CLI_MEMORY = 2 << 30  # RLIMIT_AS of a command, bytes (a runaway read fails, not the VM)

# (argv with {placeholders}, exit codes it may end with, run as "root" or "nobody")
CASES: list[tuple[list[str], tuple[int, ...], str]] = [
    ([], (2,), "root"),
    (["frobnicate"], (2,), "root"),
    (["--json", "frobnicate"], (2,), "root"),
    (["compile"], (2,), "root"),
    (["compile", "{missing}.bpfd"], (2,), "root"),
    (["compile", "{dir}"], (2,), "root"),
    (["compile", "/dev/null"], (2,), "root"),  # not a regular file
    (["compile", "/dev/zero"], (2,), "root"),
    (["compile", "{bad}"], (1,), "root"),
    (["--json", "compile", "{bad}"], (1,), "root"),
    (["compile", "{notutf8}"], (1,), "root"),  # a located bad-encoding error
    (["compile", "{prog}", "--emit", "bogus"], (2,), "root"),
    (["compile", "{prog}", "--mcpu", "v9"], (2,), "root"),
    (["compile", "{prog}", "-o", "{missing}/x.o"], (2,), "root"),
    (["compile", "{prog}", "-o", "{dir}"], (2,), "root"),
    (["compile", "{prog}", "-o", "/sys/fs/bpf/x.o"], (2,), "root"),
    (["compile", "{prog}", "--emit", "asm", "-o", "-"], (0,), "root"),
    (["check"], (2,), "root"),
    (["check", "{missing}.o"], (2,), "root"),
    (["check", "{notelf}"], (2,), "root"),
    (["check", "{empty}"], (2,), "root"),
    (["check", "{dir}"], (2,), "root"),
    (["check", "{obj}", "--kernel", "abc"], (2,), "root"),
    (["check", "{obj}", "--kernel", "5"], (0, 1, 2), "root"),
    (["check", "{obj}", "--kernel", "99999999999999999999.1"], (0, 1, 2), "root"),
    (["check", "{obj}", "--kernel", "-1.0"], (2,), "root"),
    (["check", "{obj}", "--prog", "nope"], (2,), "root"),
    (["check", "{bad}"], (1,), "root"),
    (["disasm", "{missing}.o"], (2,), "root"),
    (["disasm", "{notelf}"], (2,), "root"),
    (["disasm", "{obj}", "--prog", "nope"], (2,), "root"),
    (["run", "{obj}"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--pcap", "{pcap}"], (2,), "root"),
    (["run", "{obj}", "--hex", "zz"], (2,), "root"),
    (["run", "{obj}", "--hex", "0"], (2,), "root"),
    (["run", "{obj}", "--hex", ""], (1, 2), "root"),
    (["run", "{obj}", "--hex", "00" * 10], (1, 2), "root"),
    (["run", "{obj}", "--hex", FRAME, "--repeat", "0"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--repeat", "abc"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--repeat", "-1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--repeat", "1e3"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--repeat", "99999999999999"], (2,), "root"),
    (["run", "{obj}", "--pcap", "{missing}.pcap"], (2,), "root"),
    (["run", "{obj}", "--pcap", "{dir}"], (2,), "root"),
    (["run", "{obj}", "--pcap", "/dev/null"], (2,), "root"),
    (["run", "{obj}", "--pcap", "{prog}"], (2,), "root"),
    (["run", "{obj}", "--pcap", "{pcap}", "--limit", "0"], (2,), "root"),
    (["run", "{obj}", "--pcap", "{pcap}", "--limit", "x"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--limit", "1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--engine", "bogus"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "port"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "=1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "nope=1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "port=abc"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "port=70000"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "port=-1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--set", "port=10.0.0.1"], (2,), "root"),
    (["run", "{obj}", "--hex", FRAME, "--prog", "nope"], (2,), "root"),
    (["run", "{multi}", "--hex", FRAME], (2,), "root"),
    (["run", "{skmsg}", "--hex", FRAME, "--engine", "kernel"], (1,), "root"),
    (["run", "{notelf}", "--hex", FRAME], (2,), "root"),
    (["load", "{missing}.o"], (2,), "root"),
    (["load", "{notelf}"], (2,), "root"),
    (["load", "{obj}", "--set", "port"], (2,), "root"),
    (["load", "{obj}", "--set", "port=1.5"], (2,), "root"),
    (["load", "{obj}", "--log-level", "abc"], (2,), "root"),
    (["load", "{obj}", "--log", "--log-level", "99", "--pin-dir", "/sys/fs/bpf/fz_ll"], (1, 2), "root"),
    (["load", "{obj}", "--pin-dir", "{dir}/pins"], (1, 2), "root"),
    (["load", "{obj}", "--pin-dir", "/sys/fs/bpf/a.b"], (2,), "root"),
    (["load", "{obj}", "--pin-dir", "/sys/fs/bpf/fz_cpumap"], (1, 2), "root"),
    (["unload"], (2,), "root"),
    (["unload", "/sys/fs/bpf/nope"], (1, 2), "root"),
    (["unload", "/sys/fs/bpf"], (1, 2), "root"),
    (["unload", "{dir}"], (1, 2), "root"),
    (["attach"], (2,), "root"),
    (["attach", "xdp", "{obj}"], (2,), "root"),
    (["attach", "xdp", "{obj}", "--dev", "nosuchdev0"], (3,), "root"),
    (["attach", "xdp", "{obj}", "--dev", "lo", "--mode", "offload"], (1, 2), "root"),
    (["attach", "xdp", "{obj}", "--dev", "lo", "--mode", "bogus"], (2,), "root"),
    (["attach", "xdp", "{skmsg}", "--dev", "lo"], (1, 2), "root"),
    (["attach", "xdp", "{missing}.o", "--dev", "lo"], (2,), "root"),
    (["detach"], (2,), "root"),
    (["detach", "--dev", "nosuchdev0"], (3,), "root"),
    (["map"], (2,), "root"),
    (["map", "dump", "{missing}"], (2,), "root"),
    (["map", "dump", "id:abc"], (2,), "root"),
    (["map", "dump", "id:4000000000"], (1, 2), "root"),
    (["map", "dump", "{dir}"], (1, 2), "root"),
    (["map", "lookup", "/sys/fs/bpf/fz_acl/maps/v4_block", "notanaddress"], (2,), "root"),
    (["map", "lookup", "/sys/fs/bpf/fz_acl/maps/v4_block", "10.0.0.0/33"], (2,), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/v4_block", "10.0.0.0/8", "256"], (2,), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/v4_block", "10.0.0.0/8", "-1"], (2,), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/v4_block", "10.0.0.0/8", "1", "--flags", "x"], (2,), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/dropped", "7", "1"], (1, 2), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/dropped", "0", "hex:zz"], (2,), "root"),
    (["map", "update", "/sys/fs/bpf/fz_acl/maps/dropped", "0", "{{"], (2,), "root"),
    (["map", "delete", "/sys/fs/bpf/fz_acl/maps/v4_block", "10.9.0.0/16"], (1, 2), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "0", "--qsize", "0"], (2,), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "abc", "--qsize", "64"], (2,), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "99", "--qsize", "64"], (1, 2), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "0"], (2,), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpus", "0", "--qsize", "64"], (1, 2), "root"),
    (["cpumap", "set", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "0", "--qsize", "64", "--prog", "nope"], (1, 2), "root"),
    (["cpumap", "delete", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "4294967296"], (1, 2), "root"),
    (["cpumap", "delete", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "-1"], (1, 2), "root"),
    (["cpumap", "show", "{missing}"], (2,), "root"),
    (["devmap", "set", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "0", "nosuchdev0"], (3,), "root"),
    (["devmap", "set", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "4294967296", "lo"], (1, 2), "root"),
    (["devmap", "set", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "0", "lo", "--netns", "nosuchns"], (1, 2), "root"),
    (["devmap", "delete", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "-1"], (1, 2), "root"),
    (["devmap", "show", "/sys/fs/bpf/fz_cpumap/maps/cpu_map"], (1, 2), "root"),
    (["sockmap", "attach", "/sys/fs/bpf/fz_acl/maps/v4_block", "--prog", "nope"], (1, 2), "root"),
    (["sockmap", "attach", "/sys/fs/bpf/fz_sock/maps/socks"], (2,), "root"),
    (["sockops", "attach", "nope", "--cgroup", "/nonexistent"], (1, 2), "root"),
    (["sockops", "attach", "{obj}", "--cgroup", "{dir}"], (1, 2), "root"),
    (["demo", "--packets", "0"], (2,), "root"),
    (["demo", "--packets", "10001"], (2,), "root"),
    (["demo", "--port", "70000"], (2,), "root"),
    (["demo", "--mode", "bogus"], (2,), "root"),
    (["bench"], (2,), "root"),
    (["show", "--json"], (0,), "root"),
    # without privileges: exit 3 where bpf() or bpffs is needed, 0 where nothing is
    (["load", "{obj}", "--pin-dir", "/sys/fs/bpf/fz_nobody"], (3,), "nobody"),
    (["run", "{obj}", "--hex", FRAME, "--engine", "kernel"], (3,), "nobody"),
    (["run", "{obj}", "--hex", FRAME], (0,), "nobody"),
    (["check", "{obj}"], (0,), "nobody"),
    (["show"], (3,), "nobody"),
    (["map", "dump", "/sys/fs/bpf/fz_acl/maps/v4_block"], (3,), "nobody"),
    (["map", "dump", "id:1"], (2, 3), "nobody"),
    (["attach", "xdp", "{obj}", "--dev", "lo"], (3,), "nobody"),
    (["unload", "/sys/fs/bpf/fz_acl"], (3,), "nobody"),
    (["compile", "{unreadable}"], (2,), "nobody"),
    (["compile", "{prog}", "-o", "{private}/x.o"], (2,), "nobody"),
]  # fmt: skip


def cases(seed: int, count: int, kernel: bool):
    """The list (``nobody`` ones only as root), in an order shuffled by ``seed``."""
    todo = [c for c in CASES if c[2] == "root" or (kernel and os.geteuid() == 0)]
    random.Random(seed).shuffle(todo)
    for argv, codes, who in todo[:count]:
        yield Case((argv, codes, who), " ".join(argv) + (" (as nobody)" if who == "nobody" else ""))


# ---- the fixtures (made once per worker) ----------------------------------------------

_FIX: dict[str, str] = {}
FIXTURE_PINS = {  # pin dir -> program whose maps the cases use
    "/sys/fs/bpf/fz_acl": "xdp_acl.bpfd",
    "/sys/fs/bpf/fz_cpumap": "xdp_cpumap_steer.bpfd",
    "/sys/fs/bpf/fz_devmap": "xdp_devmap_forward.bpfd",
    "/sys/fs/bpf/fz_sock": "sk_msg_redirect_ingress.bpfd",
}


def fixtures() -> dict[str, str]:
    if _FIX and os.path.isdir(_FIX["dir"]):
        return _FIX
    from .api import compile_file
    from .cli_run import run_cli

    tmp = tempfile.mkdtemp(prefix="bpfdsl-fuzz-cli-")
    os.chmod(tmp, 0o755)  # `nobody` reads the objects
    f = {
        "tmp": tmp,
        "prog": str(PROGS / "xdp_udp_filter.bpfd"),
        "missing": os.path.join(tmp, "missing"),
    }
    for name, src in (
        ("obj", "xdp_udp_filter"),
        ("multi", "xdp_cpumap_steer"),
        ("skmsg", "sk_msg_policy"),
    ):
        f[name] = os.path.join(tmp, f"{src}.o")
        with open(f[name], "wb") as out:
            out.write(compile_file(PROGS / f"{src}.bpfd").obj)
    files = {"bad": ("bad.bpfd", b'license "GPL"\nxdp fn f(ctx) { return nope }\n'),
             "notutf8": ("latin1.bpfd", b'license "GPL"\n// caf\xe9\n'),
             "notelf": ("text.o", b"this is not an object\n"), "empty": ("empty.o", b""),
             "unreadable": ("secret.bpfd", b'license "GPL"\n')}  # fmt: skip
    for key, (name, data) in files.items():
        f[key] = os.path.join(tmp, name)
        with open(f[key], "wb") as out:
            out.write(data)
    os.chmod(f["unreadable"], 0o000)
    f["dir"] = os.path.join(tmp, "adir")
    os.mkdir(f["dir"])
    f["private"] = os.path.join(tmp, "private")
    os.mkdir(f["private"], 0o700)
    f["pcap"] = str(ROOT / "tests" / "data" / "pcaps" / "vrrp.pcap")
    if os.geteuid() == 0:
        for pin_dir, src in FIXTURE_PINS.items():
            if not os.path.isdir(pin_dir):
                run_cli(["load", str(PROGS / src), "--pin-dir", pin_dir])
        keep_pins([d for d in FIXTURE_PINS])
    _FIX.clear()
    _FIX.update(f)
    return _FIX


def _limits() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CLI_MEMORY, resource.RLIM_INFINITY))


def run_case(payload) -> Result:
    argv, codes, who = payload
    fx = fixtures()
    real = [a.format(**fx) for a in argv]
    cmd = [sys.executable, "-m", "bpfdsl", *real]
    if who == "nobody":
        if shutil.which("setpriv") is None:
            return Result("skipped", "setpriv (util-linux) not installed")
        cmd = NOBODY + cmd
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="100")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=ROOT, env=env,
                              preexec_fn=_limits, errors="replace")  # fmt: skip
    except subprocess.TimeoutExpired:
        return Result("hang", f"bpfdsl {real[0] if real else ''}: no exit within 60 s")
    res = judge_output(real, proc.returncode, proc.stdout, proc.stderr, ok_codes=codes)
    if res.failed:
        res.text = (f"as {who}: " if who != "root" else "") + res.text
        return res
    return Result("exit-0" if proc.returncode == 0 else f"exit-{proc.returncode}", res.detail)


def reproducer(payload) -> str:
    argv, codes, who = payload
    pre = "setpriv --reuid=65534 --regid=65534 --clear-groups -- " if who == "nobody" else ""
    return f"$ {pre}bpfdsl {' '.join(argv)}    # expected exit {' or '.join(map(str, codes))}"


FUZZER = Fuzzer("cli", cases, run_case, reproducer, None, timeout=90.0)
