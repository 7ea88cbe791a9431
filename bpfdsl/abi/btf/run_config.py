"""libxdp's run config: where an XDP program sits in a dispatcher chain, in BTF.

libxdp (xdp-tools lib/libxdp/libxdp.c, ``xdp_program__parse_btf``; the macro is
``XDP_RUN_CONFIG`` of headers/xdp/xdp_helpers.h) reads, for a program ``NAME``, the
variable ``_NAME`` of the DATASEC ``.xdp_run_config``: a struct written like a BTF map
definition, one ``__uint(member, value)`` (a member of type ``int (*)[value]``) each::

    struct {
        __uint(priority, 10);
        __uint(XDP_PASS, 1);
        __uint(XDP_DROP, 1);
    } XDP_RUN_CONFIG(NAME);

``priority`` orders the programs of one interface (lower runs first); a member named after
an XDP action with a non-zero value makes the dispatcher call the next program when this
one returns that action (a zero value turns it off).  Without the variable, libxdp uses
priority 50 and chain-call on XDP_PASS only.  The BTF is loaded with the program, so
``xdp-loader status`` reads it back from the kernel too.
"""

from __future__ import annotations

from dataclasses import dataclass

from bpfdsl.abi.btf.core import Btf, Kind

RUN_CONFIG_SECTION = ".xdp_run_config"  # libxdp XDP_RUN_CONFIG_SEC
DEFAULT_RUN_PRIO = 50  # libxdp XDP_DEFAULT_RUN_PRIO
DEFAULT_CHAIN_CALL_ACTIONS: tuple[str, ...] = ("XDP_PASS",)  # XDP_DEFAULT_CHAIN_CALL_ACTIONS
# the action names libxdp's get_xdp_action accepts as members, in enum xdp_action order
ACTION_MEMBERS: tuple[str, ...] = ("XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT")


def run_config_var(prog_name: str) -> str:
    """The variable libxdp looks for: ``_`` + the program (function) name."""
    return f"_{prog_name}"


@dataclass(frozen=True, slots=True)
class RunConfig:
    """A program's place in a libxdp dispatcher chain.

    ``priority``: libxdp's run priority (lower runs first; ties in program-name order).
    ``chain_call``: the XDP action names (``XDP_PASS``...) on which the dispatcher goes on
    to the next program; on any other action it returns that action."""

    priority: int = DEFAULT_RUN_PRIO
    chain_call: tuple[str, ...] = DEFAULT_CHAIN_CALL_ACTIONS

    def members(self) -> list[tuple[str, int]]:
        """The struct's ``__uint`` members as written: ``priority`` then every action
        with 1 (chain-call) or 0 (stop), so libxdp's default XDP_PASS is never implied."""
        return [("priority", self.priority)] + [
            (a, 1 if a in self.chain_call else 0) for a in ACTION_MEMBERS
        ]


def read_run_config(btf: Btf, prog_name: str) -> RunConfig | None:
    """The run config ``btf`` gives program ``prog_name`` as libxdp reads it (members in
    any order, actions not named keep libxdp's default), or None when ``btf`` has none
    (libxdp then uses :data:`DEFAULT_RUN_PRIO` and XDP_PASS)."""
    var = btf.find(run_config_var(prog_name), Kind.VAR)
    if var is None:
        return None
    st = btf.resolve(var.type)
    if st.kind != Kind.STRUCT:
        return None
    prio = DEFAULT_RUN_PRIO
    chain = set(DEFAULT_CHAIN_CALL_ACTIONS)
    for m in st.members:
        ptr = btf.resolve(m.type)
        if ptr.kind != Kind.PTR:
            return None
        arr = btf.resolve(ptr.type)
        if arr.kind != Kind.ARRAY:
            return None
        n = arr.nelems
        if m.name == "priority":
            prio = n
        elif m.name in ACTION_MEMBERS:
            if n:
                chain.add(m.name)
            else:
                chain.discard(m.name)
    return RunConfig(prio, tuple(a for a in ACTION_MEMBERS if a in chain))
