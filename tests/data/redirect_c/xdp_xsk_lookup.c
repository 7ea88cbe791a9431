// SPDX-License-Identifier: GPL-2.0
/* FIELD-BUGS B10, first form: look the rx queue up in the XSKMAP (allowed since 5.3) and
 * redirect only when a socket is bound there, else XDP_PASS. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xsk_lookup(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;

	if (bpf_map_lookup_elem(&xsks, &q))
		return bpf_redirect_map(&xsks, q, 0);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
