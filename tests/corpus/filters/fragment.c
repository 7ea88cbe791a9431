/* tcpdump: ip[6:2] & 0x1fff != 0 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int fragment(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__be16, frag, 20);
	return frag & bpf_htons(0x1fff) ? XDP_PASS : XDP_DROP;
}
