/* tcpdump: ip[0] & 0xf > 5 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ip_options(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__u8, vihl, 14);
	return (vihl & 0xf) > 5 ? XDP_PASS : XDP_DROP;
}
