"""A `match` or `if` ladder big enough for a jump table compiles at every ``--mcpu`` into an
object the kernel (6.18) loads, with the right verdict per arm (issue 23, item 1).

LLVM 22 turns a dense ``switch`` of >= 13 cases into a jump table at ``-mcpu v4``: an
indirect ``gotox`` (BPF_JMP | BPF_JA | BPF_X, opcode 0x0d) through a ``.jumptables``
section, which needs the kernel's insn_array maps (6.19).  6.18's verifier does not know
the opcode, and bpfdsl's object reader refused it ("LLVM wrote an object bpfdsl cannot
read").  The back end turns every v4 extension bpfdsl does not emit off at the target
option level (bpfdsl.backend.target.ISA_EXTENSIONS); :func:`test_every_llvm_isa_option_is_decided`
fails when an LLVM brings a new one, so it is decided before bpfdsl compiles with it.
"""

from __future__ import annotations

import functools
import re
import struct

import pytest
from support.acl import VERDICTS, acl_source

from bpfdsl.abi.insn import decode
from bpfdsl.backend import llvm_c, target
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.obj.collection import read_object
from bpfdsl.obj.elf import ElfFile

XDP_DROP, XDP_PASS, XDP_TX = 1, 2, 3
ARMS = 64
RULES = 2000  # acl_source's default


def match_source(arms: int = ARMS) -> str:
    """``match ip.ttl`` with ``arms`` dense arms: arm i adds i + 1 to ``cnt[i % 4]`` and
    returns VERDICTS[i % 3]; any other TTL drops."""
    body = "\n".join(
        f"        {i} => {{ cnt[{i % 4}] += {i + 1}; return {VERDICTS[i % 3]} }}"
        for i in range(arms)
    )
    return f"""license "GPL"
map cnt: array<u64>(max_entries: 4)

xdp fn m(ctx) {{
    let eth = parse ethernet else {{ return XDP_PASS }}
    let ip = parse ipv4 else {{ return XDP_PASS }}
    match ip.ttl {{
{body}
        _ => return XDP_DROP,
    }}
    return XDP_PASS
}}
"""


def frame(ttl: int = 64, dport: int = 53) -> bytes:
    """Ethernet / IPv4 (TTL ``ttl``, UDP) / UDP to ``dport`` (host order), 64 bytes."""
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28, 0, 0, ttl, 17, 0, bytes([10, 0, 0, 1]),
                     bytes([10, 0, 0, 2]))  # fmt: skip
    udp = struct.pack("!HHHH", 4000, dport, 8, 0)
    pkt = b"\x02\x00\x00\x00\x00\x0b\x02\x00\x00\x00\x00\x0a\x08\x00" + ip + udp
    return pkt + bytes(64 - len(pkt))


@functools.cache
def compiled(kind: str, mcpu: str) -> bytes:
    """The object of ``kind`` ("match" or "acl") at ``mcpu``, compiled with the checker on
    (a checker error or an unfinished check fails here) -- except the ACL below v4, which
    the checker refuses (:func:`checker_refusal`): its object is compiled without."""
    src = match_source() if kind == "match" else acl_source()
    check = kind == "match" or mcpu == "v4"
    res = compile_source(src, f"{kind}.bpfd", mcpu=mcpu, check=check, check_timeout=None)
    assert not res.warnings, res.warnings
    return res.obj


def _opcodes(obj: bytes) -> set[int]:
    elf = ElfFile(obj)
    ops = set()
    for _name, sec, start, size in elf.functions():
        ops |= {x.opcode for x in decode(sec.data()[start : start + size])}
    return ops


@pytest.mark.parametrize("mcpu", target.MCPUS)
@pytest.mark.parametrize("kind", ["match", "acl"])
def test_no_jump_table_at_any_mcpu(kind: str, mcpu: str) -> None:
    """No ``gotox`` (0x0d) and no ``.jumptables`` section in the object, at every level the
    compiler accepts; its instructions all decode (the reader's view of the object)."""
    obj = compiled(kind, mcpu)
    assert 0x0D not in _opcodes(obj)
    assert ElfFile(obj).section_by_name(".jumptables") is None
    read_object(obj)


@pytest.mark.kernel
@pytest.mark.parametrize("mcpu", target.MCPUS)
def test_match_arms_give_their_verdicts_in_the_kernel(mcpu: str) -> None:
    """The 64-arm match loads (the kernel's verifier) and each arm, run with
    BPF_PROG_TEST_RUN, returns its verdict and adds its own amount to its counter."""
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    with load_collection(read_object(compiled("match", mcpu))) as coll:
        fd, cnt = coll.programs["m"].fd, coll.maps["cnt"].fd

        def counter(k: int) -> int:
            return struct.unpack("<Q", syscall.map_lookup(cnt, struct.pack("<I", k), 8))[0]

        for i in range(ARMS):
            before = counter(i % 4)
            assert syscall.prog_test_run(fd, frame(ttl=i)).retval == i % 3 + 1, (mcpu, i)
            assert counter(i % 4) - before == i + 1, (mcpu, i)
        assert syscall.prog_test_run(fd, frame(ttl=ARMS)).retval == XDP_DROP
        assert syscall.prog_test_run(fd, frame(ttl=255)).retval == XDP_DROP


# Below v4 the 2,000-rule ACL is one the kernel refuses after verifying it: inlining 2,000
# array-map lookups (do_misc_fixups, array_map_gen_lookup: 7 insns each) grows the program
# to ~35,000 insns and the goto from the last rules back to their common exit no longer
# fits its 16-bit offset ("insn N cannot be patched due to 16-bit range", bpf_adj_branches
# -ERANGE; the load fails with ENOMEM).  The checker models that rewrite (checker/fixups.py)
# and refuses the program at compile time with the kernel's words; at v4 LLVM writes long
# jumps as gotol (32-bit offset) and the program loads.
BELOW_V4 = [m for m in target.MCPUS if m != "v4"]
PATCH_MSG = re.compile(r"insn (\d+) cannot be patched due to 16-bit range")
ENOMEM = 12


@functools.cache
def checker_refusal(mcpu: str, rules: int = RULES) -> DiagnosticError | None:
    """The checker's error compiling the ``rules``-rule ACL at ``mcpu`` (None: accepted)."""
    try:
        compile_source(acl_source(rules), "acl.bpfd", mcpu=mcpu, check_timeout=None)
    except DiagnosticError as e:
        return e
    return None


@functools.cache
def kernel_refusal(mcpu: str, rules: int = RULES) -> str | None:
    """The kernel's reason for refusing the ``rules``-rule ACL compiled at ``mcpu`` with the
    checker off (None: it loads); the load's errno must be ENOMEM, as bpf_check returns
    when bpf_patch_insn_data fails."""
    from bpfdsl.runtime.loader import VerifierError, load_collection

    obj = compile_source(acl_source(rules), "acl.bpfd", mcpu=mcpu, check=False).obj
    try:
        with load_collection(read_object(obj)):
            return None
    except VerifierError as e:
        assert e.errno == ENOMEM, (e.errno, e.log[-500:])
        return e.log


@pytest.mark.parametrize("mcpu", BELOW_V4)
def test_acl_below_v4_is_refused_by_the_checker_with_the_kernels_reason(mcpu: str) -> None:
    """compile_source refuses the 2,000-rule ACL below v4 at a line of the ACL, with the
    kernel's message and a hint to compile with --mcpu v4."""
    err = checker_refusal(mcpu)
    assert err is not None
    (d,) = err.diagnostics
    assert PATCH_MSG.search(d.message), d.message
    text = err.render()
    assert "--mcpu v4" in text and "gotol" in text, text
    assert d.span is not None and d.span.line > 7  # one of the rules (acl.bpfd:8..)


@pytest.mark.kernel
@pytest.mark.parametrize("mcpu", BELOW_V4)
def test_acl_below_v4_is_refused_by_the_kernel_where_the_checker_says(mcpu: str) -> None:
    """Loaded with the checker off, the kernel refuses the ACL (ENOMEM) with "insn N cannot
    be patched due to 16-bit range" for the very insn N the checker named."""
    log = kernel_refusal(mcpu)
    assert log is not None
    kernel = PATCH_MSG.search(log)
    assert kernel is not None, log[-500:]
    err = checker_refusal(mcpu)
    assert err is not None
    checker = PATCH_MSG.search(err.diagnostics[0].message)
    assert checker is not None and checker.group(1) == kernel.group(1)


@pytest.mark.kernel
def test_acl_rules_give_their_verdicts_in_the_kernel() -> None:
    """At v4 the 2,000-rule ACL loads and its first, last and some middle rules decide
    (verdict and counter); ports outside the rules pass."""
    from bpfdsl.kernel import syscall
    from bpfdsl.runtime.loader import load_collection

    with load_collection(read_object(compiled("acl", "v4"))) as coll:
        fd, hits = coll.programs["acl"].fd, coll.maps["hits"].fd
        for k in (0, 1, 2, 13, 777, 1000, 1998, RULES - 1):
            key = struct.pack("<I", k % 64)
            before = struct.unpack("<Q", syscall.map_lookup(hits, key, 8))[0]
            assert syscall.prog_test_run(fd, frame(dport=1000 + k)).retval == k % 3 + 1
            after = struct.unpack("<Q", syscall.map_lookup(hits, key, 8))[0]
            assert after - before == k + 1, k
        for port in (999, 1000 + RULES, 53):
            assert syscall.prog_test_run(fd, frame(dport=port)).retval == XDP_PASS


@pytest.mark.kernel
def test_checker_and_kernel_agree_on_both_sides_of_the_patch_range_boundary() -> None:
    """The largest ACL the kernel loads at v3 (found by bisecting the rule count on the
    kernel) is accepted by the checker, and one rule more is refused by both."""
    lo, hi = 1000, RULES  # lo loads (17,000 insns rewritten), hi does not (the test above)
    assert kernel_refusal("v3", lo) is None and kernel_refusal("v3", hi) is not None
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if kernel_refusal("v3", mid) is None:
            lo = mid
        else:
            hi = mid
    assert checker_refusal("v3", lo) is None, (lo, checker_refusal("v3", lo))
    err = checker_refusal("v3", hi)
    assert err is not None, hi
    checker = PATCH_MSG.search(err.diagnostics[0].message)
    kernel = PATCH_MSG.search(kernel_refusal("v3", hi) or "")
    assert checker and kernel and checker.group(1) == kernel.group(1), (hi, err)


def test_every_llvm_isa_option_is_decided() -> None:
    """Each "Disable ... insn(s)" option description in the LLVM that llvmlite ships is an
    entry of ISA_EXTENSIONS (so a new LLVM's BPF extension cannot reach bpfdsl's reader
    undecided), and each entry's option exists in that LLVM (an unknown cl::opt makes LLVM
    exit the process)."""
    data = open(llvm_c.library_path(), "rb").read()
    found = {m.decode() for m in re.findall(rb"(?<=\0)(Disable [ -~]*? insns?)(?=\0)", data)}
    known = {e.desc for e in target.ISA_EXTENSIONS}
    other = {"Disable removal of sign-extend insn"}  # loongarch-disable-sextw-removal
    assert found - other == known
    for ext in target.ISA_EXTENSIONS:
        assert b"\0" + ext.option.encode() + b"\0" in data
    off = [e.option for e in target.ISA_EXTENSIONS if not e.emit]
    assert off == ["disable-gotox"]
