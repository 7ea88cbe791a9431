#!/usr/bin/env bash
# The main job end to end on a fresh machine (as root): installs what the demo needs,
# a .venv with bpfdsl, then `bpfdsl demo` (compile progs/xdp_udp_filter.bpfd, attach it
# to a veth pair in a temporary network namespace, send UDP packets, show the counters,
# remove everything).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
setup_system iproute2
setup_compiler
setup_bpffs
setup_venv
exec .venv/bin/bpfdsl demo "$@"
