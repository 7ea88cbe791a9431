// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_sampler.bpfd: every sample_every-th frame (per CPU) goes to user
 * space through a perf event array, a struct sample followed by the frame's first snaplen
 * bytes (bpf_perf_event_output with the byte count in the flags' upper 32 bits). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

const volatile __u32 snaplen = 2048;
const volatile __u32 sample_every = 1;	/* 0: none (n % 0 is n in BPF) */

struct sample {
	__u32 ifindex;
	__u32 rx_queue;
	__u32 pkt_len;
	__u32 cap_len;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} sampled SEC(".maps");

SEC("xdp")
int xdp_sampler(struct xdp_md *ctx)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&seen, &key), *s;
	struct sample rec = {};
	__u32 len, cap;

	if (!n)
		return XDP_PASS;
	*n += 1;
	if (*n % (__u64)sample_every != 0)
		return XDP_PASS;
	len = ctx->data_end - ctx->data;
	cap = len > snaplen ? snaplen : len;
	rec.ifindex = ctx->ingress_ifindex;
	rec.rx_queue = ctx->rx_queue_index;
	rec.pkt_len = len;
	rec.cap_len = cap;
	if (bpf_perf_event_output(ctx, &samples, ((__u64)cap << 32) | BPF_F_CURRENT_CPU,
				  &rec, sizeof(rec)) == 0) {
		s = bpf_map_lookup_elem(&sampled, &key);
		if (s)
			*s += 1;
	}
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
