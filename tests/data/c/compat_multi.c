// SPDX-License-Identifier: GPL-2.0
/* Loader compat fixture: two XDP programs in one object sharing a map, plus a global
 * (non-inlined) function called BPF-to-BPF, so the object carries call relocations, func info
 * for a subprogram and a .rodata config used by both programs.
 *   - `count_pass`: counts the frame in `hits[0]` and returns XDP_PASS;
 *   - `count_drop`: counts the frame in `hits[1]` and returns XDP_DROP;
 *   both add `step` (config, default 1) through the global function bump(). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u64 step = 1;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} hits SEC(".maps");

__attribute__((noinline)) int bump(__u32 slot)
{
	__u64 *v = bpf_map_lookup_elem(&hits, &slot);

	if (!v)
		return -1;
	__sync_fetch_and_add(v, step);
	return 0;
}

SEC("xdp")
int count_pass(struct xdp_md *ctx)
{
	bump(0);
	return XDP_PASS;
}

SEC("xdp")
int count_drop(struct xdp_md *ctx)
{
	bump(1);
	return XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
