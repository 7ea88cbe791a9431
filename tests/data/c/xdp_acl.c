// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_acl.bpfd: drop frames whose IPv4 or IPv6 source address is in an
 * LPM block list (one trie per family); everything else passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct ipv4_prefix {
	__u32 prefixlen;	/* bits, host order (LPM trie key header) */
	__u8 addr[4];		/* network order */
};

struct ipv6_prefix {
	__u32 prefixlen;
	__u8 addr[16];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipv4_prefix);
	__type(value, __u8);
} blocklist_v4 SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipv6_prefix);
	__type(value, __u8);
} blocklist_v6 SEC(".maps");

SEC("xdp")
int acl(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		struct ipv4_prefix k4 = { .prefixlen = 32 };

		if ((void *)(ip + 1) > data_end)
			return XDP_PASS;
		__builtin_memcpy(k4.addr, &ip->saddr, 4);
		if (bpf_map_lookup_elem(&blocklist_v4, &k4))
			return XDP_DROP;
		return XDP_PASS;
	}
	if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct ipv6_prefix k6 = { .prefixlen = 128 };

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		__builtin_memcpy(k6.addr, &ip6->saddr, 16);
		if (bpf_map_lookup_elem(&blocklist_v6, &k6))
			return XDP_DROP;
		return XDP_PASS;
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
