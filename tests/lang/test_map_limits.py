"""Map declarations meet the kernel's BPF_MAP_CREATE rules at compile time: what
``MAP_LIMITS`` refuses is a located error at the declaration, what it accepts loads.
The kernel tests hold the table to the running kernel: every flag of every map type, and
each boundary once at the limit (accepted) and once past it (refused by the kernel too)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.abi.flags import BPF_F_NO_PREALLOC
from bpfdsl.abi.map_types import _FLAG_NAMES, BTF_MAX_ENTRIES, MAP_LIMITS, PAGE_SIZE, MapType
from bpfdsl.compiler import compile_source
from bpfdsl.diagnostics import DiagnosticError
from bpfdsl.kernel import syscall
from bpfdsl.obj.collection import read_object

PROG = "xdp fn f(ctx) { return XDP_PASS }\n"
HASH_MAX = 1 << 27  # roundup_pow_of_two(max_entries) * 16-byte buckets <= U32_MAX


def src(*decls: str) -> str:
    return 'license "GPL"\n' + "".join(d + "\n" for d in decls) + PROG


def errors(text: str) -> list:
    with pytest.raises(DiagnosticError) as ei:
        compile_source(text, "m.bpfd")
    return ei.value.diagnostics


BIG = "struct big { a: [u64; 4096], b: u8 }"  # 32776 bytes: 8 over PCPU_MIN_UNIT_SIZE


def test_unknown_argument_suggests_the_known_one():
    (d,) = errors(src("map a: array<u32, u32>(max_entrie: 4)"))
    assert d.hints == ["did you mean `max_entries`?"]


@pytest.mark.parametrize(
    "kind,message",
    [
        ("stack_trace", "map kind `stack_trace` (BPF_MAP_TYPE_STACK_TRACE) is not supported "
         "by bpfdsl"),
        ("BPF_MAP_TYPE_QUEUE", "map kind `BPF_MAP_TYPE_QUEUE` (BPF_MAP_TYPE_QUEUE) is not "
         "supported by bpfdsl"),
    ],
)  # fmt: skip
def test_kernel_map_types_without_a_kind_are_named_not_matched(kind, message):
    (d,) = errors(src(f"map a: {kind}(max_entries: 4)"))
    assert (d.code, d.span.line, d.span.col, d.message) == ("unknown-map-kind", 2, 8, message)
    assert d.hints[0].startswith("map kinds: array, hash,")  # no did-you-mean `percpu_array`


@pytest.mark.parametrize("kind,hint", [("HASH", "write `hash`"), ("BPF_MAP_TYPE_LRU_HASH",
                         "write `lru_hash`"), ("hashmap", "did you mean `hash`?")])  # fmt: skip
def test_unknown_kind_hint_names_the_language_kind(kind, hint):
    (d,) = errors(src(f"map a: {kind}<u32, u32>(max_entries: 4)"))
    assert (d.code, d.hints) == ("unknown-map-kind", [hint])


# ---- the kernel ----

KIND_DECLS = {
    "array": "array<u32, u64>",
    "percpu_array": "percpu_array<u64>",
    "hash": "hash<u32, u64>",
    "percpu_hash": "percpu_hash<u32, u64>",
    "lru_hash": "lru_hash<u32, u64>",
    "lru_percpu_hash": "lru_percpu_hash<u32, u64>",
    "lpm_trie": "lpm_trie<ipv4_prefix, u8>",
    "devmap": "devmap",
    "devmap_hash": "devmap_hash",
    "cpumap": "cpumap",
    "xskmap": "xskmap",
    "sockmap": "sockmap",
    "sockhash": "sockhash<u32>",
}


def load(text: str):
    from bpfdsl.runtime.loader import load_collection

    return load_collection(read_object(compile_source(text, "m.bpfd").obj))


def create(map_type: int, key: int, value: int, n: int, flags: int = 0) -> int:
    """0 when BPF_MAP_CREATE accepts these attributes (the map is closed at once), else
    the errno."""
    try:
        syscall.map_create(map_type, key, value, n, map_flags=flags).close()
    except OSError as e:
        return e.errno
    return 0


@pytest.mark.kernel
def test_flag_table_is_the_kernels():
    """Each map type of MAP_LIMITS, each map flag alone: accepted exactly when the table
    says so (required flags added)."""
    wrong = []
    for mt, lim in MAP_LIMITS.items():
        key = 8 if mt == MapType.LPM_TRIE else lim.key_size[0] if lim.ring_pages else 4
        value = lim.value_size[0] if isinstance(lim.value_size, tuple) else 8
        n = PAGE_SIZE if lim.ring_pages else 1  # a ring of one page
        for bit, name in _FLAG_NAMES.items():
            accepted = create(mt, key, value, n, bit | lim.required) == 0
            if accepted != bool(lim.flags & bit):
                wrong.append(f"{mt.name} {name}: kernel {'accepts' if accepted else 'refuses'}")
        assert create(mt, key, value, n, lim.required) == 0, mt.name
    assert wrong == []


@pytest.mark.kernel
@pytest.mark.parametrize("kind", list(KIND_DECLS))
def test_no_prealloc_compiles_exactly_where_the_kernel_takes_it(kind):
    decl = f"map a: {KIND_DECLS[kind]}(max_entries: 4"
    try:
        compile_source(src(decl + ", no_prealloc: true)"), "m.bpfd")
    except DiagnosticError as e:
        assert [d.code for d in e.diagnostics] == ["map-limit"]
        m = read_object(compile_source(src(decl + ")"), "m.bpfd").obj).maps["a"]
        rc = create(m.map_type, m.key_size, m.value_size, 4, m.map_flags | BPF_F_NO_PREALLOC)
        assert rc in (errno.EINVAL, 524), (
            f"kernel took {kind} with BPF_F_NO_PREALLOC"
        )  # 524 ENOTSUPP
        return
    coll = load(src(decl + ", no_prealloc: true)"))
    try:
        info = syscall.map_info(coll.maps["a"].fd)
        assert info.map_flags & BPF_F_NO_PREALLOC
    finally:
        coll.close()


@pytest.mark.kernel
def test_max_entries_at_the_btf_limit_loads_and_one_more_is_refused_btf():
    """2**30 - 1 entries (an lpm_trie allocates nothing up front) load; the same BTF
    stating 2**30 (the array ``int (*max_entries)[N]`` reaches 4 GiB) is refused."""
    from bpfdsl.abi.btf.core import Kind

    text = src(f"map a: lpm_trie<ipv4_prefix, u8>(max_entries: {BTF_MAX_ENTRIES})")
    coll = load(text)
    try:
        assert syscall.map_info(coll.maps["a"].fd).max_entries == BTF_MAX_ENTRIES
    finally:
        coll.close()
    btf = read_object(compile_source(text, "m.bpfd").obj).btf
    (arr,) = [t for t in btf.types if t.kind == Kind.ARRAY and t.nelems == BTF_MAX_ENTRIES]
    syscall.btf_load(btf.to_bytes())[0].close()
    arr.nelems = BTF_MAX_ENTRIES + 1
    with pytest.raises(syscall.BpfError) as ei:
        syscall.btf_load(btf.to_bytes())
    assert "Array size overflows U32_MAX" in ei.value.log
    assert errors(text.replace(str(BTF_MAX_ENTRIES), str(BTF_MAX_ENTRIES + 1)))[0].code == (
        "map-args"
    )


def _memory_cgroup() -> Path | None:
    """A fresh memory cgroup (v1 memory controller or cgroup2 with memory) under the root,
    or None when there is none to make."""
    name = f"bpfdsl_test_{uuid.uuid4().hex[:8]}"
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        fstype, _src, opts = (right.split(" ") + ["", ""])[:3]
        mnt = Path(left.split(" ")[4])
        if fstype == "cgroup" and "memory" in opts.split(","):
            limit = "memory.limit_in_bytes"
        elif fstype == "cgroup2" and "memory" in (mnt / "cgroup.subtree_control").read_text():
            limit = "memory.max"
        else:
            continue
        cg = mnt / name
        cg.mkdir()
        (cg / limit).write_text(str(64 << 20))
        return cg
    return None


@pytest.mark.kernel
@pytest.mark.parametrize(
    "kind,refused", [("hash", errno.E2BIG), ("percpu_hash", errno.E2BIG),
                     ("lru_hash", errno.E2BIG), ("sockhash", errno.EINVAL)]
)  # fmt: skip
def test_hash_max_entries_at_the_limit_passes_the_kernels_rules(kind, refused):
    """2**27 entries compile, and the kernel's rules take them: in a 64 MiB memory cgroup
    the 2 GiB of buckets fail with ENOMEM, not the E2BIG/EINVAL of 2**27 + 1 (refused by
    the compiler too)."""
    flags = ", no_prealloc: true" if kind in ("hash", "percpu_hash") else ""
    decl = f"map a: {KIND_DECLS[kind]}(max_entries: {{}}{flags})"
    m = read_object(compile_source(src(decl.format(HASH_MAX)), "m.bpfd").obj).maps["a"]
    assert m.max_entries == HASH_MAX
    assert [d.code for d in errors(src(decl.format(HASH_MAX + 1)))] == ["map-limit"]
    assert create(m.map_type, m.key_size, m.value_size, HASH_MAX + 1, m.map_flags) == refused
    cg = _memory_cgroup()
    if cg is None:
        pytest.skip("no memory cgroup to bound the at-the-limit map")
    code = textwrap.dedent(f"""
        import os, sys
        open({str(cg / "cgroup.procs")!r}, "w").write(str(os.getpid()))
        from bpfdsl.kernel import syscall
        try:
            syscall.map_create({m.map_type}, {m.key_size}, {m.value_size}, {HASH_MAX},
                               map_flags={m.map_flags}).close()
            print(0)
        except OSError as e:
            print(e.errno)
    """)
    try:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, env=env)  # fmt: skip
    finally:
        cg.rmdir()
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) in (0, errno.ENOMEM)


@pytest.mark.kernel
def test_percpu_value_at_the_limit_loads_and_8_more_bytes_are_refused():
    coll = load(src("map a: percpu_array<[u64; 4096]>(max_entries: 1)",
                    "map b: percpu_hash<u32, [u64; 4096]>(max_entries: 1)"))  # fmt: skip
    try:
        assert coll.maps["a"].value_size == coll.maps["b"].value_size == 32768
    finally:
        coll.close()
    for decl in ("map a: percpu_array<big>(max_entries: 1)",
                 "map a: lru_percpu_hash<u32, big>(max_entries: 1)"):  # fmt: skip
        assert [d.code for d in errors(src(BIG, decl))] == ["map-limit"]
    for mt in (MapType.PERCPU_ARRAY, MapType.PERCPU_HASH, MapType.LRU_PERCPU_HASH):
        assert create(mt, 4, 32768 + 1, 1) == errno.E2BIG
