/* tcpdump: ip6 and tcp */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ip6_tcp(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x86dd))
		return XDP_DROP;
	LOAD(__u8, nh, 20);
	if (nh == IPPROTO_TCP)
		return XDP_PASS;
	if (nh == IPPROTO_FRAGMENT) {
		LOAD(__u8, fnh, 54);
		return fnh == IPPROTO_TCP ? XDP_PASS : XDP_DROP;
	}
	return XDP_DROP;
}
