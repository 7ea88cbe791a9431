/* tcpdump: vlan and ip */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

#define IS_VLAN(p) ((p) == bpf_htons(0x8100) || (p) == bpf_htons(0x88a8) || (p) == bpf_htons(0x9100))

SEC("xdp.frags")
int vlan_ip(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (!IS_VLAN(proto))
		return XDP_DROP;
	LOAD(__be16, inner, 16);
	return inner == bpf_htons(0x0800) ? XDP_PASS : XDP_DROP;
}
