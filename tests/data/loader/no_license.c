// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: a valid XDP program in an object without a license section. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int unlicensed(struct xdp_md *ctx)
{
	return XDP_PASS;
}
