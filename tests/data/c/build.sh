#!/usr/bin/env bash
# Build every libbpf-style C reference program / compat fixture in this directory with
#   clang-19 -O2 -g -target bpf -c
# into a build directory (default: tests/data/c/build, never committed).  Fails loudly: the
# first compile error stops the script with a non-zero exit status and names the file.
# Usage: tests/data/c/build.sh [OUT_DIR]          CLANG=clang-19 to pick another compiler.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/build}"
clang="${CLANG:-clang-19}"
command -v "$clang" >/dev/null || { echo "build.sh: $clang not found (apt-get install clang-19)" >&2; exit 1; }
mkdir -p "$out"
# Debian's libbpf-dev puts bpf_helpers.h in /usr/include/bpf; asm/ types live in the
# multiarch include directory, which -target bpf does not search by itself.
arch_inc="/usr/include/$(uname -m)-linux-gnu"
if command -v gcc >/dev/null; then arch_inc="/usr/include/$(gcc -dumpmachine)"; fi
n=0
for src in "$here"/*.c; do
  obj="$out/$(basename "${src%.c}").o"
  if ! "$clang" -O2 -g -target bpf -Wall -Werror -I"$arch_inc" -c "$src" -o "$obj"; then
    echo "build.sh: FAILED to compile $src" >&2
    exit 1
  fi
  n=$((n + 1))
done
echo "build.sh: built $n objects in $out"
