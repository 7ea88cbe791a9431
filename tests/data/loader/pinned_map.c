// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: a hash map with pinning LIBBPF_PIN_BY_NAME; the program counts frames in
 * it (key 0), so two loads sharing the pin share the counter. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8);
	__uint(pinning, LIBBPF_PIN_BY_NAME);
	__type(key, __u32);
	__type(value, __u64);
} shared_count SEC(".maps");

SEC("xdp")
int count_shared(struct xdp_md *ctx)
{
	__u32 key = 0;
	__u64 one = 1, *v = bpf_map_lookup_elem(&shared_count, &key);

	if (v)
		__sync_fetch_and_add(v, 1);
	else
		bpf_map_update_elem(&shared_count, &key, &one, BPF_NOEXIST);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
