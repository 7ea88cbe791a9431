// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: one plain XDP program next to a program of a section bpfdsl does not
 * load (a kprobe), as an object built for several tools may hold. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass_all(struct xdp_md *ctx)
{
	return XDP_PASS;
}

SEC("kprobe/do_nothing")
int probe(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
