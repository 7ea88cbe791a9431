/* tcpdump: ether host 00:1f:29:da:2d:79 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

SEC("xdp.frags")
int ether_host(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	/* 00:1f:29:da:2d:79 as a 16-bit and a 32-bit word, compared as libpcap does */
	LOAD(__be16, dst_hi, 0);
	LOAD(__be32, dst_lo, 2);
	LOAD(__be16, src_hi, 6);
	LOAD(__be32, src_lo, 8);
	if (src_lo == bpf_htonl(0x29da2d79) && src_hi == bpf_htons(0x001f))
		return XDP_PASS;
	if (dst_lo == bpf_htonl(0x29da2d79) && dst_hi == bpf_htons(0x001f))
		return XDP_PASS;
	return XDP_DROP;
}
