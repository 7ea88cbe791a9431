// SPDX-License-Identifier: GPL-2.0
/* Checker corpus: bounded loops over packet bytes and an IPv6 extension-header walk. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ipv6.h>
#include <linux/in.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

SEC("xdp")
int sum_bytes(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	__u8 *p = (void *)(long)ctx->data;
	__u32 sum = 0, key = 1;
	__u64 *v;
	int i;

#pragma clang loop unroll(disable)
	for (i = 0; i < 64; i++) {
		if ((void *)(p + i + 1) > data_end)
			break;
		sum += p[i];
	}
	v = bpf_map_lookup_elem(&stats, &key);
	if (v)
		__sync_fetch_and_add(v, sum);
	return XDP_PASS;
}

SEC("xdp")
int ext_walk(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	struct ethhdr *eth = data;
	struct ipv6hdr *ip6;
	__u8 nexthdr, *hdr;
	int i;

	if ((void *)(eth + 1) > data_end || eth->h_proto != bpf_htons(ETH_P_IPV6))
		return XDP_PASS;
	ip6 = (void *)(eth + 1);
	if ((void *)(ip6 + 1) > data_end)
		return XDP_PASS;
	nexthdr = ip6->nexthdr;
	hdr = (void *)(ip6 + 1);
#pragma clang loop unroll(disable)
	for (i = 0; i < 4; i++) {
		if (nexthdr != IPPROTO_HOPOPTS && nexthdr != IPPROTO_ROUTING && nexthdr != IPPROTO_DSTOPTS)
			break;
		if ((void *)(hdr + 2) > data_end)
			return XDP_DROP;
		nexthdr = hdr[0];
		hdr += (hdr[1] + 1) * 8;
		if ((void *)hdr > data_end)
			return XDP_DROP;
	}
	return nexthdr == IPPROTO_UDP ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
