// NULL (0) as a helper's memory argument: the kernel takes it only where the proto says
// PTR_MAYBE_NULL (bpf_csum_diff), and only with size 0; tests/checker/test_checker_null_mem.py
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} rb SEC(".maps");

// bpf_ringbuf_output_proto: ARG_PTR_TO_MEM | MEM_RDONLY (the checker accepted it before)
SEC("xdp")
int bad_ringbuf_output_null(struct xdp_md *ctx)
{
	bpf_ringbuf_output(&rb, (void *)0, 0, 0);
	return XDP_PASS;
}

SEC("xdp")
int bad_sk_lookup_null_tuple(struct xdp_md *ctx)
{
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, 0, 0, BPF_F_CURRENT_NETNS, 0);
	if (sk)
		bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int ok_csum_diff_null(struct xdp_md *ctx)
{
	return bpf_csum_diff(0, 0, 0, 0, 0) ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_csum_diff_null_sized(struct xdp_md *ctx)
{
	return bpf_csum_diff(0, 4, 0, 0, 0) ? XDP_DROP : XDP_PASS;
}

// tuple_size 0: ARG_CONST_SIZE_OR_ZERO (the lookup returns NULL)
SEC("xdp")
int ok_sk_lookup_size_zero(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, 0, BPF_F_CURRENT_NETNS, 0);
	if (sk)
		bpf_sk_release(sk);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";
