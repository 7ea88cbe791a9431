"""Types of bpfdsl/runtime/_pcapwalk.c (the walk over a mapped pcap file; see that file)."""

from typing import Any

def walk(
    data: Any, pos: int, room: int, hdrsize: int, swap: bool, most: int, strict: bool
) -> tuple[int, bytes, bytes, bytes]: ...
