/* tcpdump: host 10.2.1.2 */
// SPDX-License-Identifier: GPL-2.0
#include "corpus.h"

#define ADDR bpf_htonl(0x0a020102)	/* 10.2.1.2 */

SEC("xdp.frags")
int host(struct xdp_md *ctx)
{
	void *data = DATA(ctx);
	void *data_end = DATA_END(ctx);

	LOAD(__be16, proto, 12);
	if (proto == bpf_htons(0x0800)) {
		LOAD(__be32, src, 26);
		if (src == ADDR)
			return XDP_PASS;
		LOAD(__be32, dst, 30);
		return dst == ADDR ? XDP_PASS : XDP_DROP;
	}
	if (proto == bpf_htons(0x0806) || proto == bpf_htons(0x8035)) {
		LOAD(__be32, spa, 28);
		if (spa == ADDR)
			return XDP_PASS;
		LOAD(__be32, tpa, 38);
		return tpa == ADDR ? XDP_PASS : XDP_DROP;
	}
	return XDP_DROP;
}
