// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_ipip_encap.bpfd: IPIP encapsulation (RFC 2003) as Katran's
 * encap_v4 (katran/lib/bpf/pckt_encap.h) does it: the outer iphdr built on the stack, its
 * checksum from bpf_csum_diff folded by hand, bpf_xdp_adjust_head(-20), the Ethernet
 * header rewritten with the saved MACs, the outer header copied in. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define LB_ADDR bpf_htonl(0x0a000001) /* 10.0.0.1 */

static __always_inline __u16 csum_fold_helper(__u64 csum)
{
	for (int i = 0; i < 4; i++)
		if (csum >> 16)
			csum = (csum & 0xffff) + (csum >> 16);
	return ~csum;
}

SEC("xdp")
int ipip_encap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	struct iphdr o = {};

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	/* as bpfdsl's parse ipv4: the whole header (options too) in the packet, not read */
	if ((void *)(ip + 1) > data_end || ip->ihl < 5 || (void *)ip + ip->ihl * 4 > data_end)
		return XDP_PASS;
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	o.version = 4;
	o.ihl = 5;
	o.tos = ip->tos;
	o.tot_len = bpf_htons(bpf_ntohs(ip->tot_len) + 20);
	o.ttl = 64;
	o.protocol = IPPROTO_IPIP;
	o.saddr = LB_ADDR;
	o.daddr = ip->daddr;
	o.check = csum_fold_helper(bpf_csum_diff(0, 0, (__be32 *)&o, sizeof(o), 0));
	if (bpf_xdp_adjust_head(ctx, -(int)sizeof(struct iphdr)))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	*ip = o;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
