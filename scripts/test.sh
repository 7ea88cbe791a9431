#!/usr/bin/env bash
# Run the bpfdsl test suite from a fresh machine: installs the system packages the tests
# use (Debian/Ubuntu, as root), a virtualenv with bpfdsl and its test extras, then pytest.
# Extra arguments go to pytest, e.g. `scripts/test.sh -k loader -x`.
# Kernel tests need root; set BPFDSL_REQUIRE_KERNEL=1 to make their skips failures (CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

PKGS=(clang-19 llvm-19 bpftool libbpf-dev xdp-tools tcpdump iproute2 ethtool)
missing=()
for p in "${PKGS[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "== note: missing system packages (${missing[*]}); tests that need them will skip" >&2
  fi
fi

if [ "$(id -u)" = 0 ] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
  mount -t bpf bpf /sys/fs/bpf || true
fi

PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  echo "== creating .venv"
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'

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
