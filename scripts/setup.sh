#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh (sourced, not run):
#   setup_system PKG...   install missing Debian packages (as root, apt-get)
#   setup_compiler        gcc and the Python headers, so setup_venv compiles the checker
#   setup_venv [EXTRAS]   create .venv and install bpfdsl into it (editable); with a C
#                         compiler and the Python headers the checker is compiled by mypyc
#                         (BPFDSL_COMPILE=1, exported for the tests; BPFDSL_COMPILE=0
#                         before the call installs pure Python)
#   setup_bpffs           mount bpffs at /sys/fs/bpf if it is not mounted (as bpftool does)
setup_system() {
  local missing=() p
  for p in "$@"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing system packages: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "== note: missing system packages (${missing[*]}); run as root to install them" >&2
  fi
}

# gcc and the headers of the Python the venv is made from (Debian's python3: python3-dev).
setup_compiler() {
  local py=${PYTHON:-python3}
  if [ "$(command -v "$py")" = /usr/bin/python3 ]; then
    setup_system gcc python3-dev
  fi
}

# Whether this machine can build the compiled checker: a C compiler and Python.h of the venv's
# Python (the headers live with the base interpreter).
can_compile() {
  command -v "${CC:-gcc}" >/dev/null 2>&1 || return 1
  .venv/bin/python -c 'import os, sys, sysconfig
sys.exit(not os.path.isfile(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}

setup_venv() {
  local extras=${1:-}
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    "${PYTHON:-python3}" -m venv .venv
  fi
  # editable installs of a pyproject.toml project need pip >= 21.3 (PEP 660); a newer pip
  # is fetched only for an older one (the upgrade costs seconds on every first run)
  if ! .venv/bin/python -c 'import sys, pip; sys.exit(tuple(map(int, pip.__version__.split(".")[:2])) < (21, 3))' 2>/dev/null; then
    .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  fi
  if [ "${BPFDSL_COMPILE:-}" != 0 ] && can_compile; then
    export BPFDSL_COMPILE=1
    # An editable install leaves the build in the work tree: rebuilt (about 2 minutes) only
    # when a checker source changed since (bpfdsl/checker/native.py compares the stamp).
    if .venv/bin/python -c 'import sys, bpfdsl.checker.native as n; sys.exit(not n.NATIVE)' \
      2>/dev/null; then
      echo "== checker: compiled build up to date"
      BPFDSL_COMPILE=0 .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    else
      echo "== checker: compiling with mypyc"
      .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
    fi
  else
    [ "${BPFDSL_COMPILE:-}" = 0 ] || echo "== note: no C compiler or Python headers: the checker stays pure Python (slower)" >&2
    BPFDSL_COMPILE=0 .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  fi
  .venv/bin/python -c 'import bpfdsl.checker as c; print("== checker:", c.NATIVE_REASON if c.NATIVE else f"pure Python ({c.NATIVE_REASON})")'
  # An editable install is not byte-compiled by pip; with PYTHONDONTWRITEBYTECODE set every
  # process would compile the package (the generated parser tables alone take ~0.2 s).
  .venv/bin/python -m compileall -q bpfdsl >/dev/null
}

setup_bpffs() {
  if [ "$(id -u)" = 0 ] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
    mount -t bpf bpf /sys/fs/bpf || true
  fi
}
