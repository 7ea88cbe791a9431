/* tcpdump: dst net 224.0.0.0/4 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

#define NET bpf_htonl(0xe0000000)	/* 224.0.0.0/4 */
#define MASK bpf_htonl(0xf0000000)

SEC("xdp.frags")
int dst_net(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto == bpf_htons(0x0800)) {
		LOAD(__be32, dst, 30);
		return (dst & MASK) == NET ? XDP_PASS : XDP_DROP;
	}
	if (proto == bpf_htons(0x0806) || proto == bpf_htons(0x8035)) {
		LOAD(__be32, tpa, 38);
		return (tpa & MASK) == NET ? XDP_PASS : XDP_DROP;
	}
	return XDP_DROP;
}
