"""`bpfdsl run --map NAME KEY VALUE` / `--maps FILE`: maps filled before the runs, keys and
values parsed by their BTF types, so an allow/block list is tested without the kernel
(the interpreter) and with it (BPF_PROG_TEST_RUN); bad entries are errors naming the map."""

from __future__ import annotations

import json

import pytest
from scapy.layers.inet import IP, UDP
from scapy.layers.inet6 import IPv6
from scapy.layers.l2 import Ether

from bpfdsl.cli import main

V4_IN, V4_OUT = "192.0.2.77", "198.51.100.1"


def frame(src: str) -> str:
    ip = IPv6(src=src, dst="2001:db8::2") if ":" in src else IP(src=src, dst="10.0.0.2")
    return bytes(Ether() / ip / UDP(dport=53) / b"q").hex()


def run(capsys, root, *args: str) -> tuple[int, dict]:
    rc = main(["run", str(root / "progs" / "xdp_acl.bpfd"), "--json", *args])
    out = capsys.readouterr().out
    return rc, json.loads(out) if rc == 0 else {}


ENGINES = ["interp", pytest.param("kernel", marks=pytest.mark.kernel)]


@pytest.mark.parametrize("engine", ENGINES)
def test_block_list_from_the_command_line(capsys, root, engine):
    for src, want in ((V4_IN, "XDP_DROP"), (V4_OUT, "XDP_PASS")):
        rc, doc = run(capsys, root, "--engine", engine, "--hex", frame(src),
                      "--map", "v4_block", "192.0.2.0/24", "1")  # fmt: skip
        assert rc == 0 and doc["packets"][0]["verdict"] == want, (src, doc)
    rc, doc = run(capsys, root, "--engine", engine, "--hex", frame(V4_IN))
    assert doc["packets"][0]["verdict"] == "XDP_PASS"  # empty list: nothing blocked


@pytest.mark.parametrize("engine", ENGINES)
def test_block_list_from_a_file(capsys, root, tmp_path, engine):
    f = tmp_path / "lists.json"
    f.write_text(json.dumps({"v4_block": [["192.0.2.0/24", 1]],
                             "v6_block": {"2001:db8:bad::/48": 1}}))  # fmt: skip
    for src, want in ((V4_IN, "XDP_DROP"), ("2001:db8:bad::5", "XDP_DROP"),
                      ("2001:db8::1", "XDP_PASS")):  # fmt: skip
        rc, doc = run(capsys, root, "--engine", engine, "--hex", frame(src), "--maps", str(f))
        assert rc == 0 and doc["packets"][0]["verdict"] == want, (src, doc)


BAD = [  # the codes of `bpfdsl map update` (one codec): bad-map, bad-value
    (["--map", "v4_blok", "10.0.0.0/8", "1"], "bad-map", "no map 'v4_blok'",
     "maps: v4_block, v6_block"),
    (["--map", "v4_block", "10.0.0.0/33", "1"], "bad-value",
     "map 'v4_block': bad key '10.0.0.0/33'", None),
    (["--map", "v4_block", "10.0.0.0/8", "300"], "bad-value", "map 'v4_block': bad value '300'",
     None),
    (["--map", "dropped", "7", "1"], "bad-value", "map 'dropped': '7' -> '1'", None),  # index >= 2
]  # fmt: skip


@pytest.mark.parametrize("args,code,words,hint", BAD)
def test_bad_entries_name_the_map(capsys, root, args, code, words, hint):
    rc = main(["run", str(root / "progs" / "xdp_acl.bpfd"), "--engine", "interp",
               "--hex", frame(V4_IN), *args])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and f"error[{code}]" in err and words in err, err
    if hint:
        assert hint in err


def test_a_file_that_is_no_entry_list(capsys, root, tmp_path):
    f = tmp_path / "bad.json"
    f.write_text('{"v4_block": 5}')
    assert main(["run", str(root / "progs" / "xdp_acl.bpfd"), "--engine", "interp",
                 "--hex", frame(V4_IN), "--maps", str(f)]) == 2  # fmt: skip
    err = capsys.readouterr().err
    assert "error[bad-maps-file]" in err and "map 'v4_block': expected" in err
    f.write_text("{nope")
    assert main(["run", str(root / "progs" / "xdp_acl.bpfd"), "--engine", "interp",
                 "--hex", frame(V4_IN), "--maps", str(f)]) == 2  # fmt: skip
    assert "bad.json:1:2: not JSON" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ENGINES)
def test_command_line_entries_come_after_the_file(capsys, root, tmp_path, engine):
    """One list, one codec: `--map` entries are put in after the file's, so a key given on
    the command line wins; a per-CPU map gets the value on every CPU (JSON or text)."""
    f = tmp_path / "lists.json"
    f.write_text(json.dumps({"v4_block": {"192.0.2.0/24": 1}, "dropped": [[0, 5]]}))
    for extra, want in (([], 5), (["--map", "dropped", "0", "7"], 7)):
        rc, doc = run(capsys, root, "--engine", engine, "--hex", frame(V4_IN), "--maps", str(f),
                      *extra)  # fmt: skip
        p = doc["packets"][0]
        assert rc == 0 and p["verdict"] == "XDP_DROP", doc
        (change,) = p["map_changes"]  # dropped[0] += 1 on the CPU the run used
        assert change["map"] == "dropped" and set(change["old"]) == {want}, change
        assert sum(change["new"]) - sum(change["old"]) == 1
