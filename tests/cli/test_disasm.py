"""`bpfdsl disasm`: per program, source lines above their instructions, maps by name."""

from __future__ import annotations

import re

from support.objbuild import build, source

from bpfdsl.cli import main


def test_disasm_source_lines_above_instructions(capsys):
    assert main(["disasm", str(build("compat_multi")), "--prog", "count_drop"]) == 0
    out = capsys.readouterr().out.splitlines()
    src = source("compat_multi").read_text().splitlines()
    assert out[0].startswith("count_drop:  section xdp")
    annotated = [ln for ln in out if ln.startswith("; ")]
    assert annotated
    for ln in annotated:
        m = re.match(r"; (.*)  @ compat_multi\.c:(\d+)$", ln)
        assert m, ln
        assert src[int(m.group(2)) - 1].strip() == m.group(1)
    # each annotation is followed by an instruction line
    for i, ln in enumerate(out[:-1]):
        if ln.startswith("; "):
            assert re.match(r"\s*\d+: \([0-9a-f]{2}\) ", out[i + 1]), out[i + 1]
    assert "bump:  (subprogram)" in out
    assert any("r1 = map[hits]" in ln for ln in out)
    assert any("r1 = .rodata+0" in ln for ln in out)
    assert any("call bpf_map_lookup_elem#1" in ln for ln in out)


def test_disasm_all_programs_and_unknown_prog(capsys):
    obj = str(build("compat_multi"))
    assert main(["disasm", obj]) == 0
    out = capsys.readouterr().out
    assert "count_pass:  section xdp" in out and "count_drop:  section xdp" in out
    assert main(["disasm", obj, "--prog", "nope"]) == 2
    assert "count_pass (xdp)" in capsys.readouterr().err


def test_disasm_corrupt_object_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.o"
    bad.write_bytes(build("xdp_pass").read_bytes()[:100])
    assert main(["disasm", str(bad)]) == 2
    assert "bad.o" in capsys.readouterr().err
