"""Userspace BPF machine: run XDP and sk_msg programs without the kernel.

``load_object(obj)`` -> :class:`InterpCollection` (programs + in-memory maps);
``collection["prog"].run(frame)`` -> :class:`InterpResult`.  The ``bpfdsl run --engine
interp`` engine over it is ``bpfdsl.runtime.testrun.InterpEngine``.  Never imports the
compiler front or back end, nor the kernel side.
"""

from __future__ import annotations

from bpfdsl.interp.ctx import SkMsgContext, SockInfo, SockOpsContext, XdpContext
from bpfdsl.interp.machine import InterpError, Machine
from bpfdsl.interp.maps import Map, SlotMap, make_map
from bpfdsl.interp.program import InterpCollection, InterpProgram, InterpResult, load_object
from bpfdsl.interp.state import Env

__all__ = [
    "Env",
    "InterpCollection",
    "InterpError",
    "InterpProgram",
    "InterpResult",
    "Machine",
    "Map",
    "SkMsgContext",
    "SockInfo",
    "SlotMap",
    "SockOpsContext",
    "XdpContext",
    "load_object",
    "make_map",
]
