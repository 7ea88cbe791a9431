#!/usr/bin/env bash
# The main job end to end on a fresh machine (as root): installs what the demo needs,
# a .venv with bpfdsl, then `bpfdsl demo` (compile progs/xdp_udp_filter.bpfd, attach it
# to a veth pair in a temporary network namespace, send UDP packets, show the counters,
# remove everything).  The demo checks one small program: the checker stays pure Python
# here (no ~1 minute mypyc build; BPFDSL_COMPILE=1 scripts/demo.sh compiles it anyway, and
# a venv that scripts/test.sh compiled keeps its compiled checker).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/setup.sh
setup_system iproute2
setup_bpffs
BPFDSL_COMPILE=${BPFDSL_COMPILE:-0} setup_venv
exec .venv/bin/bpfdsl demo "$@"
