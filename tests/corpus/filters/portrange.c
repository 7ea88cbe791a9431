/* tcpdump: portrange 1-1023 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

#define IN_RANGE(p) (bpf_ntohs(p) >= 1 && bpf_ntohs(p) <= 1023)

SEC("xdp.frags")
int portrange(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto == bpf_htons(0x86dd)) {
		LOAD(__u8, nh, 20);
		if (!HAS_PORTS(nh))
			return XDP_DROP;
		LOAD(__be16, sport, 54);
		if (IN_RANGE(sport))
			return XDP_PASS;
		LOAD(__be16, dport, 56);
		return IN_RANGE(dport) ? XDP_PASS : XDP_DROP;
	}
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__u8, p, 23);
	if (!HAS_PORTS(p))
		return XDP_DROP;
	LOAD(__be16, frag, 20);
	if (frag & bpf_htons(0x1fff))
		return XDP_DROP;
	LOAD(__u8, vihl, 14);
	__u32 l4 = 14 + (vihl & 0xf) * 4;
	LOAD(__be16, sport, l4);
	if (IN_RANGE(sport))
		return XDP_PASS;
	LOAD(__be16, dport, l4 + 2);
	return IN_RANGE(dport) ? XDP_PASS : XDP_DROP;
}
