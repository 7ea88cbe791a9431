/* tcpdump: udp port 53 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int udp_port(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto == bpf_htons(0x86dd)) {
		LOAD(__u8, nh, 20);
		if (nh != IPPROTO_UDP)
			return XDP_DROP;
		LOAD(__be16, sport, 54);
		if (sport == bpf_htons(53))
			return XDP_PASS;
		LOAD(__be16, dport, 56);
		return dport == bpf_htons(53) ? XDP_PASS : XDP_DROP;
	}
	if (proto != bpf_htons(0x0800))
		return XDP_DROP;
	LOAD(__u8, p, 23);
	if (p != IPPROTO_UDP)
		return XDP_DROP;
	LOAD(__be16, frag, 20);
	if (frag & bpf_htons(0x1fff))
		return XDP_DROP;
	LOAD(__u8, vihl, 14);
	__u32 l4 = 14 + (vihl & 0xf) * 4;
	LOAD(__be16, sport, l4);
	if (sport == bpf_htons(53))
		return XDP_PASS;
	LOAD(__be16, dport, l4 + 2);
	return dport == bpf_htons(53) ? XDP_PASS : XDP_DROP;
}
