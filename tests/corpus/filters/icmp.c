/* tcpdump: icmp */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int icmp(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__u8, p, 23);
	return p == IPPROTO_ICMP ? XDP_PASS : XDP_DROP;
}
