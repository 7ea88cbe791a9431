"""``bpfdsl run`` on sk_msg and sock_ops programs: --ctx sets the fields of struct sk_msg_md /
struct bpf_sock_ops as the kernel presents them, and the output says what the program did in
its terms (verdict, redirect target map/key/flags or the key that had no socket, map entries
added, sock_ops reply and callback flags).  The kernel's BPF_PROG_TEST_RUN refuses both kinds
(ENOTSUPP), which the kernel test below keeps true."""

from __future__ import annotations

import contextlib
import io
import json

import pytest
from support.paths import ROOT

from bpfdsl.cli import main

REDIR = str(ROOT / "progs" / "sk_msg_redirect_ingress.bpfd")
# the client end of a connection 10.0.0.1:4000 -> 10.0.0.2:80
CLIENT = ["local_ip4=10.0.0.1", "local_port=4000", "remote_ip4=10.0.0.2", "remote_port=80"]
# struct sock_key of the server end (the peer redir looks up): sip 10.0.0.2, dip 10.0.0.1,
# sport be16 80, dport be16 4000 -- 12 bytes, network order
PEER_KEY = "0a0000020a00000100500fa0"

SEEN = """\
license "GPL"
struct seen_t { op: u32, cwnd: u32, state: u32, lport: u16, rport: be16, remote_ip: be32 }
map seen: array<u32, seen_t>(max_entries: 1)
sock_ops fn t(skops) {
    seen[0] = seen_t(op: skops.op, cwnd: skops.snd_cwnd, state: skops.state,
                     lport: skops.local_port, rport: skops.remote_port,
                     remote_ip: skops.remote_ip4)
    if skops.op == BPF_SOCK_OPS_TCP_CONNECT_CB { sock_ops_cb_flags_set(BPF_SOCK_OPS_STATE_CB_FLAG) }
    if skops.op == BPF_SOCK_OPS_RTO_CB { return 0 }
    return 1
}
"""


def _run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def _json(*argv: str) -> dict:
    rc, out, err = _run("run", *argv, "--json")
    assert rc == 0, err
    (packet,) = json.loads(out)["packets"]
    return packet


def _ctx(fields: list[str]) -> list[str]:
    return [a for f in fields for a in ("--ctx", f)]


def test_sk_msg_redirect_miss_names_map_key_and_flags() -> None:
    p = _json(REDIR, "--prog", "redir", "--msg", "hello", *_ctx(CLIENT))
    assert (p["verdict"], p["length"]) == ("SK_DROP", 5)
    assert p["summary"] == "message 'hello' on AF_INET local 10.0.0.1:4000 remote 10.0.0.2:80"
    miss = p["outcome"]["redirect_miss"]
    assert miss == {
        "map": "socks",
        "key": " ".join(PEER_KEY[i : i + 2] for i in range(0, 24, 2)),
        "flags": "BPF_F_INGRESS",
        "why": "empty",
    }
    assert "map_changes" not in p  # a miss counts nothing
    rc, out, _ = _run("run", REDIR, "--prog", "redir", "--msg", "hello", *_ctx(CLIENT))
    assert "sockhash socks has no socket under key 0a 00 00 02" in out


def test_sk_msg_redirect_into_peer_socket() -> None:
    p = _json(
        REDIR,
        "--prog",
        "redir",
        "--msg",
        "hello",
        *_ctx(CLIENT),
        "--map",
        "socks",
        f"hex:{PEER_KEY}",
        "peer",
    )
    assert p["verdict"] == "SK_PASS"
    assert p["outcome"]["redirect"]["map"] == "socks"
    assert p["outcome"]["redirect"]["flags"] == "BPF_F_INGRESS"
    assert any("-> socket local 10.0.0.2:80 remote 10.0.0.1:4000" in e for e in p["effects"])
    (change,) = p["map_changes"]  # redirects[0] += 1 on the CPU the run used
    assert change["map"] == "redirects" and change["key"] == 0
    assert sum(change["new"]) - sum(change["old"]) == 1


def test_sk_msg_ipv6_socket_is_passed_untouched() -> None:
    p = _json(
        REDIR,
        "--prog",
        "redir",
        "--hex",
        "00ff",
        "--ctx",
        "remote_ip6=fd00::2",
        "--ctx",
        "local_ip6=fd00::1",
    )
    assert p["verdict"] == "SK_PASS" and "outcome" not in p
    assert "AF_INET6 local [fd00::1]:0 remote [fd00::2]:0" in p["summary"]


def test_sock_ops_fills_sockhash_with_the_socket_of_the_ctx() -> None:
    server = ["local_ip4=10.0.0.2", "local_port=80", "remote_ip4=10.0.0.1", "remote_port=4000"]
    p = _json(REDIR, "--prog", "track", "--ctx", "op=PASSIVE_ESTABLISHED_CB", *_ctx(server))
    assert p["verdict"] == "1" and p["outcome"] == {"reply": 0, "cb_flags": 0}
    (change,) = p["map_changes"]
    assert change["map"] == "socks" and change["old"] is None
    assert change["key"] == " ".join(PEER_KEY[i : i + 2] for i in range(0, 24, 2))
    assert change["new"] == "socket local 10.0.0.2:80 remote 10.0.0.1:4000"
    p = _json(REDIR, "--prog", "track", "--ctx", "op=BPF_SOCK_OPS_TCP_CONNECT_CB", *_ctx(server))
    assert p["verdict"] == "1" and "map_changes" not in p  # not an established callback


def test_sock_ops_ctx_fields_reach_the_program(tmp_path) -> None:
    src = tmp_path / "seen.bpfd"
    src.write_text(SEEN)
    p = _json(
        str(src),
        "--ctx",
        "op=TCP_CONNECT_CB",
        "--ctx",
        "snd_cwnd=10",
        "--ctx",
        "state=BPF_TCP_SYN_SENT",
        "--ctx",
        "local_port=40000",
        "--ctx",
        "remote_port=80",
        "--ctx",
        "remote_ip4=192.0.2.7",
    )
    (change,) = p["map_changes"]
    assert change["new"] == {
        "op": 3,  # BPF_SOCK_OPS_TCP_CONNECT_CB
        "cwnd": 10,
        "state": 2,  # BPF_TCP_SYN_SENT
        "lport": 40000,  # host order in the struct
        "rport": 80,  # network order in the struct, read as be16
        "remote_ip": "192.0.2.7",
    }
    assert p["outcome"] == {"reply": 0, "cb_flags": 4}  # BPF_SOCK_OPS_STATE_CB_FLAG
    assert "bpf_sock_ops_cb_flags: BPF_SOCK_OPS_STATE_CB_FLAG" in p["effects"]
    p = _json(str(src), "--ctx", "op=RTO_CB")
    assert p["verdict"] == "0"
    assert any("fails this callback (-EPERM)" in e for e in p["effects"])


@pytest.mark.parametrize(
    "argv,code,text",
    [
        (["--prog", "redir", "--msg", "x", "--ctx", "local_ip=1"], "bad-ctx", "'local_ip6'?"),
        (["--prog", "redir", "--msg", "x", "--ctx", "size=3"], "bad-ctx", "message length"),
        (["--prog", "redir", "--msg", "x", "--ctx", "remote_port=70000"], "bad-ctx", "65535"),
        (["--prog", "redir", "--msg", "x", "--ctx", "remote_ip4=fd00::1"], "bad-ctx", "IPv4"),
        (
            ["--prog", "redir", "--msg", "x", "--ctx", "family=AF_INET", "--ctx", "local_ip6=::1"],
            "bad-ctx",
            "AF_INET6",
        ),
        (["--prog", "track", "--ctx", "op=ESTABLISHED"], "bad-ctx", "BPF_SOCK_OPS_TCP_CONNECT_CB"),
        (["--prog", "track", "--ctx", "args=1,2,3,4,5"], "bad-ctx", "4 elements"),
        (["--prog", "track", "--hex", "00"], "bad-input", "socket event"),
        (["--prog", "redir"], "bad-input", "--msg TEXT"),
        (["--prog", "redir", "--pcap", "x.pcap"], "bad-input", "captured frames"),
        (["--prog", "redir", "--msg", "x", "--map", "socks", "1", "2"], "bad-value", "peer"),
        (["--prog", "redir", "--msg", "x", "--map", "nope", "1", "2"], "bad-map", "socks"),
    ],
)
def test_ctx_and_input_errors_are_diagnostics(argv, code, text) -> None:
    rc, out, err = _run("run", REDIR, *argv)
    assert rc == 2, (out, err)
    assert f"error[{code}]" in err and text in err, err
    assert "Traceback" not in err


@pytest.mark.kernel
def test_kernel_test_run_refuses_sk_msg_and_sock_ops() -> None:
    """BPF_PROG_TEST_RUN of both kinds is ENOTSUPP (524) on this kernel, with or without a
    context: the reason `run` uses the interpreter for them."""
    from bpfdsl.compiler import compile_file
    from bpfdsl.kernel import syscall
    from bpfdsl.obj.collection import read_object
    from bpfdsl.runtime import loader

    spec = read_object(compile_file(REDIR).obj)
    with loader.load_collection(spec, pinning=False) as coll:
        for name, ctx in (("track", bytes(224)), ("redir", None), ("track", None)):
            with pytest.raises(syscall.BpfError) as ei:
                syscall.prog_test_run(coll.programs[name].fd, b"hello", ctx=ctx)
            assert ei.value.errno == 524, name
    rc, _, err = _run("run", REDIR, "--prog", "track", "--engine", "kernel")
    assert rc == 1 and "error[no-test-run]" in err and "--engine interp" in err
    rc, out, err = _run("run", REDIR, "--prog", "track")  # auto: the interpreter, said so
    assert rc == 0 and "engine: interp (BPF_PROG_TEST_RUN refuses sock_ops" in err


PAIR = """\
license "GPL"
map conns: sockmap(max_entries: 2)
sock_ops fn pair(skops) {
    if skops.op == BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB { sock_map_update(conns, 0, BPF_NOEXIST) }
    if skops.op == BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB { sock_map_update(conns, 1, BPF_EXIST) }
    return 1
}
"""


def test_sockmap_update_flags_as_the_kernel(tmp_path) -> None:
    """sock_map_update_common: BPF_NOEXIST into an empty sockmap slot adds the socket,
    BPF_EXIST into an empty one is ENOENT (nothing added)."""
    src = tmp_path / "pair.bpfd"
    src.write_text(PAIR)
    p = _json(str(src), "--ctx", "op=ACTIVE_ESTABLISHED_CB", *_ctx(CLIENT))
    (change,) = p["map_changes"]
    assert (change["map"], change["key"], change["old"]) == ("conns", 0, None)
    assert change["new"] == "socket local 10.0.0.1:4000 remote 10.0.0.2:80"
    p = _json(str(src), "--ctx", "op=PASSIVE_ESTABLISHED_CB", *_ctx(CLIENT))
    assert "map_changes" not in p
