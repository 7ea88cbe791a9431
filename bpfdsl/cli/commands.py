"""The CLI's tables: exit codes and commands (module, one-line help), read by the parser
(:mod:`bpfdsl.cli`) and by every command module (``register`` takes its help from here,
``cmd_x`` returns the codes)."""

from __future__ import annotations

from typing import NamedTuple


class Command(NamedTuple):
    """One command: the module under ``bpfdsl.cli`` that registers it, its one-line help."""

    module: str
    help: str


OK, FAILED, USAGE, NO_PERMISSION = 0, 1, 2, 3
HOST = NO_PERMISSION

# The one exit-code table: code -> what it means (DiagnosticError.exit_code picks one).
EXIT_CODES: dict[int, str] = {
    OK: "success",
    FAILED: "refused: compile errors, a checker or verifier rejection, a refused operation",
    USAGE: "unusable input or usage: bad arguments, missing or corrupt files",
    HOST: "the host: missing privileges, no such interface, no bpffs",
}

# command -> (module under bpfdsl.cli, the one-line help `bpfdsl --help` shows).  Several
# commands may share a module; each module's register() takes the help from here.
COMMANDS: dict[str, Command] = {
    "compile": Command("compile_cmds", "compile a .bpfd program to an eBPF ELF object"),
    "disasm": Command("disasm_cmd", "disassemble an object per section, with source lines"),
    "check": Command("check_cmd", "static verifier-like check of a .bpfd or .o (no privileges)"),
    "load": Command(
        "load_cmds", "load an object into the kernel and pin it (≈ bpftool prog loadall)"
    ),
    "unload": Command("load_cmds", "remove everything pinned under a pin directory"),
    "attach": Command("attach_cmds", "attach an XDP program to an interface"),
    "detach": Command("attach_cmds", "detach XDP from an interface"),
    "show": Command("attach_cmds", "list what bpfdsl has loaded, pinned and attached"),
    "map": Command("map_cmds", "dump, lookup, update, delete map entries (BTF-typed)"),
    "events": Command(
        "events_cmd",
        "stream the records of a ringbuf or perf_event_array map (table, JSON, pcap)",
    ),
    "run": Command("run_cmds", "run a program on packets (BPF_PROG_TEST_RUN or the interpreter)"),
    "demo": Command("run_cmds", "the main job end to end on a veth pair in a temporary namespace"),
    "bench": Command(
        "bench_cmds", "benchmark a program under load (xdp, redirect, xsk, skmsg), tables and plots"
    ),
    "cpumap": Command(
        "entry_cmds", "set, delete, show cpumap entries (CPU, queue size, on-CPU program)"
    ),
    "devmap": Command(
        "entry_cmds", "set, delete, show devmap/devmap_hash entries (egress interface, program)"
    ),
    "progarray": Command("entry_cmds", "set, delete, show prog_array slots (tail call targets)"),
    "sockmap": Command("redirect_cmds", "attach/detach an sk_msg program to a sockmap/sockhash"),
    "skmsg": Command("redirect_cmds", "alias of sockmap"),
    "sockops": Command("redirect_cmds", "attach/detach a sock_ops program to a cgroup v2"),
    "image": Command(
        "image_cmds", "build bpfman bytecode images (OCI layout) and their Kubernetes resources"
    ),
    "apply": Command(
        "topology_cmds", "bring the system to a topology file's state (compile, load, attach, fill)"
    ),
    "status": Command("topology_cmds", "how the system differs from a topology file (drift)"),
    "down": Command("topology_cmds", "remove everything a topology file made"),
}


def command_help(name: str) -> str:
    """The one-line help of command ``name`` (:data:`COMMANDS`)."""
    return COMMANDS[name].help
