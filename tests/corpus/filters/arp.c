/* tcpdump: arp */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int arp(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	return proto == bpf_htons(0x0806) ? XDP_PASS : XDP_DROP;
}
