"""The minimal reproducers of the failure kinds the fuzz campaigns found and that are now
fixed, each asserting the behaviour a user gets: a located error with its code, the exit
status and message of the CLI, the verdict, or no pin left behind."""

from __future__ import annotations

import shutil

import pytest

from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError

from . import captures, cli_misuse, objects
from .harness import PCAPS, PROGS, Result, Sandbox

HEAD = 'license "GPL"\n'
PASS = "xdp fn f(ctx) { return XDP_PASS }\n"

_BOXES: dict[str, Sandbox] = {}  # one worker per fuzzer for this module (fixtures made once)


@pytest.fixture(scope="module", autouse=True)
def _workers():
    yield
    for box in _BOXES.values():
        box.close()
    _BOXES.clear()


def verdict(fuzzer, payload) -> Result:
    """The fuzzer's own oracle on ``payload``, in its sandbox (leak and pin checks)."""
    box = _BOXES.get(fuzzer.kind)
    if box is None:
        box = _BOXES[fuzzer.kind] = Sandbox(fuzzer.run_case, timeout=fuzzer.timeout)
    return box.run(payload)


def test_call_of_a_fn_defined_later(bpf_program) -> None:
    """A `fn` may call one defined further down (was: KeyError in codegen)."""
    src = (HEAD + "fn a() -> u32 { return b() }\nfn b() -> u32 { return 1 }\n"
           "xdp fn f(ctx) {\n    if a() == 1 { return XDP_DROP }\n    return XDP_PASS\n}\n")  # fmt: skip
    assert bpf_program(compile_source(src, "fwd.bpfd").obj).run(bytes(64)).verdict == "XDP_DROP"


BAD_SOURCES = [
    # (id, source, code, line, col, words in the message)
    ("long-local", HEAD + "xdp fn f(ctx) {\n    let " + "v" * 1100 + " = 1\n    return XDP_PASS\n}\n",
     "name-too-long", 3, 9, "1100 characters"),
    ("long-program-name", HEAD + "xdp fn " + "a" * 600 + "(ctx) { return XDP_PASS }\n",
     "name-too-long", 2, 8, "at most 512"),
    ("hex-no-digits", HEAD + "const X: u32 = 0x_\n" + PASS, "bad-literal", 2, 16, "'0x_'"),
    ("binary-no-digits", HEAD + "const X: u32 = 0b_\n" + PASS, "bad-literal", 2, 16, "'0b_'"),
    ("bad-utf8", HEAD + "// caf\udce9\n" + PASS, "bad-encoding", 2, 7, "byte 0xe9"),
    ("max-entries-2^30", HEAD + "map m: hash<u32, u32>(max_entries: 1073741824)\n"
     "xdp fn f(ctx) {\n    m[0] = 1\n    return XDP_PASS\n}\n", "map-args", 2, 36, "2**30 - 1"),
    ("array-no-prealloc", HEAD + "map m: array<u32, u32>(max_entries: 4, no_prealloc: 1)\n"
     "xdp fn f(ctx) {\n    m[0] = 1\n    return XDP_PASS\n}\n", "map-limit", 2, 53,
     "BPF_F_NO_PREALLOC"),
    ("percpu-value-32k", HEAD + "struct big { a: [u64; 4096], b: [u64; 1] }\n"
     "map m: percpu_array<u32, big>(max_entries: 1)\n" + PASS, "map-limit", 3, 26,
     "PCPU_MIN_UNIT_SIZE"),
]  # fmt: skip


@pytest.mark.parametrize("src,code,line,col,words", [pytest.param(*c[1:], id=c[0])
                                                     for c in BAD_SOURCES])  # fmt: skip
def test_bad_source_is_a_located_error(src, code, line, col, words) -> None:
    """Names longer than the kernel's BTF names (KSYM_NAME_LEN 512), malformed literals, a
    byte that is not UTF-8 (also in a ``str`` made with surrogateescape) and map
    declarations BPF_MAP_CREATE refuses: an error with its code at line:col, before LLVM
    or the kernel sees them."""
    with pytest.raises(DiagnosticError) as ei:
        compile_source(src, "bad.bpfd")
    d = ei.value.diagnostics[0]
    assert (d.code, d.span.line, d.span.col) == (code, line, col), d.concise()
    assert words in d.message
    assert "^" in ei.value.render()


@pytest.mark.parametrize(
    "argv,code",
    [
        pytest.param(["compile", "/dev/zero"], "unreadable-input", id="dev-zero"),
        *[pytest.param(a, "bad-args", marks=pytest.mark.kernel, id=f"key-{i}")
          for i, a in enumerate([
              ["devmap", "delete", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "-1"],
              ["devmap", "set", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "4294967296", "lo"],
              ["cpumap", "delete", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "4294967296"]])],
    ],
)  # fmt: skip
def test_cli_bad_argument_exit_2(argv: list[str], code: str) -> None:
    """`bpfdsl compile /dev/zero` (was: read without limit) and devmap/cpumap keys outside
    u32 (was: struct.error): exit status 2 with the error's code, nothing left behind."""
    res = verdict(cli_misuse.FUZZER, (argv, (2,), "root"))
    assert (res.outcome, res.detail) == ("exit-2", code), f"{res.signature}\n{res.text[-2000:]}"


def test_register_above_r10_is_refused() -> None:
    """An object whose instruction names r11 (a corrupted dst_reg nibble): check, disasm
    and the interpreter refuse it with an error (was: IndexError in the interpreter)."""
    from .api import compile_file

    base = compile_file(PROGS / "xdp_pass.bpfd").obj
    text = next(s for s in objects.sections(base) if s.type == 1 and s.flags & 4)
    res = verdict(objects.FUZZER, ("xdp_pass", base, [(text.offset + 1, b"\x0b")], False, False))
    assert res.outcome == "refused", f"{res.signature}\n{res.text[-2000:]}"


def test_record_over_65535_bytes_is_read_whole(tmp_path) -> None:
    """A BIG TCP capture (one 80,066-byte record): `bpfdsl run --pcap` reads it as one packet
    of its full length (was: truncated) and says why it skipped it."""
    data = (PCAPS / "bigtcp-ipv4.pcap").read_bytes()
    assert len(captures.records(data)[1]) == 1
    res = verdict(captures.FUZZER, ("bigtcp-ipv4.pcap", data, False, [], 1, None, "interp", False))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"
    obj = tmp_path / "udp.o"
    obj.write_bytes(captures.program_object())
    pcap = str(PCAPS / "bigtcp-ipv4.pcap")
    rc, out, err, _ = captures.run_cli(["run", str(obj), "--pcap", pcap, "--engine", "interp"])
    assert rc == 1 and "1 packet(s)" in out and "80066 bytes" in err, (rc, out, err)


@pytest.mark.kernel
def test_run_leaves_no_by_name_pins() -> None:
    """`bpfdsl run` (and load/unload) of an object with a map pinned by name
    (LIBBPF_PIN_BY_NAME): the fuzzer's pin check finds nothing left on bpffs."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    from support import objbuild

    base = objbuild.build("pinned_map").read_bytes()
    res = verdict(objects.FUZZER, ("pinned_map.c", base, [], True, False))
    assert res.outcome == "accepted", f"{res.signature}\n{res.text[-2000:]}"


@pytest.mark.kernel
def test_source_with_by_name_pin_loads_without_leaving_the_pin() -> None:
    """The sources fuzzer's kernel check of a program with a LIBBPF_PIN_BY_NAME map: the
    kernel accepts it and nothing stays on bpffs (the check loads with pinning=False; a
    real `bpfdsl load` keeps such pins, as libbpf does)."""
    from . import sources

    src = ("license \"GPL\" map seen_total:percpu_array<u64>(max_entries:1,pinning:LIBBPF_PIN_BY_NAME)"
           "xdp fn count(ctx){return XDP_PASS}")  # fmt: skip
    res = verdict(sources.FUZZER, (src, True))
    assert res.outcome == "ok", f"{res.signature}\n{res.text[-2000:]}"


def test_pcap_record_over_snaplen_reads_the_same_as_pcapng(tmp_path) -> None:
    """A pcap record longer than the file's snaplen (2,674 bytes, snaplen 1,024) is cut to
    the snapshot length, as libpcap reads it; the captures fuzzer's pcapng copy holds the
    same cut packet (it wrote an EPB over the IDB's snaplen, which ends libpcap's pcapng
    read: a wrong-count finding of the fuzzer, seed 25), and both read the same."""
    from bpfdsl.runtime.pcapfile import read_capture

    src = PCAPS / "bgp_mp_reach_nlri-oobr.pcap"
    data = src.read_bytes()
    ng = tmp_path / "copy.pcapng"
    ng.write_bytes(captures.to_pcapng(data))
    a, b = read_capture(src), read_capture(ng)
    assert [len(p.data) for p in a.records] == [len(p.data) for p in b.records] == [1024]
    assert a.records[0].data == b.records[0].data == data[40 : 40 + 1024]
    res = verdict(captures.FUZZER, (src.name, data, True, [], 1, None, "interp", False))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"
