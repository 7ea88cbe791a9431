// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_vxlan_encap.bpfd: VXLAN over IPv4 (RFC 7348) as C encapsulators
 * do it: the outer iphdr and udphdr + VXLAN header built on the stack, the IPv4 checksum
 * from bpf_csum_diff folded by hand, bpf_xdp_adjust_head(-50), the headers copied in.
 * UDP checksum 0 (none), allowed over IPv4. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define VTEP_SRC bpf_htonl(0x0a000001) /* 10.0.0.1 */
#define VTEP_DST bpf_htonl(0x0a000002) /* 10.0.0.2 */

struct udpvx {
	struct udphdr udp;
	__be32 flags;
	__be32 vni;
};

static __always_inline __u16 csum_fold_helper(__u64 csum)
{
	for (int i = 0; i < 4; i++)
		if (csum >> 16)
			csum = (csum & 0xffff) + (csum >> 16);
	return ~csum;
}

SEC("xdp")
int vxlan_encap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	struct iphdr o = {};
	struct udpvx u = {};
	struct iphdr *oip;
	struct udpvx *ou;
	__u32 n, sport;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	n = (__u32)(data_end - data);
	sport = 49152 | (((__u32)(n * 2654435761u) >> 18) & 0x3fff);
	o.version = 4;
	o.ihl = 5;
	o.tot_len = bpf_htons((__u16)(n + 36));
	o.frag_off = bpf_htons(0x4000);
	o.ttl = 64;
	o.protocol = IPPROTO_UDP;
	o.saddr = VTEP_SRC;
	o.daddr = VTEP_DST;
	o.check = csum_fold_helper(bpf_csum_diff(0, 0, (__be32 *)&o, sizeof(o), 0));
	u.udp.source = bpf_htons((__u16)sport);
	u.udp.dest = bpf_htons(4789);
	u.udp.len = bpf_htons((__u16)(n + 16));
	u.flags = bpf_htonl(0x08000000);
	u.vni = bpf_htonl(42 << 8);
	if (bpf_xdp_adjust_head(ctx, -50))
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
