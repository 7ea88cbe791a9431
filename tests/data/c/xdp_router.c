// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_router.bpfd: an IPv4/IPv6 router on bpf_fib_lookup after the
 * kernel's samples/bpf/xdp_fwd_kern.c.  On BPF_FIB_LKUP_RET_SUCCESS with the egress
 * interface in tx_ports: TTL / hop limit - 1 (IPv4 checksum updated incrementally, RFC 1624,
 * as ip_decrease_ttl), MACs from the FIB, redirect through tx_ports; everything else
 * (TTL <= 1, NO_NEIGH and the other results, truncated headers) goes to the stack. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2
#define AF_INET6 10
#define IPV6_FLOWINFO_MASK bpf_htonl(0x0FFFFFFF)

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} forwarded SEC(".maps");

static __always_inline int ip_decrease_ttl(struct iphdr *iph)
{
	__u32 check = (__u32)iph->check;

	check += (__u32)bpf_htons(0x0100);
	iph->check = (__sum16)(check + (check >= 0xFFFF));
	return --iph->ttl;
}

static __always_inline int send(struct xdp_md *ctx, struct ethhdr *eth,
				struct bpf_fib_lookup *fib)
{
	__u32 key = 0;
	__u64 *cnt;

	__builtin_memcpy(eth->h_dest, fib->dmac, ETH_ALEN);
	__builtin_memcpy(eth->h_source, fib->smac, ETH_ALEN);
	cnt = bpf_map_lookup_elem(&forwarded, &key);
	if (cnt)
		*cnt += 1;
	return bpf_redirect_map(&tx_ports, fib->ifindex, XDP_PASS);
}

SEC("xdp")
int xdp_router(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct bpf_fib_lookup fib = {};
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *iph = (void *)(eth + 1);

		if ((void *)(iph + 1) > data_end || iph->ihl < 5 ||
		    (void *)iph + iph->ihl * 4 > data_end)
			return XDP_PASS;
		if (iph->ttl <= 1)
			return XDP_PASS;
		fib.family = AF_INET;
		fib.tos = iph->tos;
		fib.l4_protocol = iph->protocol;
		fib.tot_len = bpf_ntohs(iph->tot_len);
		fib.ipv4_src = iph->saddr;
		fib.ipv4_dst = iph->daddr;
		fib.ifindex = ctx->ingress_ifindex;
		if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
			return XDP_PASS;
		if (!bpf_map_lookup_elem(&tx_ports, &fib.ifindex))
			return XDP_PASS;
		ip_decrease_ttl(iph);
		return send(ctx, eth, &fib);
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6h = (void *)(eth + 1);

		if ((void *)(ip6h + 1) > data_end)
			return XDP_PASS;
		if (ip6h->hop_limit <= 1)
			return XDP_PASS;
		fib.family = AF_INET6;
		fib.flowinfo = *(__be32 *)ip6h & IPV6_FLOWINFO_MASK;
		fib.l4_protocol = ip6h->nexthdr;
		fib.tot_len = bpf_ntohs(ip6h->payload_len);
		__builtin_memcpy(fib.ipv6_src, &ip6h->saddr, 16);
		__builtin_memcpy(fib.ipv6_dst, &ip6h->daddr, 16);
		fib.ifindex = ctx->ingress_ifindex;
		if (bpf_fib_lookup(ctx, &fib, sizeof(fib), 0) != BPF_FIB_LKUP_RET_SUCCESS)
			return XDP_PASS;
		if (!bpf_map_lookup_elem(&tx_ports, &fib.ifindex))
			return XDP_PASS;
		ip6h->hop_limit--;
		return send(ctx, eth, &fib);
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
