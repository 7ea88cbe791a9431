"""`bpfdsl check` on the command line: exit codes, text and JSON output, and a fuzz run
over a few thousand corrupted objects that must never end in a traceback."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.paths import DATA, PROGS

from bpfdsl.cli import main
from bpfdsl.obj.collection import read_object

needs_clang = pytest.mark.skipif(shutil.which("clang-19") is None, reason="needs clang-19")


def _clang(src: Path, out: Path) -> Path:
    subprocess.run(
        [
            "clang-19",
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-I/usr/include/x86_64-linux-gnu",
            "-c",
            str(src),
            "-o",
            str(out),
        ],
        check=True,
    )
    return out


@pytest.fixture(scope="module")
def objs(tmp_path_factory) -> dict[str, Path]:
    if shutil.which("clang-19") is None:
        pytest.skip("needs clang-19")
    d = tmp_path_factory.mktemp("objs")
    return {
        name: _clang(src, d / f"{name}.o")
        for name, src in {
            "lines": DATA / "checker_c" / "lines.c",
            "udp": DATA / "c" / "xdp_udp_filter.c",
            "pass": DATA / "c" / "xdp_pass.c",
        }.items()
    }


def test_check_cli_accepts_clang_object(objs, capsys):
    assert main(["check", str(objs["udp"])]) == 0
    out = capsys.readouterr().out
    assert "prog 'udp_filter' (xdp): OK" in out


def test_check_cli_json(objs, capsys):
    assert main(["check", str(objs["lines"]), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is True and doc["programs"][0]["program"] == "lines"
    assert doc["programs"][0]["insns_processed"] > 0


def test_check_cli_rejects_with_source_line(objs, tmp_path, capsys):
    # drop the packet bounds check of lines.c: the kernel would refuse the packet read
    data = bytearray(objs["lines"].read_bytes())
    spec = read_object(bytes(data))
    p = spec.programs["lines"]
    from bpfdsl.abi.insn import encode, ja

    i = next(k for k, x in enumerate(p.insns) if x.is_cond_jump and x.source == 0x08)
    code = encode(p.insns)
    patched = encode([*p.insns[:i], ja(0), *p.insns[i + 1 :]])
    at = bytes(data).find(code)
    assert at > 0
    data[at : at + len(code)] = patched
    bad = tmp_path / "bad.o"
    bad.write_bytes(bytes(data))
    assert main(["check", str(bad), "-v"]) == 1
    out = capsys.readouterr().out
    assert "REJECTED" in out and "lines.c:28" in out and "key = eth->h_proto" in out
    assert "invalid access to packet" in out and "R1=pkt(r=0)" in out
    assert "state before insn" in out  # -v shows the register state
    assert main(["check", str(bad), "--json"]) == 1
    err = json.loads(capsys.readouterr().out)["programs"][0]["errors"][0]
    assert err["line"] == 28 and err["code"] == "pkt-bounds" and err["regs"]["R1"] == "pkt(r=0)"


def test_check_cli_bpfd_source(tmp_path, capsys):
    assert main(["check", str(PROGS / "xdp_pass.bpfd")]) == 0
    assert "OK" in capsys.readouterr().out


def test_check_cli_unusable_input_exit_2(tmp_path, capsys):
    g = tmp_path / "garbage.o"
    g.write_bytes(b"\x7fELF" + bytes(range(256)) * 4)
    assert main(["check", str(g)]) == 2
    assert main(["check", str(tmp_path / "missing.o")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "missing.o" in err


def test_check_cli_unknown_program_exit_2(objs, capsys):
    assert main(["check", str(objs["pass"]), "--prog", "nope"]) == 2
    assert "no program 'nope'" in capsys.readouterr().err


def test_check_cli_subprocess_no_traceback(tmp_path):
    g = tmp_path / "trunc.o"
    g.write_bytes(b"\x7fELF\x02\x01\x01")
    r = subprocess.run(
        [sys.executable, "-m", "bpfdsl", "check", str(g)], capture_output=True, text=True
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr and r.stderr.strip()


def _mutants(base: bytes, rng: random.Random, code_at: int, code_len: int):
    kind = rng.randrange(5)
    b = bytearray(base)
    if kind == 0:  # flip bytes anywhere
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
    elif kind == 1:  # flip bytes inside the instructions
        for _ in range(rng.randint(1, 4)):
            b[code_at + rng.randrange(code_len)] = rng.randrange(256)
    elif kind == 2:  # truncate
        del b[rng.randrange(len(b)) :]
    elif kind == 3:  # swap an instruction for a random one
        k = code_at + 8 * rng.randrange(code_len // 8)
        b[k : k + 8] = rng.randbytes(8)
    else:  # insert garbage
        at = rng.randrange(len(b))
        b[at:at] = rng.randbytes(rng.randint(1, 64))
    return bytes(b)


@needs_clang
def test_check_fuzz_corrupt_objects_never_traceback(objs, tmp_path, capsys):
    """2000 corrupted objects: exit 0, 1 or 2, and a message; never an exception."""
    rng = random.Random(20261130)
    codes = {0: 0, 1: 0, 2: 0}
    path = tmp_path / "m.o"
    bases = []
    for o in objs.values():
        data = o.read_bytes()
        spec = read_object(data)
        p = next(iter(spec.programs.values()))
        from bpfdsl.abi.insn import encode

        code = encode(p.insns[: len(p.insns)])
        at = data.find(code[:64])
        bases.append((data, max(at, 0), len(code)))
    for _ in range(2000):
        data, at, n = rng.choice(bases)
        path.write_bytes(_mutants(data, rng, at, n))
        rc = main(["check", str(path)])
        assert rc in codes
        codes[rc] += 1
        capsys.readouterr()
    assert codes[2] > 100 and codes[1] > 100  # both bad input and rejected programs were seen


def test_check_cli_unmodelled_helper_is_cannot_check_exit_2(tmp_path, capsys):
    # bpf_spin_lock (#93): the kernel loads this object; the checker has no model of the
    # helper, so the verdict is "cannot check" (exit 2), never a false "REJECTED"
    if shutil.which("clang-19") is None:
        pytest.skip("needs clang-19")
    obj = _clang(DATA / "checker_c" / "unmodelled.c", tmp_path / "unmodelled.o")
    assert main(["check", str(obj)]) == 2
    out = capsys.readouterr().out
    assert "prog 'uid_count' (xdp): CANNOT CHECK" in out and "REJECTED" not in out
    assert (
        "cannot check: helper bpf_get_current_uid_gid (#15) is not modelled by bpfdsl check" in out
    )
    assert "unmodelled.c:21:" in out
    assert main(["check", str(obj), "--json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    assert doc["programs"][0]["status"] == "unchecked"


def test_check_unmodelled_vs_nonexistent_helper():
    from bpfdsl.abi.insn import call, exit_, mov64_imm
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.checker import check_insns

    def run(helper_id):
        return check_insns([call(helper_id), mov64_imm(0, 2), exit_()], ProgramType.XDP, name="p")

    for hid in (
        15,
        113,
        134,
        211,
    ):  # uid_gid, probe_read_kernel, ringbuf_query, cgrp_storage_delete
        r = run(hid)
        assert r.status == "unchecked", (hid, r.errors)
        assert f"(#{hid}) is not modelled" in r.errors[0].message
    r = run(212)  # past __BPF_FUNC_MAX_ID on this kernel: a real rejection
    assert r.status == "rejected" and r.errors[0].code == "unknown-helper"
    r = run(13)  # clone_redirect: tc only, xdp_func_proto has none (a rejection, #23)
    assert r.status == "rejected"
    assert r.errors[0].message == "program of this type cannot use helper bpf_clone_redirect#13"
    assert run(1).status in ("ok", "rejected")  # modelled helper: a verdict, never unchecked


def test_check_bad_return_warning_names_line_that_set_r0(tmp_path, capsys):
    # clang puts `r0 = 3` (XDP_TX) at the `return XDP_TX;` line and the exit at the closing
    # brace; the warning must point at the former (the insn that last wrote r0 on the path)
    if shutil.which("clang-19") is None:
        pytest.skip("needs clang-19")
    obj = _clang(DATA / "checker_c" / "badret_devmap.c", tmp_path / "badret.o")
    assert main(["check", str(obj)]) == 0  # a warning: the kernel accepts it
    out = capsys.readouterr().out
    assert "badret_devmap.c:6:" in out and "return value 3 is not a valid verdict" in out
    assert "badret_devmap.c:8:" not in out
    assert "r0 = 3" in out


def test_check_get_current_pid_tgid_is_modelled():
    # u64 result, no arguments, every program type since Linux 6.10 (this kernel loads it
    # in XDP); an older --kernel target rejects it
    from bpfdsl.abi.insn import alu64_imm, call, exit_
    from bpfdsl.abi.opcodes import BPF_AND
    from bpfdsl.abi.prog_types import ProgramType
    from bpfdsl.checker import CheckOptions, check_insns

    prog = [call(14), alu64_imm(BPF_AND, 0, 1), exit_()]
    assert check_insns(prog, ProgramType.XDP).ok
    old = check_insns(prog, ProgramType.XDP, options=CheckOptions(kernel=(6, 1)))
    assert old.errors[0].code == "kernel-version" and "6.10" in old.errors[0].message
