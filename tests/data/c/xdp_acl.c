// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_acl.bpfd: drop frames whose IPv4 or IPv6 source address is in an
 * LPM block list (one trie per family), behind up to two VLAN tags (802.1Q / 802.1AD);
 * count drops per CPU in `dropped` (slot 0: IPv4, 1: IPv6).  Everything else passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct ipv4_prefix {
	__u32 prefixlen;	/* bits, host order (LPM trie key header) */
	__be32 addr;
};

struct ipv6_prefix {
	__u32 prefixlen;
	__u8 addr[16];		/* network order */
};

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipv4_prefix);
	__type(value, __u8);
} v4_block SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 1024);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct ipv6_prefix);
	__type(value, __u8);
} v6_block SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} dropped SEC(".maps");

static __always_inline int drop(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&dropped, &slot);

	if (v)
		*v += 1;
	return XDP_DROP;
}

SEC("xdp")
int acl(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur = eth + 1;
	__be16 proto;
	int i;

	if (cur > data_end)
		return XDP_PASS;
	proto = eth->h_proto;
	for (i = 0; i < 2; i++) {
		struct vlan_hdr *tag = cur;

		if (proto != bpf_htons(ETH_P_8021Q) && proto != bpf_htons(ETH_P_8021AD))
			break;
		if ((void *)(tag + 1) > data_end)
			return XDP_PASS;
		proto = tag->h_vlan_encapsulated_proto;
		cur = tag + 1;
	}
	if (proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;
		struct ipv4_prefix k4 = { .prefixlen = 32 };

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return XDP_PASS;
		k4.addr = ip->saddr;
		if (bpf_map_lookup_elem(&v4_block, &k4))
			return drop(0);
	} else if (proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		struct ipv6_prefix k6 = { .prefixlen = 128 };

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		__builtin_memcpy(k6.addr, &ip6->saddr, 16);
		if (bpf_map_lookup_elem(&v6_block, &k6))
			return drop(1);
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
