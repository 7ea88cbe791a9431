/* tcpdump: icmp[icmptype] == 42 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int icmp_type(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__u8, p, 23);
	if (p != IPPROTO_ICMP)
		return XDP_DROP;
	LOAD(__be16, frag, 20);
	if (frag & bpf_htons(0x1fff))
		return XDP_DROP;
	LOAD(__u8, vihl, 14);
	__u32 l4 = 14 + (vihl & 0xf) * 4;
	LOAD(__u8, type, l4);
	return type == 42 ? XDP_PASS : XDP_DROP;
}
