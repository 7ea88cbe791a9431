"""Atomic replace under traffic: every packet gets a verdict from the old or the new program.

Two clang-19-compiled XDP programs each count UDP frames to the test port into their own
array map and pass them.  A bounded stream of frames flows from the peer while the first
program is replaced by the second; afterwards count_old + count_new == frames sent (none
went through without a program) and the socket received every frame.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time

import pytest
from support.netns import veth_net

from bpfdsl.obj import collection as objfile
from bpfdsl.runtime import attach, loader

PORT = 7300
SRC = r"""
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
struct { __uint(type, BPF_MAP_TYPE_ARRAY); __uint(max_entries, 1);
         __type(key, __u32); __type(value, __u64); } seen SEC(".maps");
SEC("xdp") int count(struct xdp_md *ctx) {
    void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data; struct iphdr *ip = (void *)(eth + 1);
    struct udphdr *udp = (void *)(ip + 1); __u32 k = 0; __u64 *v;
    if ((void *)(udp + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP)
        || ip->protocol != IPPROTO_UDP || udp->dest != bpf_htons(PORT)) return XDP_PASS;
    v = bpf_map_lookup_elem(&seen, &k);
    if (v) __sync_fetch_and_add(v, 1);
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
""".replace("PORT", str(PORT))


@pytest.fixture(scope="module")
def counter_obj(tmp_path_factory) -> bytes:
    if shutil.which("clang-19") is None:
        pytest.skip("clang-19 not installed")
    d = tmp_path_factory.mktemp("replace")
    (d / "count.c").write_text(SRC)
    arch = subprocess.run(["gcc", "-dumpmachine"], capture_output=True, text=True).stdout.strip()
    subprocess.run(
        [
            "clang-19",
            "-O2",
            "-g",
            "-target",
            "bpf",
            f"-I/usr/include/{arch}",
            "-c",
            str(d / "count.c"),
            "-o",
            str(d / "count.o"),
        ],
        check=True,
        timeout=120,
    )
    return (d / "count.o").read_bytes()


def _count(coll) -> int:
    from bpfdsl.kernel import syscall

    v = syscall.map_lookup(coll.maps["seen"].fd, (0).to_bytes(4, "little"), 8)
    return int.from_bytes(v, "little")


@pytest.mark.kernel
@pytest.mark.parametrize("mode,method", [("native", "link"), ("generic", "netlink")])
def test_replace_under_traffic_every_packet_gets_a_verdict(counter_obj, mode, method):
    total = 3000
    spec = objfile.read_object(counter_obj)
    with (
        veth_net("br") as net,
        loader.load_collection(spec) as old,
        loader.load_collection(spec) as new,
    ):
        with net.in_xdp_ns():
            first = attach.attach_xdp(
                old.programs["count"].fd, net.xdp_dev, mode=mode, method=method
            )
        try:
            with net.udp_receiver(PORT) as rx:
                sent: list[int] = []
                sender = threading.Thread(
                    target=lambda: sent.append(net.send_udp(PORT, total, interval=0.0005))
                )
                sender.start()
                deadline = time.monotonic() + 10
                while _count(old) < total // 3 and time.monotonic() < deadline:
                    time.sleep(0.005)
                with net.in_xdp_ns():
                    swapped = attach.attach_xdp(
                        new.programs["count"].fd, net.xdp_dev, mode=mode, replace=True
                    )
                sender.join(timeout=60)
                assert not sender.is_alive()
                received = rx.drain(limit=10, max_count=total)
            assert swapped.method == method
            assert swapped.prog_id != first.prog_id
            n_old, n_new = _count(old), _count(new)
            assert sent == [total]
            assert n_old > 0 and n_new > 0, (n_old, n_new)  # the swap happened mid-stream
            assert n_old + n_new == total  # no frame passed without a program
            assert received == total  # and both passed every frame
        finally:
            with net.in_xdp_ns():
                attach.detach_xdp(net.xdp_dev)
            if first.link_fd is not None:
                first.link_fd.close()


# ---- one-step attach over an earlier one ----


@pytest.mark.kernel
def test_second_one_step_attach_replaces_atomically(tmp_path):
    """`attach xdp FILE.o --pin-dir P` over an earlier one-step attach into P: the new
    program replaces the old on the same link (atomic update), P then holds only the new
    pins, packets get the new verdict; with --no-replace the busy dir is an error whose hint
    names the way to replace."""
    import json

    from support.netns import bpffs_dir, veth_net

    drop, pas = tmp_path / "drop.bpfd", tmp_path / "pass.bpfd"
    drop.write_text('license "GPL"\nxdp fn d(ctx) { return XDP_DROP }\n')
    pas.write_text('license "GPL"\nxdp fn p(ctx) { return XDP_PASS }\n')
    pin = bpffs_dir("bpfdsl_rv_")
    with veth_net("rv") as n:
        try:
            a = n.bpfdsl("--json", "attach", "xdp", str(drop), "--dev", n.xdp_dev, "--pin-dir", pin)
            assert a.returncode == 0, a.stderr
            first = json.loads(a.stdout)
            with n.udp_receiver(9000) as rx:
                n.send_udp(9000, 20)
                assert rx.drain() == 0
            b = n.bpfdsl("--json", "attach", "xdp", str(pas), "--dev", n.xdp_dev, "--pin-dir", pin)
            assert b.returncode == 0, b.stderr
            second = json.loads(b.stdout)
            assert second["link_id"] == first["link_id"]  # the same link, updated in place
            assert second["prog_id"] != first["prog_id"]
            assert sorted(os.listdir(os.path.join(pin, "progs"))) == ["p"]
            assert os.path.exists(os.path.join(pin, f"link_xdp_{n.xdp_dev}"))
            parent = os.path.dirname(pin)
            assert not [d for d in os.listdir(parent) if d.startswith(os.path.basename(pin) + "_")]
            with n.udp_receiver(9000) as rx:
                n.send_udp(9000, 20)
                assert rx.drain() == 20
            c = n.bpfdsl("attach", "xdp", str(pas), "--dev", n.xdp_dev, "--pin-dir", pin,
                         "--no-replace")  # fmt: skip
            assert c.returncode == 2 and "pin-dir-busy" in c.stderr
            assert "another --pin-dir" in c.stderr
        finally:
            n.bpfdsl("detach", "--dev", n.xdp_dev)
            if os.path.isdir(pin):
                subprocess.run([sys.executable, "-m", "bpfdsl", "unload", pin], timeout=120)
    assert not os.path.exists(pin)
