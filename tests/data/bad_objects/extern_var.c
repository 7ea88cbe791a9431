// SPDX-License-Identifier: GPL-2.0
/* Bad-object fixture: references an extern variable (a libbpf .kconfig/.ksyms style extern);
 * bpfdsl's loader does not resolve externs and must say so. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

extern int some_external_counter;

SEC("xdp")
int uses_extern(struct xdp_md *ctx)
{
	return some_external_counter ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
