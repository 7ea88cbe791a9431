// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: reads the EtherType without checking data_end, so the kernel verifier
 * rejects it ("invalid access to packet").  The read is on the line marked BAD. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int no_bounds(struct xdp_md *ctx)
{
	struct ethhdr *eth = (void *)(long)ctx->data;

	if (eth->h_proto == 0x0008) /* BAD */
		return XDP_DROP;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
