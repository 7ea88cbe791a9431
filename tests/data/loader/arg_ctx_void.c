// A global subprog that gets the XDP context as `void *ctx __arg_ctx` (libbpf's
// bpf_helpers.h __arg_ctx, read by the verifier since Linux 6.8): on older kernels the
// loader clones its FUNC_PROTO with `struct xdp_md *` as libbpf's
// bpf_program_fixup_func_info does (tests/runtime/test_btf_older_kernels.py).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))

__noinline int frame_len(void *ctx __arg_ctx)
{
	return ctx ? (int)bpf_xdp_get_buff_len(ctx) : 0;
}

SEC("xdp")
int len_gate(struct xdp_md *ctx)
{
	return frame_len(ctx) >= 60 ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
