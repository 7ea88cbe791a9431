/* tcpdump: src net 10.0.0.0/8 */
// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_src_net.bpfd: libpcap's `src net 10.0.0.0/8` (ip or arp or
 * rarp): PASS when the IPv4 source or the ARP/RARP sender protocol address (frame bytes
 * 26 and 28) is in 10.0.0.0/8, DROP otherwise and on a frame that ends before it. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define NET bpf_htonl(0x0a000000)
#define MASK bpf_htonl(0xff000000)

SEC("xdp.frags")
int xdp_src_net(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__be16 proto;
	__be32 addr;

	if (data + 14 > data_end)
		return XDP_DROP;
	proto = *(__be16 *)(data + 12);
	if (proto == bpf_htons(ETH_P_IP)) {
		if (data + 30 > data_end)
			return XDP_DROP;
		addr = *(__be32 *)(data + 26);
	} else if (proto == bpf_htons(ETH_P_ARP) || proto == bpf_htons(ETH_P_RARP)) {
		if (data + 32 > data_end)
			return XDP_DROP;
		addr = *(__be32 *)(data + 28);
	} else {
		return XDP_DROP;
	}
	return (addr & MASK) == NET ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
