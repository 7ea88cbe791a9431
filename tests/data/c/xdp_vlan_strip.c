// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_vlan_strip.bpfd: pop the outer 802.1Q/802.1AD tag with
 * bpf_xdp_adjust_head(+4) after moving the MAC addresses up; untagged frames pass as they are. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

SEC("xdp")
int vlan_strip(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct vlan_hdr *vlan;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	__be16 inner;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q) && eth->h_proto != bpf_htons(ETH_P_8021AD))
		return XDP_PASS;
	vlan = (void *)(eth + 1);
	if ((void *)(vlan + 1) > data_end)
		return XDP_PASS;
	inner = vlan->h_vlan_encapsulated_proto;
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	if (bpf_xdp_adjust_head(ctx, (int)sizeof(*vlan)))
		return XDP_DROP;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = inner;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
