// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_reflect.bpfd: send UDP and TCP over IPv4 back where they came from
 * by swapping the MAC addresses, the IP addresses and the ports, and XDP_TX.  Swapping two
 * 16-bit-aligned fields leaves the one's-complement sums unchanged, so the IPv4 header
 * checksum and the L4 checksum stay correct without an update.  Anything else passes. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/tcp.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

SEC("xdp")
int reflect(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	unsigned char mac[ETH_ALEN];
	struct iphdr *ip;
	void *l4;
	__be32 a;
	__be16 p;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return XDP_PASS;
	l4 = (void *)ip + ip->ihl * 4;
	if (ip->protocol == IPPROTO_UDP) {
		struct udphdr *udp = l4;

		if ((void *)(udp + 1) > data_end)
			return XDP_PASS;
		p = udp->source;
		udp->source = udp->dest;
		udp->dest = p;
	} else if (ip->protocol == IPPROTO_TCP) {
		struct tcphdr *tcp = l4;

		if ((void *)(tcp + 1) > data_end || tcp->doff < 5)
			return XDP_PASS;
		p = tcp->source;
		tcp->source = tcp->dest;
		tcp->dest = p;
	} else {
		return XDP_PASS;
	}
	a = ip->saddr;
	ip->saddr = ip->daddr;
	ip->daddr = a;
	__builtin_memcpy(mac, eth->h_source, ETH_ALEN);
	__builtin_memcpy(eth->h_source, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(eth->h_dest, mac, ETH_ALEN);
	return XDP_TX;
}

char LICENSE[] SEC("license") = "GPL";
