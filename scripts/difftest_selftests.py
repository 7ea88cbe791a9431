#!/usr/bin/env python3
"""Differential test of the bpfdsl checker against the kernel verifier on the kernel's own
BPF selftests (tools/testing/selftests/bpf/progs/*.c), for the program types the checker
models (XDP, sk_msg, sock_ops).

The selftest sources are not part of this repository (GPL-2.0; the fixture
tests/data/checker/selftest_repros.c holds minimal reproductions of every disagreement
found).  Point --tools at the ``tools/`` folder of a kernel source tree, e.g. Debian's
linux-source-6.12 package:

    apt-get download linux-source-6.12 && dpkg-deb --fsys-tarfile linux-source-6.12_*.deb \
        | tar -xO --wildcards '*.tar.xz' | tar -xJ --wildcards \
        'linux-source-6.12/tools/testing/selftests/bpf/*' 'linux-source-6.12/tools/include/*'
    sudo python3 scripts/difftest_selftests.py --tools linux-source-6.12/tools [-v]

Each file whose programs include one of those section kinds is built with clang-19
(-O2 -g -mcpu=v4, against this machine's vmlinux BTF dumped by bpftool); each program of
a modelled type is checked (bpfdsl.checker) and loaded with BPF_PROG_LOAD without BTF
(scripts/difftest_checker.py: kernel_verdict / our_verdict).  Prints N programs compared,
M that agree, false accepts / rejects (each named), refusals with the same verdict but
another last log line, and those set apart: "cannot check" (an unmodelled helper or
kfunc) and "skip" (a map the loader cannot create without BTF).  Exit 1 on a false accept.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bpfdsl.abi.prog_types import ProgramType  # noqa: E402

MODELLED = {ProgramType.XDP, ProgramType.SK_MSG, ProgramType.SOCK_OPS}
SECTIONS = re.compile(r'SEC\("(xdp|sk_msg|sockops)')
CANNOT = ("ctx-unmodelled", "kfunc", "helper-unmodelled")


def _difftest():
    spec = importlib.util.spec_from_file_location(
        "difftest_checker", ROOT / "scripts" / "difftest_checker.py"
    )
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def build(tools: Path, out: Path, only: str | None) -> list[Path]:
    """Compile the selftest progs with modelled sections; returns the objects built."""
    progs = tools / "testing" / "selftests" / "bpf" / "progs"
    inc = out / "inc"
    inc.mkdir()
    with open(inc / "vmlinux.h", "w") as f:
        subprocess.run(
            ["bpftool", "btf", "dump", "file", "/sys/kernel/btf/vmlinux", "format", "c"],
            stdout=f,
            check=True,
        )
    arch = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    objs = []
    for src in sorted(progs.glob("*.c")):
        if only and not re.search(only, src.name):
            continue
        if not SECTIONS.search(src.read_text(errors="replace")):
            continue
        obj = out / f"{src.stem}.o"
        r = subprocess.run(
            ["clang-19", "-O2", "-g", "-target", "bpf", "-mcpu=v4", "-D__TARGET_ARCH_x86", "-w"]
            + [f"-I{inc}", f"-I{progs}", f"-I{progs.parent}", f"-I{tools / 'include' / 'uapi'}"]
            + [f"-I/usr/include/{arch}", "-c", str(src), "-o", str(obj)],
            capture_output=True,
            text=True,
        )
        if r.returncode == 0:
            objs.append(obj)
        else:
            print(f"not built: {src.name}", file=sys.stderr)
    return objs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tools", type=Path, required=True, help="a kernel source tree's tools/")
    ap.add_argument("--only", help="regex: only selftest files whose name matches")
    ap.add_argument("-v", "--verbose", action="store_true", help="also list message differences")
    a = ap.parse_args(argv)
    dt = _difftest()
    n = Counter()
    with tempfile.TemporaryDirectory(prefix="bpfdsl_selftests_") as tmp:
        objs = build(a.tools, Path(tmp), a.only)
        for o in objs:
            try:
                items = dt.base_items([str(o)], lambda _o: "selftest")
            except Exception as e:  # an object the reader refuses (externs, ...)
                print(f"not read: {o.name}: {e}", file=sys.stderr)
                continue
            for it in items:
                if it.prog_type not in MODELLED:
                    continue
                maps = dt.Maps()
                try:
                    verdict, msg, _log = dt.kernel_verdict(it, maps)
                finally:
                    maps.close()
                r = dt.our_verdict(it)
                err = r.errors[0] if r.errors else None
                if verdict == "skip":
                    n["skip"] += 1
                    continue
                if err is not None and (err.code in CANNOT or "not modelled" in err.message):
                    n["cannot check"] += 1
                    continue
                n["programs"] += 1
                ours = err.message if err else ""
                if verdict == it.ours:
                    n["agree"] += 1
                    if verdict == "rej" and msg != ours:
                        n["same verdict, other message"] += 1
                        if a.verbose:
                            print(f"message  {it.name}: kernel {msg!r}, checker {ours!r}")
                else:
                    kind = "false accept" if it.ours == "ok" else "false reject"
                    n[kind] += 1
                    print(
                        f"{kind}  {it.name}: kernel {verdict} {msg!r}, checker {it.ours} {ours!r}"
                    )
    print(", ".join(f"{k}: {v}" for k, v in n.items()) or "no programs")
    return 1 if n["false accept"] else 0


if __name__ == "__main__":
    sys.exit(main())
