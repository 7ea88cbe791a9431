/* tcpdump: ip[2:2] > 576 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ip_len(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__be16, tot_len, 16);
	return bpf_ntohs(tot_len) > 576 ? XDP_PASS : XDP_DROP;
}
