"""Every example of docs/python-api.md runs and prints what the page says it prints.

An example is a ```python block; the ```text block after it (following "Prints:") is its
expected standard output, compared line for line.  Each runs in its own interpreter
(the examples switch network namespaces and load programs: a fresh process keeps them
from touching the test process), with this tree first on the path and a bounded time.
Examples that load programs need root and run on the kernel; each makes and removes its
own pins (/sys/fs/bpf/apidocs_*) or veth pair and namespaces (apidocs_*), and this test
checks that none is left behind.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from support.paths import ROOT

DOC = ROOT / "docs" / "python-api.md"
EXAMPLE = re.compile(
    r"^```python\n(?P<code>.*?)^```\n\s*Prints:\s*\n\s*```text\n(?P<out>.*?)^```",
    re.M | re.S,
)
TIMEOUT = 120  # seconds per example; a veth example takes about one


def _examples() -> list[tuple[str, str, str]]:
    """(id "python-api.md:LINE", code, expected stdout) of each example."""
    text = DOC.read_text()
    return [
        (f"{DOC.name}:{text.count(chr(10), 0, m.start()) + 1}", m.group("code"), m.group("out"))
        for m in EXAMPLE.finditer(text)
    ]


EXAMPLES = _examples()
PARAMS = [
    pytest.param(*e, id=e[0], marks=[pytest.mark.kernel] if "load_collection" in e[1] else [])
    for e in EXAMPLES
]


def _leftovers() -> set[str]:
    pins = {p for p in os.listdir("/sys/fs/bpf") if p.startswith("apidocs_")}
    netns = set()
    if os.path.isdir("/run/netns"):
        netns = {n for n in os.listdir("/run/netns") if n.startswith("apidocs_")}
    return pins | netns


def test_every_python_block_is_an_example() -> None:
    """No ```python block escapes the test by lacking its Prints: block."""
    blocks = re.findall(r"^```python\n", DOC.read_text(), re.M)
    assert len(EXAMPLES) == len(blocks) >= 5


@pytest.mark.parametrize("where,code,expected", PARAMS)
def test_python_api_example(where: str, code: str, expected: str) -> None:
    needs_kernel = "load_collection" in code
    if needs_kernel and os.geteuid() != 0:
        pytest.skip("loads programs: needs root")
    before = _leftovers() if needs_kernel else set()
    env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, f"{where} failed:\n{proc.stderr}"
    assert proc.stdout.splitlines() == expected.splitlines(), proc.stderr
    if needs_kernel:
        assert _leftovers() - before == set()
