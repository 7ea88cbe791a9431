/* tcpdump: ether broadcast */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ether_broadcast(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, dst_hi, 0);
	LOAD(__be32, dst_lo, 2);
	return dst_lo == 0xffffffff && dst_hi == 0xffff ? XDP_PASS : XDP_DROP;
}
