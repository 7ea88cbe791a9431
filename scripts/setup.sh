#!/usr/bin/env bash
# Shared set-up for scripts/demo.sh and scripts/test.sh (sourced, not run):
#   setup_system PKG...   install missing Debian packages (as root, apt-get)
#   setup_venv [EXTRAS]   create .venv and install bpfdsl into it (editable)
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

setup_venv() {
  local extras=${1:-}
  if [ ! -x .venv/bin/python ]; then
    echo "== creating .venv"
    "${PYTHON:-python3}" -m venv .venv
  fi
  .venv/bin/python -m pip install -q --upgrade pip >/dev/null
  .venv/bin/python -m pip install -q -e ".${extras:+[$extras]}"
  # An editable install is not byte-compiled by pip; with PYTHONDONTWRITEBYTECODE set every
  # process would compile the package (the generated parser tables alone take ~0.2 s).
  .venv/bin/python -m compileall -q bpfdsl >/dev/null
}

setup_bpffs() {
  if [ "$(id -u)" = 0 ] && ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
    mount -t bpf bpf /sys/fs/bpf || true
  fi
}
