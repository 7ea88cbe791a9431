"""A topology file's mistakes are located: `bpfdsl apply --plan` names the file, line and
column of the key or value at fault and shows the line (tomllib gives no positions:
bpfdsl.runtime.topology.locate reads the text again).  Nothing here touches the kernel:
the file is refused before anything is loaded."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from support.paths import ROOT

from bpfdsl.cli import main

EDGE = ROOT / "tests" / "data" / "topology"

HEAD = """\
pin_dir = "/sys/fs/bpf/topo_errors_test"

[objects.edge]
source = "edge.bpfd"
"""

XDP = """
[[xdp]]
program = "edge:front"
interfaces = ["tpa"]
"""

# (file text, expected line, column, words of the message)
CASES = [
    (HEAD + XDP + '\n[[xdp]]\nprogram = "edge:front"\ninterfaces = ["tpb"]\nmod = "native"\n',
     13, 1, "xdp[1]: unknown key mod"),
    (HEAD + XDP.replace('"tpa"]', '"tpa"]\nmode = "offload"'), 9, 1,
     "mode 'offload': give native or generic"),
    (HEAD + XDP.replace("edge:front", "edge"), 7, 11, "'edge' is not OBJECT:NAME"),
    (HEAD + XDP.replace("edge:front", "core:front"), 7, 11, "no object 'core'"),
    (HEAD + XDP + '\n[[cpumap]]\nmap = "edge:cpu_map"\ncpu = 70000000000\n', 12, 7,
     "70000000000 is not an integer"),
    (HEAD.replace("/sys/fs/bpf/topo_errors_test", "/tmp/x"), 1, 1,
     "is not a directory under /sys/fs/bpf"),
    (HEAD.replace('source = "edge.bpfd"', 'source = "edge.bpfd"\nobject = "edge.o"'), 3, 1,
     "give one of source"),
    (HEAD + XDP + '\n[[sock_ops]]\ncgroup = "topo"\nprogram = "edge:track"\n', 11, 1,
     "cgroup is not an absolute path"),
    (HEAD + XDP + "\n[[xdp]]\nprogram = \"edge:front\"\ninterfaces = [\"tpa\"]\n", 12, 15,
     "interface tpa is given twice"),
    (HEAD + XDP + '\n[maps."edge:allowed"]\nentries = [1]\nfrom = "x.csv"\n', 10, 1,
     "give one of entries"),
    (HEAD + "[[xdp]\n", 5, 6, "not TOML"),
    # found once the object is compiled: the reference's text in the file
    (HEAD + XDP.replace("edge:front", "edge:back"), 7, 11, "has no program 'back'"),
    (HEAD + XDP.replace("edge:front", "edge:on_cpu"), 7, 11, "is not a plain `xdp` program"),
    (HEAD + XDP + '\n[[prog_array]]\nmap = "edge:cpu_map"\nslot = 0\nprogram = "edge:stage_v4"\n',
     11, 7, "is a cpumap, not a map for prog_array entries"),
]  # fmt: skip


@pytest.mark.parametrize(("text", "line", "col", "words"), CASES)
def test_topology_mistake_is_located(
    tmp_path: Path, capsys, text: str, line: int, col: int, words: str
) -> None:
    shutil.copy(EDGE / "edge.bpfd", tmp_path / "edge.bpfd")
    top = tmp_path / "site.toml"
    top.write_text(text)
    assert main(["apply", "--plan", str(top)]) == 2
    err = capsys.readouterr().err
    assert "error[bad-topology]" in err and words in err, err
    assert f"--> {top}:{line}:{col}" in err, err
    shown = text.splitlines()[line - 1]
    assert f"{line} | {shown}" in err, err  # the line itself is shown
