"""Found by tests/fuzz/sources.py: a loop body with ~100 `parse` statements compiled to code
the verifier refused although every access is behind a `parse`, for two reasons:
CodeGenPrepare stops sinking the address ctx + 4 (data_end) into its loads past 100 users
(so one register held ctx + 4: "dereference of modified ctx ptr"), and after the loop GVN
reused the loop's last data_end load through an i32 phi whose zero-extension became a
32-bit mov (the pointer turned scalar: "R2 offset is outside of the packet").  Fixed in
backend/target.py (-cgp-max-address-users-to-scan) and codegen (data_end reloaded after a
loop); the programs load and give the verdict on both engines."""

from __future__ import annotations

import pytest

from bpfdsl.compiler import compile_source


def program(n: int) -> str:
    tags = "        let tag = parse vlan else { return XDP_PASS }\n" * n
    return (
        'license "GPL"\nxdp fn untag(ctx) {\n'
        "    let eth = parse ethernet else { return XDP_PASS }\n"
        "    let proto = eth.h_proto\n"
        "    for i in 0..2 {\n"
        "        if proto != ETH_P_8021Q && proto != ETH_P_8021AD { break }\n"
        f"{tags}"
        "        proto = tag.h_vlan_encapsulated_proto\n"
        "    }\n"
        "    if proto != ETH_P_IP { return XDP_PASS }\n"
        "    let ip = parse ipv4 else { return XDP_PASS }\n"
        "    if ip.ttl == 0 { return XDP_DROP }\n"
        "    return XDP_PASS\n}\n"
    )


@pytest.mark.parametrize("n", [90, 100, 250])
def test_many_parses_in_a_loop_load(bpf_program, n: int) -> None:
    prog = bpf_program(compile_source(program(n), f"vlan{n}.bpfd").obj)
    frame = bytes(12) + b"\x08\x00" + bytes([0x45]) + bytes(7) + b"\x00" + bytes(11)
    assert prog.run(frame).verdict == "XDP_DROP"  # IPv4 with ttl 0
    frame = bytes(12) + b"\x08\x00" + bytes([0x45]) + bytes(7) + b"\x05" + bytes(11)
    assert prog.run(frame).verdict == "XDP_PASS"  # ttl 5


@pytest.mark.parametrize("n", [100, 250])
def test_many_parses_in_a_loop_walk_the_tags(bpf_program, n: int) -> None:
    """A frame with ``n`` VLAN tags (802.1Q) before IPv4: the loop's parses walk all of them
    and the IPv4 header after them is read (ttl 0: XDP_DROP; ttl 5: XDP_PASS)."""
    prog = bpf_program(compile_source(program(n), f"vlan{n}.bpfd").obj)
    tags = b"\x81\x00" + b"\x00\x01\x08\x00" * n
    for ttl, verdict in ((0, "XDP_DROP"), (5, "XDP_PASS")):
        ip = bytes([0x45]) + bytes(7) + bytes([ttl]) + bytes(11)
        assert prog.run(bytes(12) + tags + ip).verdict == verdict
