// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_udp_filter.bpfd: drop UDP datagrams (over IPv4, or IPv6 after up
 * to 6 extension headers) to a port set at load time; count drops and passes per CPU.
 * Frames cut inside a header pass without being counted, as in the .bpfd version. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define IPV6_EXT_MAX 6

const volatile __be16 port = bpf_htons(9999);	/* network order; --set port=N */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} passes SEC(".maps");

static __always_inline int count(void *map)
{
	__u32 key = 0;
	__u64 *v = bpf_map_lookup_elem(map, &key);

	if (v)
		*v += 1;
	return 0;
}

SEC("xdp")
int udp_filter(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	void *cur = eth + 1;
	struct udphdr *udp;
	__u8 l4;

	if (cur > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = cur;

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return XDP_PASS;
		l4 = ip->protocol;
		cur = (void *)ip + ip->ihl * 4;
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = cur;
		int i;

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		l4 = ip6->nexthdr;
		cur = ip6 + 1;
		for (i = 0;; i++) {
			__u8 *ext = cur;

			if (l4 != IPPROTO_HOPOPTS && l4 != IPPROTO_ROUTING &&
			    l4 != IPPROTO_FRAGMENT && l4 != IPPROTO_DSTOPTS)
				break;
			if (i >= IPV6_EXT_MAX)	/* a 7th extension header: give up */
				return XDP_PASS;
			if ((void *)(ext + 8) > data_end)
				return XDP_PASS;
			cur = ext + (l4 == IPPROTO_FRAGMENT ? 8 : (ext[1] + 1) * 8);
			l4 = ext[0];
		}
	} else {
		count(&passes);
		return XDP_PASS;
	}
	if (l4 == IPPROTO_UDP) {
		udp = cur;
		if ((void *)(udp + 1) > data_end)
			return XDP_PASS;
		if (udp->dest == port) {
			count(&drops);
			return XDP_DROP;
		}
	}
	count(&passes);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
