// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_vlan_strip.bpfd: pop the outer 802.1Q/802.1AD tag with
 * bpf_xdp_adjust_head(+4): the MAC addresses move 4 bytes towards the payload and h_proto
 * becomes the tag's encapsulated protocol; count pops per CPU.  Untagged or truncated frames
 * pass unchanged; a failed adjust_head aborts (XDP_ABORTED). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct vlan_hdr {
	__be16 h_vlan_TCI;
	__be16 h_vlan_encapsulated_proto;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} popped SEC(".maps");

SEC("xdp")
int vlan_strip(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct vlan_hdr *tag;
	unsigned char dst[ETH_ALEN], src[ETH_ALEN];
	__be16 inner;
	__u32 key = 0;
	__u64 *cnt;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_8021Q) && eth->h_proto != bpf_htons(ETH_P_8021AD))
		return XDP_PASS;
	tag = (void *)(eth + 1);
	if ((void *)(tag + 1) > data_end)
		return XDP_PASS;
	__builtin_memcpy(dst, eth->h_dest, ETH_ALEN);
	__builtin_memcpy(src, eth->h_source, ETH_ALEN);
	inner = tag->h_vlan_encapsulated_proto;
	if (bpf_xdp_adjust_head(ctx, (int)sizeof(*tag)))
		return XDP_ABORTED;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_ABORTED;
	__builtin_memcpy(eth->h_dest, dst, ETH_ALEN);
	__builtin_memcpy(eth->h_source, src, ETH_ALEN);
	eth->h_proto = inner;
	cnt = bpf_map_lookup_elem(&popped, &key);
	if (cnt)
		*cnt += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
