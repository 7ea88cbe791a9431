/* tcpdump: ip6 and udp port 547 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ip6_udp_port(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto != bpf_htons(0x86dd))
		return XDP_DROP;
	LOAD(__u8, nh, 20);
	if (nh != IPPROTO_UDP)
		return XDP_DROP;
	LOAD(__be16, sport, 54);
	if (sport == bpf_htons(547))
		return XDP_PASS;
	LOAD(__be16, dport, 56);
	return dport == bpf_htons(547) ? XDP_PASS : XDP_DROP;
}
