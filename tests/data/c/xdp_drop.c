// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_drop.bpfd: every frame is dropped. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_drop(struct xdp_md *ctx)
{
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
