"""bpfdsl.backend.debuginfo + bpfdsl.backend.target: hand-built llvmlite modules -> objects that carry the BTF
libbpf, bpftool, iproute2 and the kernel expect (checked with bpftool, pyelftools, bpf(2)).

The reference shapes are clang-19's for the same C (docs/internals-btf.md).  Kernel tests
pin under unique /sys/fs/bpf directories and remove them in ``finally``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import struct
import subprocess
import uuid
from io import BytesIO
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from llvmlite import ir
from support.llvm_modules import (
    BPF_F_NO_PREALLOC,
    I8,
    I32,
    PTR,
    btf_types,
    build_maps_module,
    build_pass_module,
    build_sock_module,
)

from bpfdsl.abi.map_types import MapType
from bpfdsl.backend.debuginfo import DebugInfo, load_config
from bpfdsl.backend.target import emit, emit_object, optimize, parse, target_machine

HAVE_BPFTOOL = shutil.which("bpftool") is not None
needs_bpftool = pytest.mark.skipif(not HAVE_BPFTOOL, reason="bpftool not installed")


# ---- independent readers (bpftool JSON, pyelftools, a .BTF.ext walk per linux/btf.h) ------


def resolve(types: dict[int, dict], tid: int) -> dict:
    return types[tid]


def elf_sections(obj: bytes) -> dict[str, bytes]:
    elf = ELFFile(BytesIO(obj))
    return {s.name: s.data() for s in elf.iter_sections()}


def elf_symbols(obj: bytes) -> dict[str, tuple[str, int]]:
    elf = ELFFile(BytesIO(obj))
    names = [s.name for s in elf.iter_sections()]
    out = {}
    for sym in elf.get_section_by_name(".symtab").iter_symbols():
        if isinstance(sym["st_shndx"], int) and sym.name:
            out[sym.name] = (names[sym["st_shndx"]], sym["st_value"])
    return out


def line_info(obj: bytes) -> dict[str, list[tuple[int, str, int, int]]]:
    """``.BTF.ext`` line info: section -> [(insn byte offset, file name, line, col)]."""
    secs = elf_sections(obj)
    btf, ext = secs[".BTF"], secs[".BTF.ext"]
    hdr_len, _t_off, _t_len, s_off, _s_len = struct.unpack_from("<IIIII", btf, 4)
    strs = btf[hdr_len + s_off :]

    def s(off: int) -> str:
        return strs[off : strs.index(b"\0", off)].decode()

    magic, _ver, _flags, ehdr = struct.unpack_from("<HBBI", ext, 0)
    assert magic == 0xEB9F
    _fo, _fl, lo, ll = struct.unpack_from("<IIII", ext, 8)
    pos, end = ehdr + lo, ehdr + lo + ll
    rec_size = struct.unpack_from("<I", ext, pos)[0]
    pos += 4
    out: dict[str, list] = {}
    while pos < end:
        sec_off, n = struct.unpack_from("<II", ext, pos)
        pos += 8
        recs = out.setdefault(s(sec_off), [])
        for _ in range(n):
            insn_off, file_off, _line_off, lc = struct.unpack_from("<IIII", ext, pos)
            recs.append((insn_off, s(file_off), lc >> 10, lc & 0x3FF))
            pos += rec_size
    return out


# ---- tests: types and layout -------------------------------------------------------------


@needs_bpftool
def test_emit_btf_func_records_with_ctx_param(tmp_path: Path) -> None:
    types = btf_types(emit_object(build_maps_module()), tmp_path)
    funcs = [t for t in types.values() if t["kind"] == "FUNC"]
    assert [f["name"] for f in funcs] == ["filter"]
    proto = types[funcs[0]["type_id"]]
    assert proto["kind"] == "FUNC_PROTO" and proto["params"][0]["name"] == "ctx"
    assert types[proto["ret_type_id"]]["name"] == "int"
    ptr = types[proto["params"][0]["type_id"]]
    ctx = types[ptr["type_id"]]
    assert (ptr["kind"], ctx["kind"], ctx["name"], ctx["size"]) == ("PTR", "STRUCT", "xdp_md", 24)


def _map_structs(types: dict[int, dict]) -> dict[str, dict[str, object]]:
    """DATASEC .maps -> {map name: {member: int value | pointee type dict}} (libbpf rules)."""
    (maps,) = [t for t in types.values() if t["kind"] == "DATASEC" and t["name"] == ".maps"]
    out = {}
    for v in maps["vars"]:
        var = types[v["type_id"]]
        st = types[var["type_id"]]
        assert st["kind"] == "STRUCT" and st["name"] == "(anon)"
        members = {}
        for mem in st["members"]:
            ptr = types[mem["type_id"]]
            assert ptr["kind"] == "PTR", mem
            target = types[ptr["type_id"]]
            # __uint(name, val): int (*name)[val]; __type(name, T): T *name
            is_uint = target["kind"] == "ARRAY" and types[target["type_id"]]["name"] == "int"
            members[mem["name"]] = target["nr_elems"] if is_uint else target
        out[var["name"]] = members
    return out


@needs_bpftool
def test_emit_maps_datasec_one_var_per_map_in_libbpf_shape(tmp_path: Path) -> None:
    types = btf_types(emit_object(build_maps_module()), tmp_path)
    maps = _map_structs(types)
    assert list(maps) == ["counts", "drops", "block", "cpus"]
    counts = maps["counts"]
    assert counts["type"] == MapType.HASH and counts["max_entries"] == 16
    assert types[counts["key"]["type_id"]]["name"] == "unsigned int"  # __u32 typedef
    assert counts["value"]["name"] == "rec" and counts["value"]["size"] == 16
    assert maps["drops"]["type"] == MapType.PERCPU_ARRAY and maps["drops"]["max_entries"] == 1
    block = maps["block"]
    assert (block["type"], block["max_entries"], block["map_flags"]) == (11, 1024, 1)
    assert block["key"]["name"] == "ipv4_prefix" and block["key"]["size"] == 8
    # cpumap refuses BTF key/value types: sizes as libbpf-style C writes them
    assert maps["cpus"] == {"type": 16, "key_size": 4, "value_size": 4, "max_entries": 2}


@needs_bpftool
def test_struct_natural_alignment_b07(tmp_path: Path) -> None:
    types = btf_types(emit_object(build_maps_module()), tmp_path)
    (rec,) = [t for t in types.values() if t["kind"] == "STRUCT" and t["name"] == "rec"]
    assert rec["size"] == 16
    assert [(m["name"], m["bits_offset"]) for m in rec["members"]] == [("a", 0), ("b", 64)]


@needs_bpftool
def test_be_types_are_typedefs_of_uapi_ints(tmp_path: Path) -> None:
    types = btf_types(emit_object(build_maps_module()), tmp_path)
    (port,) = [t for t in types.values() if t["kind"] == "VAR" and t["name"] == "port"]
    chain = []
    tid = port["type_id"]
    while tid:
        t = types[tid]
        chain.append((t["kind"], t["name"]))
        tid = t.get("type_id", 0)
    assert chain == [("CONST", "(anon)"), ("VOLATILE", "(anon)"), ("TYPEDEF", "__be16"),
                     ("TYPEDEF", "__u16"), ("INT", "unsigned short")]  # fmt: skip


@needs_bpftool
def test_datasec_sizes_and_offsets_match_elf_b13(tmp_path: Path) -> None:
    obj = emit_object(build_maps_module())
    types = btf_types(obj, tmp_path)
    secs, syms = elf_sections(obj), elf_symbols(obj)
    datasecs = {t["name"]: t for t in types.values() if t["kind"] == "DATASEC"}
    assert set(datasecs) == {".maps", ".rodata", "license"}
    for name, ds in datasecs.items():
        assert ds["size"] == len(secs[name]) > 0, name
        offs = [v["offset"] for v in ds["vars"]]
        assert offs == sorted(offs)
        for v in ds["vars"]:
            var = types[v["type_id"]]["name"]
            assert syms[var] == (name, v["offset"]), var
    assert len(secs[".maps"]) == 4 * 32 + 8  # lpm_trie has a 5th member (map_flags)


def test_sections_libbpf_conventions() -> None:
    secs = elf_sections(emit_object(build_maps_module()))
    for name in ("xdp", ".maps", "license", ".rodata", ".BTF", ".BTF.ext"):
        assert name in secs, name
    assert "maps" not in secs and ".eh_frame" not in secs  # B12; nounwind
    assert secs["license"] == b"GPL\0"
    assert secs[".rodata"] == (0x3500).to_bytes(2, "little")


def test_line_info_names_source_file_and_lines() -> None:
    obj = emit_object(build_maps_module("progs/maps.bpfd"))
    info = line_info(obj)
    assert set(info) == {"xdp"}
    files = {f for _, f, _, _ in info["xdp"]}
    assert files == {"progs/maps.bpfd"}
    lines = {ln for _, _, ln, _ in info["xdp"]}
    assert {9, 10, 12, 13}.issubset(lines) and lines <= set(range(8, 15))
    assert info["xdp"][0][0] == 0  # first record at insn 0
    assert all(col < 80 for _, _, _, col in info["xdp"])


def test_volatile_config_load_is_not_folded() -> None:
    text = str(build_maps_module())
    assert re.search(r'load volatile i16, i16\* @"port"', text)
    mod = optimize(parse(text))
    assert "load volatile i16, ptr @port" in str(mod)


def test_ctx_layouts_match_vmlinux_btf(tmp_path: Path) -> None:
    vmlinux = Path("/sys/kernel/btf/vmlinux")
    if not HAVE_BPFTOOL or not vmlinux.exists():
        pytest.skip("needs bpftool and /sys/kernel/btf/vmlinux")
    out = subprocess.run(["bpftool", "-j", "btf", "dump", "file", str(vmlinux)], check=True,
                         capture_output=True, text=True, timeout=60).stdout  # fmt: skip
    kernel = {t["name"]: t for t in json.loads(out)["types"] if t["kind"] == "STRUCT"}
    m = ir.Module()
    di = DebugInfo(m, "x.bpfd")
    for ctx in ("xdp_md", "sk_msg_md", "bpf_sock_ops"):
        di.ctx_type(ctx)
    ours = btf_types(_emit_types_only(m, di), tmp_path)
    ours_by_name = {t["name"]: t for t in ours.values() if t["kind"] == "STRUCT"}
    for ctx in ("xdp_md", "sk_msg_md", "bpf_sock_ops"):
        k, o = kernel[ctx], ours_by_name[ctx]
        assert o["size"] == k["size"], ctx
        got = {mem["name"]: mem["bits_offset"] for mem in o["members"]}
        for mem in k["members"]:
            if mem["name"] != "(anon)":  # the kernel's unions: we name their first member
                assert got.pop(mem["name"]) == mem["bits_offset"], (ctx, mem["name"])
        for name, off in got.items():  # names we gave to anonymous unions
            assert off in {mem["bits_offset"] for mem in k["members"]}, (ctx, name)


def _emit_types_only(m: ir.Module, di: DebugInfo) -> bytes:
    """An object whose BTF holds ctx types: one dummy global per type keeps them alive."""
    for i, key in enumerate(k for k in list(di._types) if k.startswith("struct ")):
        gv = ir.GlobalVariable(m, ir.ArrayType(I8, di._types[key].size), f"keep{i}")
        gv.initializer = ir.Constant(gv.value_type, None)
        gv.section = ".data"
        di._global_var(gv, f"keep{i}", di._types[key], 0)
    di.finalize()
    return emit_object(m)


def test_map_global_pinning_and_sizes_only_when_set() -> None:
    m = ir.Module()
    di = DebugInfo(m, "x.bpfd")
    gv = di.map_global("p", MapType.ARRAY, key=di.int_type("u32"), value=di.int_type("u64"),
                       max_entries=4, pinning=1)  # fmt: skip
    di.finalize()
    assert gv.section == ".maps" and len(gv.value_type.elements) == 5  # type key value max pin
    text = str(m)
    assert 'name: "pinning"' in text and 'name: "map_flags"' not in text


# ---- kernel tests: bpftool/iproute2/kernel accept the objects -----------------------------


def _bpftool_json(*args: str) -> object:
    out = subprocess.run(["bpftool", "-j", *args], check=True, capture_output=True, text=True,
                         timeout=30).stdout  # fmt: skip
    return json.loads(out)


def _loadall(obj: bytes, tmp_path: Path) -> tuple[str, dict[str, dict]]:
    """``bpftool prog loadall``; returns (pin dir, {map name: bpftool map info})."""
    path = tmp_path / "x.o"
    path.write_bytes(obj)
    pin = f"/sys/fs/bpf/btfgen_{uuid.uuid4().hex[:8]}"
    r = subprocess.run(["bpftool", "prog", "loadall", str(path), pin], capture_output=True,
                       text=True, timeout=60)  # fmt: skip
    assert r.returncode == 0, r.stderr
    maps: dict[str, dict] = {}
    for prog in os.listdir(pin):
        info = _bpftool_json("prog", "show", "pinned", f"{pin}/{prog}")
        for mid in info.get("map_ids", []):
            mi = _bpftool_json("map", "show", "id", str(mid))
            maps[mi["name"]] = mi
    return pin, maps


@pytest.mark.kernel
@needs_bpftool
def test_bpftool_loadall_creates_declared_maps(tmp_path: Path) -> None:
    from bpfdsl.kernel import syscall

    pin = None
    try:
        pin, maps = _loadall(emit_object(build_maps_module()), tmp_path)
        got = {n: (m["type"], m["bytes_key"], m["bytes_value"], m["max_entries"])
               for n, m in maps.items() if not n.endswith(".rodata")}  # fmt: skip
        assert got == {"counts": ("hash", 4, 16, 16), "drops": ("percpu_array", 4, 8, 1),
                       "block": ("lpm_trie", 8, 1, 1024)}  # fmt: skip
        assert maps["block"]["flags"] == BPF_F_NO_PREALLOC
        (rodata,) = [m for n, m in maps.items() if n.endswith(".rodata")]
        assert (rodata["bytes_value"], rodata["frozen"]) == (2, 1)
        with syscall.obj_get(f"{pin}/filter") as fd:
            res = syscall.prog_test_run(fd, bytes(64))
        assert res.retval == 2  # counts is empty -> the "else" of the lookup: XDP_PASS
    finally:
        if pin:
            shutil.rmtree(pin, ignore_errors=True)


@pytest.mark.kernel
@needs_bpftool
def test_bpftool_loadall_sockops_sk_msg_sockhash_b12(tmp_path: Path) -> None:
    obj = emit_object(build_sock_module())
    assert "maps" not in elf_sections(obj) and ".maps" in elf_sections(obj)
    pin = None
    try:
        pin, maps = _loadall(obj, tmp_path)
        assert sorted(os.listdir(pin)) == ["redir", "track"]
        m = maps["socks"]
        assert (m["type"], m["bytes_key"], m["bytes_value"], m["max_entries"]) == (
            "sockhash", 12, 4, 65536)  # fmt: skip
    finally:
        if pin:
            shutil.rmtree(pin, ignore_errors=True)


@pytest.mark.kernel
def test_raw_btf_upload_accepted_only_after_datasec_fixup_b13() -> None:
    """iproute2's legacy path uploads .BTF as-is: LLVM's raw DATASECs (size 0) are refused."""
    from bpfdsl.kernel import syscall

    m = build_maps_module()
    fixed = elf_sections(emit_object(m))[".BTF"]
    fd, log = syscall.btf_load(fixed, log_level=1)
    fd.close()
    assert "Invalid" not in log
    raw_obj = target_machine("v3").emit_object(optimize(parse(build_maps_module())))
    with pytest.raises(syscall.BpfError):
        syscall.btf_load(elf_sections(raw_obj)[".BTF"], log_level=1)


@pytest.mark.kernel
def test_iproute2_attaches_object_in_netns(tmp_path: Path) -> None:
    if shutil.which("ip") is None:
        pytest.skip("iproute2 not installed")
    from support.netns import veth_net

    path = tmp_path / "pass.o"
    path.write_bytes(emit(build_pass_module()).obj)
    with veth_net("bg") as net:
        r = subprocess.run(["ip", "-n", net.xdp_ns, "link", "set", "dev", net.xdp_dev, "xdpgeneric",
                            "obj", str(path), "sec", "xdp"], capture_output=True, text=True,
                           timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        show = subprocess.run(["ip", "-n", net.xdp_ns, "link", "show", net.xdp_dev],
                              capture_output=True, text=True, timeout=30).stdout  # fmt: skip
        assert "prog/xdp" in show and "xdp_pass" in show


@pytest.mark.kernel
def test_xdp_loader_loads_object_in_netns(tmp_path: Path) -> None:
    if shutil.which("xdp-loader") is None or shutil.which("nsenter") is None:
        pytest.skip("xdp-loader (xdp-tools) or nsenter not installed")
    from support.netns import veth_net

    path = tmp_path / "pass.o"
    path.write_bytes(emit_object(build_pass_module()))
    with veth_net("bl") as net:
        ns = ["nsenter", f"--net=/run/netns/{net.xdp_ns}"]
        r = subprocess.run([*ns, "xdp-loader", "load", "-m", "skb", net.xdp_dev, str(path)],
                           capture_output=True, text=True, timeout=60)  # fmt: skip
        assert r.returncode == 0, r.stderr
        status = subprocess.run([*ns, "xdp-loader", "status", net.xdp_dev], capture_output=True,
                                text=True, timeout=30).stdout  # fmt: skip
        assert "xdp_pass" in status


def test_inlined_helper_lines_appear_in_line_info() -> None:
    """A helper with its own DISubprogram (program=False), inlined into a program: line
    info of the inlined code names the helper's lines (LLVM adds inlinedAt)."""
    m = ir.Module(name="inl.bpfd")
    di = DebugInfo(m, "inl.bpfd", source="\n" * 12)
    helper = ir.Function(m, ir.FunctionType(I32, [I32]), "twice")
    helper.linkage = "internal"
    helper.attributes.add("alwaysinline")
    hd = di.function(helper, line=2, ctx=None, program=False)
    hb = ir.IRBuilder(helper.append_basic_block("entry"))
    hb.debug_metadata = hd.loc(3, 9)
    hb.ret(hb.shl(helper.args[0], I32(1)))
    fn = ir.Function(m, ir.FunctionType(I32, [PTR]), "prog")
    fn.section = "xdp"
    fd = di.function(fn, line=6)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.debug_metadata = fd.loc(7, 5)
    x = b.load(fn.args[0], typ=I32)
    b.debug_metadata = fd.loc(8, 5)
    r = b.call(helper, [x])
    b.debug_metadata = fd.loc(9, 5)
    b.ret(b.and_(r, I32(3)))
    di.finalize()
    obj = emit_object(m)
    lines = {ln for _, _, ln, _ in line_info(obj)["xdp"]}
    assert 3 in lines and 7 in lines
    assert "twice" not in elf_symbols(obj)  # inlined away, not kept as a subprogram


def test_rodata_configs_offsets_and_initial_bytes() -> None:
    """Mixed-size configs: each VAR's DATASEC offset is its symbol value and the section
    holds the initial value there (little-endian; a be16 literal is stored swapped)."""
    m = ir.Module(name="cfg.bpfd")
    di = DebugInfo(m, "cfg.bpfd")
    cfgs = {"a": ("u8", 7), "b": ("u64", 0x1122334455667788), "c": ("be16", 0x3500),
            "d": ("u32", 9)}  # fmt: skip
    for name, (ty, val) in cfgs.items():
        di.config_global(name, di.int_type(ty), val)
    fn = ir.Function(m, ir.FunctionType(I32, [PTR]), "p")
    fn.section = "xdp"
    fd = di.function(fn, line=1)
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    b.debug_metadata = fd.loc(1, 1)
    b.ret(b.trunc(load_config(b, m.get_global("b")), I32))
    di.finalize()
    obj = emit_object(m)
    rodata, syms = elf_sections(obj)[".rodata"], elf_symbols(obj)
    size = {"u8": 1, "u64": 8, "be16": 2, "u32": 4}
    for name, (ty, val) in cfgs.items():
        sec, off = syms[name]
        assert sec == ".rodata" and off % size[ty] == 0
        assert int.from_bytes(rodata[off : off + size[ty]], "little") == val
    if HAVE_BPFTOOL:
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            types = btf_types(obj, Path(d))
        (ds,) = [t for t in types.values() if t["kind"] == "DATASEC" and t["name"] == ".rodata"]
        got = {types[v["type_id"]]["name"]: v["offset"] for v in ds["vars"]}
        assert got == {n: syms[n][1] for n in cfgs}
        assert [v["offset"] for v in ds["vars"]] == sorted(got.values())
        assert ds["size"] == len(rodata)
