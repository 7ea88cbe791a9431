// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: maps whose slots are filled at load time from `.rel.maps` relocations --
 * a prog array (slot 1 = tail_target) and an array of maps (slot 0 = inner_a, slot 1 =
 * inner_b).  tail_entry tail-calls slot 1, so it returns tail_target's XDP_DROP; mim returns
 * the value in inner_b[0] (whatever user space put there), XDP_ABORTED if a slot is empty. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct inner_map {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} inner_a SEC(".maps"), inner_b SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct inner_map);
} outer SEC(".maps") = {
	.values = { [0] = &inner_a, [1] = &inner_b },
};

SEC("xdp")
int tail_target(struct xdp_md *ctx)
{
	return XDP_DROP;
}

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, int(void *));
} jumps SEC(".maps") = {
	.values = { [1] = (void *)&tail_target },
};

SEC("xdp")
int tail_entry(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &jumps, 1);
	return XDP_PASS;
}

SEC("xdp")
int mim(struct xdp_md *ctx)
{
	__u32 one = 1, zero = 0;
	void *inner = bpf_map_lookup_elem(&outer, &one);
	__u32 *v;

	if (!inner)
		return XDP_ABORTED;
	v = bpf_map_lookup_elem(inner, &zero);
	if (!v)
		return XDP_ABORTED;
	return *v;
}

char LICENSE[] SEC("license") = "GPL";
