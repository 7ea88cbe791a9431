"""Build hook next to pyproject.toml (which holds the metadata): with BPFDSL_COMPILE=1 in the
environment at install time the checker's modules (bpfdsl/checker/*.py but ``__init__`` and
``native``) are compiled to C extensions by mypyc; without it the package installs as pure
Python (no C compiler needed).  bpfdsl/checker/native.py decides at import time which of
the two runs (docs/ARCHITECTURE.md, "The compiled checker").  The same switch builds
bpfdsl/kernel/_testrun.c, the batch form of BPF_PROG_TEST_RUN, and bpfdsl/runtime/_pcapwalk.c,
the walk over a mapped capture (``bpfdsl run --pcap``, issue #25), and
bpfdsl/runtime/_xsk.c, xdpsock's l2fwd step over an AF_XDP socket's rings; without them
bpfdsl/kernel/syscall.py, bpfdsl/runtime/pcapfile.py and bpfdsl/runtime/xsk.py run the
same loops in Python.

    BPFDSL_COMPILE=1 pip install -e .      # or: pip install .
"""

from __future__ import annotations

import os
import sys
from importlib.util import module_from_spec, spec_from_file_location
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent
CHECKER = Path("bpfdsl") / "checker"  # relative: mypycify names modules by their path


def _native():
    """bpfdsl/checker/native.py, loaded from its file (it imports only the standard
    library; importing the package would need its dependencies at build time)."""
    spec = spec_from_file_location("_bpfdsl_checker_native", ROOT / CHECKER / "native.py")
    assert spec is not None and spec.loader is not None
    mod = module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class BuildExtStamped(build_ext):
    """build_ext that makes the mypyc extensions when it runs (not each time setup.py is
    read: pip reads it three times per install) and then writes the build stamp
    (native.STAMP: a hash per compiled source) next to the shared library of the mypyc
    group, in the wheel's tree or, for an editable install, in the work tree."""

    def finalize_options(self) -> None:
        dist = self.distribution
        if dist.ext_modules and dist.ext_modules[0] is PLACEHOLDER:
            dist.ext_modules = [*mypyc_extensions(), *dist.ext_modules[1:]]
        super().finalize_options()

    def run(self) -> None:
        super().run()
        if any(e not in C_LOOPS for e in self.extensions):
            n = _native()
            n.write_stamp(
                self._stamp_path().parent, ROOT / CHECKER, n.compiled_modules(ROOT / CHECKER)
            )

    def _stamp_path(self) -> Path:
        n = _native()
        return Path(self.get_ext_fullpath(n.GROUP + "__mypyc")).parent / n.STAMP

    def get_outputs(self) -> list[str]:
        outs = list(super().get_outputs())
        checker = any(e not in C_LOOPS for e in self.extensions)
        return [*outs, str(self._stamp_path())] if checker else outs


def mypyc_extensions() -> list:
    """The checker's modules compiled by mypyc (opt_level 3), one group whose shared
    library is bpfdsl/checker/_native__mypyc.*.so.  Runs mypy on them first (its errors
    stop the build); third-party packages need not be installed in the build environment."""
    from mypyc.build import mypycify  # build requirement (pyproject.toml), only needed here

    n = _native()
    os.chdir(ROOT)  # mypycify names the modules by their relative paths
    paths = [str(CHECKER / f"{m}.py") for m in n.compiled_modules(ROOT / CHECKER)]
    print(f"bpfdsl: compiling {len(paths)} checker modules with mypyc", file=sys.stderr)
    flags = ["--ignore-missing-imports", "--follow-imports=silent"]
    return mypycify([*flags, *paths], opt_level="3", group_name=n.GROUP)


# With BPFDSL_COMPILE=1 a placeholder tells setuptools the distribution has extensions
# (a platform wheel, build_ext runs); BuildExtStamped.finalize_options
# replaces it by mypyc's.
PLACEHOLDER = Extension("bpfdsl.checker._native__mypyc", sources=[])
# the test-run loop in C: plain C against Python.h, no library (bpfdsl.kernel.syscall
# gives it the system call number, the command and the attr's layout)
TESTRUN = Extension(
    "bpfdsl.kernel._testrun", sources=["bpfdsl/kernel/_testrun.c"], extra_compile_args=["-O2"]
)
# the walk over a mapped capture's records in C (bpfdsl.runtime.pcapfile)
PCAPWALK = Extension(
    "bpfdsl.runtime._pcapwalk", sources=["bpfdsl/runtime/_pcapwalk.c"], extra_compile_args=["-O2"]
)
# xdpsock's l2fwd step over an AF_XDP socket's rings (bpfdsl.runtime.xsk.XskSocket.l2fwd)
XSK = Extension(
    "bpfdsl.runtime._xsk", sources=["bpfdsl/runtime/_xsk.c"], extra_compile_args=["-O2"]
)
C_LOOPS = (TESTRUN, PCAPWALK, XSK)
COMPILE = os.environ.get("BPFDSL_COMPILE", "") == "1"
setup(
    ext_modules=[PLACEHOLDER, *C_LOOPS] if COMPILE else [],
    # the build requirement of the compiled checker, installed only for it (pyproject.toml)
    setup_requires=["mypy>=2.4"] if COMPILE else [],
    cmdclass={"build_ext": BuildExtStamped},
)
