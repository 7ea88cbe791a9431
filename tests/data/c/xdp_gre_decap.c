// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_gre_decap.bpfd: GRE over IPv4 (RFC 2784; checksum, key and
 * sequence number of RFC 2890 skipped, not checked), not a fragment, version 0 without
 * routing.  Ethernet over GRE (ETH_P_TEB, with a whole inner Ethernet header) loses the
 * outer Ethernet, IPv4 and GRE headers; IPv4 or IPv6 over GRE (at least one inner byte)
 * loses the outer IPv4 and GRE headers and gets an Ethernet header with the outer MAC
 * addresses and the inner protocol.  Count decapsulations per CPU; anything else passes
 * unchanged; a failed adjust_head aborts (XDP_ABORTED). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define ETH_P_TEB 0x6558	/* transparent Ethernet bridging */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff
/* struct gre_base_hdr flags (uapi linux/if_tunnel.h, host order here) */
#define GRE_CSUM 0x8000
#define GRE_ROUTING 0x4000
#define GRE_KEY 0x2000
#define GRE_SEQ 0x1000
#define GRE_VERSION 0x0007

struct gre_base_hdr {		/* net/gre.h */
	__be16 flags;
	__be16 protocol;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} decapped SEC(".maps");

SEC("xdp")
int gre_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	struct gre_base_hdr *gre;
	struct iphdr *ip;
	__u8 *inner;
	__u16 flags;
	__be16 proto;
	__u32 key = 0;
	__u64 *cnt;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_GRE || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
		return XDP_PASS;
	gre = (void *)ip + ip->ihl * 4;
	if ((void *)(gre + 1) > data_end)
		return XDP_PASS;
	flags = bpf_ntohs(gre->flags);
	if (flags & (GRE_VERSION | GRE_ROUTING))
		return XDP_PASS;
	inner = (void *)(gre + 1);
	if (flags & GRE_CSUM)
		inner += 4;
	if (flags & GRE_KEY)
		inner += 4;
	if (flags & GRE_SEQ)
		inner += 4;
	proto = gre->protocol;
	if (proto == bpf_htons(ETH_P_IP) || proto == bpf_htons(ETH_P_IPV6)) {
		if ((void *)(inner + 1) > data_end)
			return XDP_PASS;
		__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
		__builtin_memcpy(src, eth->h_source, ETH_ALEN);
		if (bpf_xdp_adjust_head(ctx, (int)((void *)inner - data) - ETH_HLEN))
			return XDP_ABORTED;
		data = (void *)(long)ctx->data;
		data_end = (void *)(long)ctx->data_end;
		eth = data;
		if ((void *)(eth + 1) > data_end)
			return XDP_ABORTED;
		__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
		__builtin_memcpy(eth->h_source, src, ETH_ALEN);
		eth->h_proto = proto;
	} else if (proto == bpf_htons(ETH_P_TEB)) {
		if ((void *)(inner + ETH_HLEN) > data_end)
			return XDP_PASS;
		if (bpf_xdp_adjust_head(ctx, (int)((void *)inner - data)))
			return XDP_ABORTED;
	} else {
		return XDP_PASS;
	}
	cnt = bpf_map_lookup_elem(&decapped, &key);
	if (cnt)
		*cnt += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
