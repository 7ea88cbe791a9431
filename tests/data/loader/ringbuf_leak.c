// A ring buffer reservation leaked on one path (the `return XDP_DROP`): the kernel
// verifier refuses it ("Unreleased reference"), and so does `bpfdsl check`.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct event { __u32 len; };
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } rb SEC(".maps");

SEC("xdp") int leak(struct xdp_md *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
	if (!e)
		return XDP_PASS;
	e->len = ctx->data_end - ctx->data;
	if (e->len > 100)
		return XDP_DROP;
	bpf_ringbuf_submit(e, 0);
	return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
