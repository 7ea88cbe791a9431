// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_pass.bpfd: every frame goes on to the stack. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int xdp_pass(struct xdp_md *ctx)
{
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
