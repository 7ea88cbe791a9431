// SPDX-License-Identifier: GPL-2.0
/* Checker corpus: BPF-to-BPF calls with stack pointers, map value arithmetic. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

struct rec { __u32 a; __u64 b; __u8 bytes[16]; };

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct rec);
} recs SEC(".maps");

static __attribute__((noinline)) int fill(struct rec *r, __u32 v)
{
	r->a = v;
	r->b = 0x1122334455667788ULL;
	return v & 1;
}

static __attribute__((noinline)) __u32 pick(struct rec *r, __u32 idx)
{
	return r->bytes[idx & 15];
}

SEC("xdp")
int calls(struct xdp_md *ctx)
{
	struct rec tmp = {};
	__u32 key = ctx->rx_queue_index;
	struct rec *r;

	if (fill(&tmp, ctx->ingress_ifindex))
		bpf_map_update_elem(&recs, &key, &tmp, BPF_ANY);
	r = bpf_map_lookup_elem(&recs, &key);
	if (!r)
		return XDP_PASS;
	return pick(r, ctx->ingress_ifindex) ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
