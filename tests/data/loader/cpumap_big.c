// SPDX-License-Identifier: GPL-2.0
/* Loader fixture (FIELD-BUGS B09): a cpumap declared with 4096 entries, far above the
 * possible CPUs of a test machine; the loader must clamp it.  Redirects to slot 0 with
 * XDP_PASS as the fallback action. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} big_cpu_map SEC(".maps");

SEC("xdp")
int to_cpu0(struct xdp_md *ctx)
{
	return bpf_redirect_map(&big_cpu_map, 0, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
