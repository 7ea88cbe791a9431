"""Kernel helpers with typed arguments: ``fib_lookup``, ``csum_diff``, ``xdp_get_buff_len``,
``ktime_get_boot_ns`` and ``bpf_NAME(...)``.  The struct and numbers are the running
kernel's (BTF); the kernel accepts what the compiler accepts and refuses what it refuses
(``helper-not-allowed`` agrees with the kernel's ``*_func_proto``); both engines compute the
same values; the interpreter's fib_lookup answers from ``Env.fib_routes``."""

from __future__ import annotations

import errno
import struct
from pathlib import Path

import pytest
from support.vmlinux import VMLINUX, kernel_enums

from bpfdsl.abi import insn as I
from bpfdsl.abi.btf.core import Kind, parse_btf
from bpfdsl.abi.fib import BPF_FIB_LOOKUP_SIZE, FIB_LOOKUP_FIELDS, FibLookupFlag, FibResult
from bpfdsl.abi.helpers import HELPERS
from bpfdsl.abi.prog_types import ProgramType
from bpfdsl.compiler import compile_source
from bpfdsl.interp import InterpCollection
from bpfdsl.interp.state import FibRoute
from bpfdsl.kernel import syscall as S
from bpfdsl.obj.collection import read_object


def _members(btf, tid: int, base: int = 0) -> dict[str, tuple[int, int]]:
    """name -> (byte offset, byte size) of a struct's members, anonymous unions flattened."""
    out: dict[str, tuple[int, int]] = {}
    for m in btf.resolve(tid).members:
        off = base + m.bit_offset // 8
        if not m.name:
            out.update(_members(btf, m.type, off))
        else:
            out[m.name] = (off, btf.size_of(m.type))
    return out


@pytest.mark.kernel
def test_fib_lookup_layout_is_the_kernels() -> None:
    if not VMLINUX.exists():
        pytest.skip("no /sys/kernel/btf/vmlinux")
    btf = parse_btf(VMLINUX.read_bytes())
    st = btf.find("bpf_fib_lookup", Kind.STRUCT)
    assert st is not None and st.size == BPF_FIB_LOOKUP_SIZE
    ours = {name: (off, size) for name, off, size, _kind in FIB_LOOKUP_FIELDS}
    assert ours == _members(btf, st.id)


@pytest.mark.kernel
def test_fib_flags_and_results_are_the_kernels() -> None:
    k = kernel_enums()
    for f in FibLookupFlag:
        assert k[f"BPF_FIB_LOOKUP_{f.name}"] == f.value
    for r in FibResult:
        assert k[f"BPF_FIB_LKUP_RET_{r.name}"] == r.value


HELPERS_SRC = """license "GPL"
map out: array<u32, u64>(max_entries: 8)
xdp fn probe(ctx) {
    let eth = parse ethernet else { return XDP_PASS }
    if eth.h_proto != ETH_P_IPV6 { return XDP_PASS }
    let ip6 = parse ipv6 else { return XDP_PASS }
    out[0] = xdp_get_buff_len() as u64
    out[1] = csum_diff(ip6.saddr, ip6.daddr, 0) as u64      // header bytes
    out[2] = csum_diff(be32(0x01020304), ip6.daddr, 7) as u64 // a scalar on the stack
    out[3] = bpf_get_numa_node_id() as u64
    let fib = bpf_fib_lookup(family: AF_INET6, ipv6_src: ip6.saddr, ipv6_dst: ip6.daddr,
                             ifindex: ctx.ingress_ifindex)
    out[4] = fib_lookup(fib, 64 - 64) as u64
    out[5] = fib_lookup(fib, ktime_get_ns() & 64) as u64 // run-time flags (0 or -EINVAL)
    if ktime_get_boot_ns() == 0 { return XDP_DROP }
    return XDP_PASS
}
"""


def _frame() -> bytes:
    from scapy.layers.inet import UDP
    from scapy.layers.inet6 import IPv6
    from scapy.layers.l2 import Ether

    return bytes(Ether() / IPv6(src="2001:db8::1", dst="2001:db8:5::9") / UDP() / (b"x" * 30))


def test_helpers_run(bpf_program) -> None:
    """On each engine: the frame's length, non-zero sums, NUMA node 0, fib_lookup answers
    (a number >= 0 from the kernel's FIB, NOT_FWDED in the interpreter) and ktime."""
    prog = bpf_program(compile_source(HELPERS_SRC, "h.bpfd").obj)
    frame = _frame()
    assert prog.run(frame).verdict == "XDP_PASS"
    out = prog.maps["out"]
    assert out.lookup(0) == len(frame)
    assert out.lookup(1) != 0 and out.lookup(2) != 0
    assert out.lookup(3) == 0
    assert 0 <= out.lookup(4) <= max(FibResult)


@pytest.mark.kernel
def test_helpers_same_values_kernel_and_interp() -> None:
    """csum_diff over header bytes and over a stacked scalar, xdp_get_buff_len and the
    NUMA node: the interpreter computes the kernel's numbers, frame by frame."""
    from bpfdsl.testing.pytest_plugin import BpfProgram, load_spec

    spec = load_spec(compile_source(HELPERS_SRC, "h.bpfd").obj)
    engines = [BpfProgram(e, spec, "probe", None) for e in ("interp", "kernel")]
    try:
        for n in (0, 1, 7, 200):
            frame = _frame() + bytes(range(n % 256))[:n]
            got = []
            for p in engines:
                p.run(frame)
                got.append([p.maps["out"].lookup(k) for k in range(4)])
            assert got[0] == got[1], (n, got)
    finally:
        for p in engines:
            p.close()


def _interp(src: str, routes: list[FibRoute]):
    coll = InterpCollection(read_object(compile_source(src, "f.bpfd").obj), ncpus=1)
    coll.env.fib_routes[:] = routes
    return coll


ROUTER = Path(__file__).resolve().parents[2] / "progs" / "xdp_router.bpfd"


def test_interp_fib_lookup_without_routes_is_not_forwarded() -> None:
    coll = _interp(HELPERS_SRC, [])
    coll.programs["probe"].run(_frame())
    out = coll.maps["out"]
    v = out.lookup(struct.pack("<I", 4))
    assert v is not None and int.from_bytes(bytes(v.buf[:8]), "little") == FibResult.NOT_FWDED


def test_interp_router_uses_the_preloaded_route() -> None:
    """xdp_router in the interpreter with a route for 10.2.0.0/24 out of ifindex 3: the TTL
    goes down, the MACs are the route's and the frame is redirected through tx_ports."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    smac, dmac = bytes.fromhex("020000000003"), bytes.fromhex("020000000004")
    coll = InterpCollection(read_object(compile_source(ROUTER.read_text(), str(ROUTER)).obj))
    coll.env.fib_routes.append(FibRoute("10.2.0.0/24", 3, smac, dmac))
    coll.maps["tx_ports"].update(struct.pack("<I", 3), struct.pack("<Ii", 3, 0), 0)
    frame = bytes(Ether() / IP(src="10.1.0.2", dst="10.2.0.2", ttl=9) / UDP())
    r = coll.programs["xdp_router"].run(frame)
    assert r.retval == 4  # XDP_REDIRECT
    p = Ether(r.data_out)
    assert (bytes.fromhex(p.src.replace(":", "")), bytes.fromhex(p.dst.replace(":", ""))) == (
        smac,
        dmac,
    )
    assert p[IP].ttl == 8
    sent = p[IP].chksum
    p[IP].chksum = None
    assert IP(bytes(p[IP])).chksum == sent
    # no route: the stack gets it, unchanged
    r = coll.programs["xdp_router"].run(bytes(Ether() / IP(dst="10.9.0.1") / UDP()))
    assert r.retval == 2 and r.data_out == bytes(Ether() / IP(dst="10.9.0.1") / UDP())


def _call_only(helper: str) -> bytes:
    """r0 = bpf_<helper>(ctx); r0 = 0; exit."""
    return I.encode(
        [
            I.Insn(0x85, 0, 0, 0, HELPERS[helper].id),  # call helper
            I.mov64_imm(0, 0),
            I.Insn(0x95, 0, 0, 0, 0),  # exit
        ]
    )


@pytest.mark.kernel
def test_helper_availability_agrees_with_the_kernel() -> None:
    """bpf_get_socket_cookie: refused by sema in XDP (helper-not-allowed) and by the kernel
    (xdp_func_proto has no such helper); accepted in sock_ops by both."""
    from bpfdsl.diagnostics import DiagnosticError

    with pytest.raises(DiagnosticError) as ei:
        compile_source(
            'license "GPL"\nxdp fn f(ctx) { bpf_get_socket_cookie()\n return XDP_PASS }\n', "x"
        )
    assert [d.code for d in ei.value.diagnostics] == ["helper-not-allowed"]
    with pytest.raises(S.BpfError) as ke:
        S.prog_load(ProgramType.XDP, _call_only("get_socket_cookie"), "GPL")
    assert ke.value.errno == errno.EINVAL and "get_socket_cookie" in ke.value.log
    ok = compile_source(
        'license "GPL"\nmap out: array<u32, u64>(max_entries: 1)\n'
        "sock_ops fn f(skops) { out[0] = bpf_get_socket_cookie()\n return 1 }\n",
        "s",
    )
    from bpfdsl.runtime.loader import load_collection

    with load_collection(read_object(ok.obj)) as coll:
        assert "f" in coll.programs
