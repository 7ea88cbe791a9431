#!/usr/bin/env bash
# Run the bpfdsl test suite from a fresh machine: installs the system packages the tests
# use (Debian/Ubuntu, as root), a .venv with bpfdsl and its test extras, then pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k loader -x`.
# Kernel tests need root; BPFDSL_REQUIRE_KERNEL=1 makes their skips failures (CI sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
setup_system clang-19 llvm-19 bpftool libbpf-dev xdp-tools tcpdump iproute2 ethtool skopeo umoci
setup_bpffs
setup_venv test,bench

echo "== pytest"
set +e
.venv/bin/python -m pytest -q -ra "$@"
rc=$?
set -e
if [ $rc -eq 5 ]; then
  echo "pytest collected no tests: counting that as a failure" >&2
  exit 1
fi
exit $rc
