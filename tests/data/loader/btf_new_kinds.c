// BTF kinds newer than Linux 5.10 (FLOAT 5.13, DECL_TAG 5.16, TYPE_TAG 5.17, ENUM64 and
// signed enums 6.0), used by a program that loads on every kernel once the loader rewrites
// them as libbpf's bpf_object__sanitize_btf does (tests/abi/test_btf_sanitize.py).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define __user_tag __attribute__((btf_type_tag("user")))
#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))

enum wide { WIDE_SMALL = 2, WIDE_BIG = 1ULL << 40 };
enum sign { SIGN_NEG = -1, SIGN_POS = 1 };

struct shape {
	float ratio;
	int __user_tag *where;
	enum wide w;
	enum sign s;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

static __noinline int weigh(struct shape *s)
{
	return s ? (int)s->w : 0;
}

__noinline int frame_len(struct xdp_md *ctx __arg_ctx)
{
	return ctx ? (int)(ctx->data_end - ctx->data) : 0;
}

SEC("xdp")
int new_kinds(struct xdp_md *ctx)
{
	struct shape s = { .w = WIDE_SMALL, .s = SIGN_POS };
	__u32 k = 0;
	__u64 *v = bpf_map_lookup_elem(&seen, &k);

	if (v)
		*v += weigh(&s);
	return frame_len(ctx) > 0 ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
