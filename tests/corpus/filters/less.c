/* tcpdump: less 64 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int less(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	return data_end - data <= 64 ? XDP_PASS : XDP_DROP;
}
