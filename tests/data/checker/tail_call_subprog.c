// bpf_tail_call in static subprograms (tests/checker/test_checker_tail_call_subprog.py):
// Linux 6.18 check_helper_call walks the call as the function's exit (the tail call
// succeeds: packet pointers cleared, r0 unknown) and pushes the path where it fails.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} jt SEC(".maps");
char LICENSE[] SEC("license") = "GPL";

static __noinline int leaf_read_after(struct xdp_md *ctx, unsigned char *p, void *end)
{
	int r = 0;

	if ((void *)(p + 1) > end)
		return 0;
	bpf_tail_call(ctx, &jt, 0);
	r = *p; /* the path where the tail call failed: p is still a packet pointer */
	return r;
}

SEC("xdp") int ok_read_after(struct xdp_md *ctx)
{
	return leaf_read_after(ctx, (void *)(long)ctx->data, (void *)(long)ctx->data_end) > 5 ?
		       XDP_PASS : XDP_TX;
}

static __noinline int leaf_read_before(struct xdp_md *ctx, unsigned char *p, void *end)
{
	int r = 0;

	if ((void *)(p + 1) > end)
		return 0;
	r = *p;
	bpf_tail_call(ctx, &jt, 0);
	return r;
}

SEC("xdp") int ok_read_before(struct xdp_md *ctx)
{
	return leaf_read_before(ctx, (void *)(long)ctx->data, (void *)(long)ctx->data_end) > 5 ?
		       XDP_PASS : XDP_TX;
}

static __noinline int inner(struct xdp_md *ctx, int n)
{
	bpf_tail_call(ctx, &jt, 0);
	return n + 1;
}

static __noinline int outer(struct xdp_md *ctx, unsigned char *p, void *end)
{
	if ((void *)(p + 2) > end)
		return 0;
	return inner(ctx, p[0]) + 3;
}

SEC("xdp") int ok_nested(struct xdp_md *ctx)
{
	return outer(ctx, (void *)(long)ctx->data, (void *)(long)ctx->data_end) > 5 ? XDP_PASS :
										      XDP_TX;
}

static __noinline int leaf_key(struct xdp_md *ctx, int k)
{
	bpf_tail_call(ctx, &jt, k);
	return k;
}

SEC("xdp") int bad_stale_pointer(struct xdp_md *ctx)
{
	unsigned char *p = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	int r;

	if ((void *)(p + 1) > end)
		return 0;
	r = leaf_key(ctx, 0);
	return *p + r > 5 ? XDP_PASS : XDP_TX; /* p was invalidated by the tail call */
}
