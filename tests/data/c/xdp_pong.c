// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_pong.bpfd: send UDP and TCP (IPv4 and IPv6) and IPv4 pings back
 * where they came from: swap MAC addresses, IP addresses and ports, answer ICMP echo
 * (type 8 code 0 -> echo reply), set TTL / hop limit to 64, count per CPU and XDP_TX.
 * Checksums: swapping two 16-bit-aligned fields leaves every one's-complement sum unchanged;
 * the TTL write updates the IPv4 header checksum and the ICMP type write the ICMP checksum
 * incrementally (RFC 1624).  IPv6 has no header checksum and the hop limit is not in the
 * pseudo-header.  Anything else passes unchanged. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/ipv6.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* <linux/icmp.h> drags in libc headers that -target bpf cannot use: the 8-byte header here */
#define ICMP_ECHOREPLY 0
#define ICMP_ECHO 8
struct icmphdr {
	__u8 type;
	__u8 code;
	__sum16 checksum;
	__be16 id;
	__be16 sequence;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} reflected SEC(".maps");

/* RFC 1624 eqn. 3: HC' = ~(~HC + ~m + m'), on raw (network order) 16-bit words. */
static __always_inline void csum_replace2(__sum16 *sum, __u16 old, __u16 new)
{
	__u32 c = (__u16)~*sum + (__u16)~old + new;

	c = (c & 0xffff) + (c >> 16);
	c = (c & 0xffff) + (c >> 16);
	*sum = (__sum16)~c;
}

static __always_inline int swap_ports(void *l4, void *data_end, __u8 proto)
{
	__be16 p;

	if (proto == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end)
			return -1;
		p = udp->source;
		udp->source = udp->dest;
		udp->dest = p;
		return 0;
	}
	if (proto == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end || tcp->doff < 5)
			return -1;
		p = tcp->source;
		tcp->source = tcp->dest;
		tcp->dest = p;
		return 0;
	}
	return -1;
}

SEC("xdp")
int pong(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char mac[ETH_ALEN];
	__u32 key = 0;
	__u64 *cnt;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		void *l4;
		__be32 a;
		__u16 old;

		if ((void *)(ip + 1) > data_end || ip->ihl < 5)
			return XDP_PASS;
		l4 = (void *)ip + ip->ihl * 4;
		if (ip->protocol == IPPROTO_ICMP) {
			struct icmphdr *icmp = l4;

			if ((void *)(icmp + 1) > data_end)
				return XDP_PASS;
			if (icmp->type != ICMP_ECHO || icmp->code != 0)
				return XDP_PASS;
			old = *(__u16 *)icmp;
			icmp->type = ICMP_ECHOREPLY;
			csum_replace2(&icmp->checksum, old, *(__u16 *)icmp);
		} else if (swap_ports(l4, data_end, ip->protocol)) {
			return XDP_PASS;
		}
		a = ip->saddr;
		ip->saddr = ip->daddr;
		ip->daddr = a;
		old = *(__u16 *)&ip->ttl;
		ip->ttl = 64;
		csum_replace2(&ip->check, old, *(__u16 *)&ip->ttl);
	} else if (eth->h_proto == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr *ip6 = (void *)(eth + 1);
		struct in6_addr a;

		if ((void *)(ip6 + 1) > data_end)
			return XDP_PASS;
		if (swap_ports(ip6 + 1, data_end, ip6->nexthdr))
			return XDP_PASS;
		a = ip6->saddr;
		ip6->saddr = ip6->daddr;
		ip6->daddr = a;
		ip6->hop_limit = 64;
	} else {
		return XDP_PASS;
	}
	__builtin_memcpy(mac, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, mac, ETH_ALEN);
	cnt = bpf_map_lookup_elem(&reflected, &key);
	if (cnt)
		*cnt += 1;
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
