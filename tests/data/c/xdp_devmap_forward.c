// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_devmap_forward.bpfd: forward every frame to the interface the port
 * table names for its ingress interface (devmap_hash keyed by ingress ifindex), passing
 * frames with no entry; a devmap program (xdp/devmap, BPF_XDP_DEVMAP) counts what leaves. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);			/* ingress ifindex */
	__type(value, struct bpf_devmap_val);	/* egress ifindex (+ devmap program fd) */
} tx_ports SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} egress_count SEC(".maps");

SEC("xdp")
int forward(struct xdp_md *ctx)
{
	return bpf_redirect_map(&tx_ports, ctx->ingress_ifindex, XDP_PASS);
}

SEC("xdp/devmap")
int egress(struct xdp_md *ctx)
{
	__u32 key = 0;
	__u64 *cnt = bpf_map_lookup_elem(&egress_count, &key);

	if (cnt)
		*cnt += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
