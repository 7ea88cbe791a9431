/* tcpdump: ether multicast */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ether_multicast(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__u8, first, 0);
	return first & 1 ? XDP_PASS : XDP_DROP;
}
