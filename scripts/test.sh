#!/usr/bin/env bash
# Run the bpfdsl test suite from a fresh machine: installs the system packages the tests
# use (Debian/Ubuntu, as root), a .venv with bpfdsl and its test extras, then pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k loader -x`.
# Kernel tests need root; BPFDSL_REQUIRE_KERNEL=1 makes their skips failures (CI sets it).
# The full run (no arguments) also runs tests/checker a second time with the checker's
# pure-Python modules (BPFDSL_PURE_PYTHON=1) when the install compiled them, so the fallback
# stays correct.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
setup_system clang-19 llvm-19 bpftool libbpf-dev libxdp-dev xdp-tools tcpdump iproute2 ethtool skopeo umoci
setup_compiler
setup_bpffs
setup_venv test,bench

# pytest "$@", exit 5 (no test collected) counted as a failure
run_pytest() {
  local rc=0
  .venv/bin/python -m pytest -q -ra "$@" || rc=$?
  if [ $rc -eq 5 ]; then
    echo "pytest collected no tests: counting that as a failure" >&2
    rc=1
  fi
  return $rc
}

echo "== pytest"
rc=0
run_pytest "$@" || rc=$?
if [ $# -eq 0 ] && .venv/bin/python -c 'import sys, bpfdsl.checker as c; sys.exit(not c.NATIVE)'; then
  echo "== pytest tests/checker with the pure-Python checker (BPFDSL_PURE_PYTHON=1)"
  BPFDSL_PURE_PYTHON=1 run_pytest tests/checker || rc=$?
fi
exit $rc
