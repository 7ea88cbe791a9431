// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: writable globals in .data (initialised) and .bss (zero), and a constant
 * string in .rodata.str1.1.  Each run adds `step` (.data, 5) to `total` (.bss) and returns
 * XDP_PASS; `msg` keeps a string literal alive. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

__u64 step = 5;
__u64 total;

SEC("xdp")
int accumulate(struct xdp_md *ctx)
{
	total += step;
	bpf_printk("total %llu", total);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
