// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_gue_encap.bpfd: GUE version 0 (draft-ietf-intarea-gue-09 section
 * 3.1) over IPv4 as C encapsulators do it: the outer iphdr and udphdr + GUE header built on
 * the stack, the IPv4 checksum from bpf_csum_diff folded by hand, bpf_xdp_adjust_head(-32),
 * the Ethernet header rewritten with the saved MACs, the headers copied in.  UDP checksum 0
 * (allowed over IPv4, section 5.6); proto_ctype IPPROTO_IPIP. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define LB_ADDR bpf_htonl(0x0a000001) /* 10.0.0.1 */
#define GUE_PORT 6080

/* struct guehdr of include/net/gue.h (not a uapi header): version 0, no optional fields */
struct guehdr {
	__u8 hlen : 5, control : 1, version : 2; /* __LITTLE_ENDIAN_BITFIELD */
	__u8 proto_ctype;
	__be16 flags;
};

struct udpgue {
	struct udphdr udp;
	struct guehdr gue;
};

static __always_inline __u16 csum_fold_helper(__u64 csum)
{
	for (int i = 0; i < 4; i++)
		if (csum >> 16)
			csum = (csum & 0xffff) + (csum >> 16);
	return ~csum;
}

SEC("xdp")
int gue_encap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	struct iphdr o = {};
	struct udpgue u = {};
	struct iphdr *oip;
	struct udpgue *ou;
	__u32 sport;
	__u16 n;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	/* as bpfdsl's parse ipv4: the whole header (options too) in the packet, not read */
	if ((void *)(ip + 1) > data_end || ip->ihl < 5 || (void *)ip + ip->ihl * 4 > data_end)
		return XDP_PASS;
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	n = bpf_ntohs(ip->tot_len);
	sport = 49152 | (((__u32)(bpf_ntohl(ip->saddr) * 2654435761u) >> 18) & 0x3fff);
	o.version = 4;
	o.ihl = 5;
	o.tos = ip->tos;
	o.tot_len = bpf_htons(n + 32);
	o.ttl = 64;
	o.protocol = IPPROTO_UDP;
	o.saddr = LB_ADDR;
	o.daddr = ip->daddr;
	o.check = csum_fold_helper(bpf_csum_diff(0, 0, (__be32 *)&o, sizeof(o), 0));
	u.udp.source = bpf_htons((__u16)sport);
	u.udp.dest = bpf_htons(GUE_PORT);
	u.udp.len = bpf_htons(n + 12);
	u.gue.proto_ctype = IPPROTO_IPIP;
	if (bpf_xdp_adjust_head(ctx, -(int)(sizeof(o) + sizeof(u))))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	oip = (void *)(eth + 1);
	ou = (void *)(oip + 1);
	if ((void *)(ou + 1) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = bpf_htons(ETH_P_IP);
	*oip = o;
	*ou = u;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
