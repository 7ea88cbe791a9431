"""The minimal reproducer of every known failure kind (fuzz/known.py: other engineers are
fixing these right now), as ``xfail(strict=False)`` tests: each asserts the fuzzer's
verdict on its reproducer is no failure, so it XPASSes once the fix lands; the campaigns
(test_campaigns.py) report these kinds instead of failing on them."""

from __future__ import annotations

import shutil

import pytest

from . import captures, cli_misuse, objects, sources
from .harness import PCAPS, PROGS, Result, Sandbox
from .known import KNOWN

REASON = {k.name: f"known ({k.owner}): {k.reason}" for k in KNOWN}
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
    box = _BOXES.get(fuzzer.kind)
    if box is None:
        box = _BOXES[fuzzer.kind] = Sandbox(fuzzer.run_case, timeout=fuzzer.timeout)
    return box.run(payload)


def known(name: str, *marks):
    return pytest.mark.xfail(strict=False, reason=REASON[name]), *marks


SOURCES = [
    ("fn-forward-call", HEAD + "fn a() -> u32 { return b() }\nfn b() -> u32 { return 1 }\n"
     "xdp fn f(ctx) {\n    if a() == 1 { return XDP_DROP }\n    return XDP_PASS\n}\n", False),
    ("long-identifier", HEAD + "xdp fn f(ctx) {\n    let " + "v" * 1100 + " = 1\n    return XDP_PASS\n}\n",
     False),
    ("long-identifier", HEAD + "xdp fn " + "a" * 600 + "(ctx) { return XDP_PASS }\n", True),
    ("number-literal-0x_", HEAD + "const X: u32 = 0x_\n" + PASS, False),
    ("number-literal-0x_", HEAD + "const X: u32 = 0b_\n" + PASS, False),
    ("invalid-utf8", HEAD + "// caf\udce9\n" + PASS, False),
    ("map-declaration-limits", HEAD + "map m: hash<u32, u32>(max_entries: 1073741824)\n"
     "xdp fn f(ctx) {\n    m[0] = 1\n    return XDP_PASS\n}\n", True),
    ("map-declaration-limits", HEAD + "map m: array<u32, u32>(max_entries: 4, no_prealloc: 1)\n"
     "xdp fn f(ctx) {\n    m[0] = 1\n    return XDP_PASS\n}\n", True),
    ("map-declaration-limits", HEAD + "struct big { a: [u64; 4096], b: [u64; 1] }\n"
     "map m: percpu_array<u32, big>(max_entries: 1)\n" + PASS, True),
]  # fmt: skip


@pytest.mark.parametrize(
    "name,src,kernel",
    [
        pytest.param(n, s, k, marks=known(n, *([pytest.mark.kernel] if k else [])), id=f"{n}-{i}")
        for i, (n, s, k) in enumerate(SOURCES)
    ],
)
def test_known_source_fault(name: str, src: str, kernel: bool) -> None:
    res = verdict(sources.FUZZER, (src, kernel))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"


@pytest.mark.parametrize(
    "argv,codes",
    [
        pytest.param(["compile", "/dev/zero"], (2,), marks=known("compile-dev-zero"), id="dev-zero"),
        *[pytest.param(a, (1, 2), marks=known("cli-map-key-range", pytest.mark.kernel), id=f"key-{i}")
          for i, a in enumerate([
              ["devmap", "delete", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "-1"],
              ["devmap", "set", "/sys/fs/bpf/fz_devmap/maps/tx_ports", "4294967296", "lo"],
              ["cpumap", "delete", "/sys/fs/bpf/fz_cpumap/maps/cpu_map", "4294967296"]])],
    ],
)  # fmt: skip
def test_known_cli_fault(argv: list[str], codes: tuple[int, ...]) -> None:
    res = verdict(cli_misuse.FUZZER, (argv, codes, "root"))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"


@pytest.mark.xfail(strict=False, reason=REASON["interp-register-above-r10"])
def test_known_register_above_r10() -> None:
    from .api import compile_file

    base = compile_file(PROGS / "xdp_pass.bpfd").obj
    text = next(s for s in objects.sections(base) if s.type == 1 and s.flags & 4)
    res = verdict(objects.FUZZER, ("xdp_pass", base, [(text.offset + 1, b"\x0b")], False, False))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"


@pytest.mark.xfail(strict=False, reason=REASON["pcap-records-over-65535"])
def test_known_big_records() -> None:
    data = (PCAPS / "bigtcp-ipv4.pcap").read_bytes()
    n = len(captures.records(data)[1])
    res = verdict(captures.FUZZER, ("bigtcp-ipv4.pcap", data, False, [], n, None, "interp", False))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"


@pytest.mark.kernel
@pytest.mark.xfail(strict=False, reason=REASON["run-leaves-by-name-pins"])
def test_known_run_leaves_by_name_pins() -> None:
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    from support import objbuild

    base = objbuild.build("pinned_map").read_bytes()
    res = verdict(objects.FUZZER, ("pinned_map.c", base, [], True, False))
    assert not res.failed, f"{res.signature}\n{res.text[-2000:]}"
