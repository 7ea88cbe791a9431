// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_xsk_redirect.bpfd: hand each frame to the AF_XDP socket bound to
 * its rx queue; XDP_PASS when no socket is in that slot (fallback in the flags' low bits). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xsk_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
