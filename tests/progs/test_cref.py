"""The libbpf-style C reference programs and loader compat fixtures in tests/data/c build with
clang-19 (through tests/data/c/build.sh) and the kernel accepts every object via
``bpftool prog loadall`` (libbpf 1.x).  The benchmarks compare bpfdsl against these objects,
and the loader tests load them, so a broken fixture must fail here first."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile
from support.paths import DATA

C_DIR = DATA / "c"
SOURCES = sorted(C_DIR.glob("*.c"))
EM_BPF = "EM_BPF"
SEC_RE = re.compile(r'\bSEC\("([^"]+)"\)')
PROGRAM_SECTIONS = ("xdp", "xdp.frags", "xdp/cpumap", "xdp/devmap", "sk_msg", "sockops")


def _source_sections(src: Path) -> set[str]:
    """Section names the C file asks for with SEC("...")."""
    return set(SEC_RE.findall(src.read_text()))


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Run build.sh into a temporary directory; the directory of the .o files."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed (apt-get install clang-19)")
    out = tmp_path_factory.mktemp("cref")
    proc = subprocess.run(
        [str(C_DIR / "build.sh"), str(out)], capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, f"build.sh failed:\n{proc.stdout}\n{proc.stderr}"
    return out


def test_sources_present() -> None:
    names = {s.stem for s in SOURCES}
    for want in (
        "xdp_pass",
        "xdp_drop",
        "xdp_udp_filter",
        "xdp_acl",
        "xdp_reflect",
        "xdp_vlan_strip",
        "compat_maps",
    ):
        assert want in names


def test_build_fails_loudly(tmp_path: Path) -> None:
    """A C file that does not compile makes build.sh exit non-zero and name the file."""
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    src_dir = tmp_path / "c"
    src_dir.mkdir()
    shutil.copy(C_DIR / "build.sh", src_dir / "build.sh")
    (src_dir / "broken.c").write_text("int f(void) { return undeclared; }\n")
    proc = subprocess.run(
        [str(src_dir / "build.sh"), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0
    assert "broken.c" in proc.stderr


@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_object_sections(built: Path, src: Path) -> None:
    """Each object is an EM_BPF ELF carrying the sections its source declares, BTF and
    BTF.ext, and BTF-defined maps in .maps (never a legacy ``maps`` section)."""
    obj = built / f"{src.stem}.o"
    assert obj.exists(), f"build.sh did not produce {obj.name}"
    with obj.open("rb") as f:
        elf = ELFFile(f)
        assert elf["e_machine"] == EM_BPF
        names = {s.name for s in elf.iter_sections()}
    wanted = _source_sections(src)
    assert wanted <= names, f"missing sections {wanted - names}"
    assert {".BTF", ".BTF.ext", "license"} <= names
    assert "maps" not in names
    assert any(w in PROGRAM_SECTIONS for w in wanted)


def _program_functions(obj: Path) -> list[str]:
    """Sorted names of the global functions placed in program sections (what bpftool pins)."""
    with obj.open("rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        out = []
        for sym in symtab.iter_symbols():
            if sym["st_info"]["type"] != "STT_FUNC" or sym["st_info"]["bind"] != "STB_GLOBAL":
                continue
            if elf.get_section(sym["st_shndx"]).name in PROGRAM_SECTIONS:
                out.append(sym.name)
    return sorted(out)


def _bpftool() -> str:
    tool = shutil.which("bpftool")
    if tool is None:
        pytest.skip("bpftool not installed")
    return tool


@pytest.mark.kernel
@pytest.mark.parametrize("src", SOURCES, ids=[s.stem for s in SOURCES])
def test_bpftool_loadall(built: Path, src: Path) -> None:
    """The kernel (through libbpf 1.x in bpftool) accepts every program of every object."""
    tool = _bpftool()
    if not os.path.ismount("/sys/fs/bpf"):
        subprocess.run(["mount", "-t", "bpf", "bpf", "/sys/fs/bpf"], check=True)
    pin_dir = Path("/sys/fs/bpf") / f"bpfdsl_cref_{src.stem}_{uuid.uuid4().hex[:8]}"
    obj = built / f"{src.stem}.o"
    progs = _program_functions(obj)
    try:
        proc = subprocess.run(
            [tool, "prog", "loadall", str(obj), str(pin_dir)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, f"bpftool rejected {src.stem}.o:\n{proc.stderr[-3000:]}"
        pinned = sorted(p.name for p in pin_dir.iterdir())
        assert pinned == progs
    finally:
        shutil.rmtree(pin_dir, ignore_errors=True)
    assert not pin_dir.exists()
