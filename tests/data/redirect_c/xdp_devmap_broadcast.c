// SPDX-License-Identifier: GPL-2.0
/* Test program for tests/test_devmap.py: broadcast every frame to all ports of a devmap with
 * the redirect flags taken from config[0] (BPF_F_BROADCAST [| BPF_F_EXCLUDE_INGRESS]). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, struct bpf_devmap_val);
} ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} config SEC(".maps");

SEC("xdp")
int broadcast(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *flags = bpf_map_lookup_elem(&config, &zero);

	if (!flags)
		return XDP_PASS;
	return bpf_redirect_map(&ports, 0, *flags);
}

char LICENSE[] SEC("license") = "GPL";
