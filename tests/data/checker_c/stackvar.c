// SPDX-License-Identifier: GPL-2.0
/* Checker corpus: stack arrays with bounded variable indexes, records with 8-byte members
 * built on the stack (B07 layout), spills around helper calls. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct pair { __s32 ifindex; __s64 value; };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct pair);
} pairs SEC(".maps");

SEC("xdp")
int stackvar(struct xdp_md *ctx)
{
	__u32 table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	__u32 idx = ctx->rx_queue_index & 7;
	__u32 key = 0;
	struct pair p = {.ifindex = ctx->ingress_ifindex, .value = 0x1122334455667788LL};
	__u64 t = bpf_ktime_get_ns();

	table[idx] += (__u32)t;
	bpf_map_update_elem(&pairs, &key, &p, BPF_ANY);
	return table[(idx + 1) & 7] & 1 ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
