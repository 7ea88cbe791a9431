// SPDX-License-Identifier: GPL-2.0
/* Minimal reproductions (written for bpfdsl, not copied) of the Linux 6.18 verifier
 * selftests the checker disagreed with (#23):
 *  - tools/testing/selftests/bpf/progs/verifier_ldsx.c "LDSX, xdp s32 xdp_md->data /
 *    data_end / data_meta" (__failure "invalid bpf_context access"): net/core/filter.c
 *    xdp_is_valid_access refuses a sign-extending load of a packet pointer field;
 *  - a bpf_tail_call inside a bpf_loop callback;
 *  - bpf_map_update_elem on a sockmap / sockhash from XDP (verifier.c may_update_sockmap);
 *  - progs/verifier_map_in_map.c: an inner map looked up on two paths joined by pruning.
 * Programs named ok_* load on 6.18, bad_* are refused.  Built with -mcpu=v4 (ldsx). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} progs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} hsocks SEC(".maps");

struct inner {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} inner_a SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, 2);
	__type(key, __u32);
	__array(values, struct inner);
} outer SEC(".maps") = { .values = { &inner_a } };

#define LDSX_CTX(name, off)						\
SEC("xdp")								\
__attribute__((naked)) int name(void)					\
{									\
	asm volatile ("r0 = *(s32 *)(r1 + " #off ");"			\
		      "r0 = 2;"						\
		      "exit;" ::: "memory");				\
}

LDSX_CTX(bad_ldsx_xdp_data, 0)
LDSX_CTX(bad_ldsx_xdp_data_end, 4)
LDSX_CTX(bad_ldsx_xdp_data_meta, 8)
LDSX_CTX(ok_ldsx_xdp_ingress_ifindex, 12)

static long tail_cb(__u64 i, void *ctx)
{
	bpf_tail_call(ctx, &progs, 0);
	return 1;
}

SEC("xdp")
int bad_tail_call_in_loop_cb(struct xdp_md *ctx)
{
	bpf_loop(2, tail_cb, ctx, 0);
	return XDP_PASS;
}

SEC("xdp")
int ok_sockmap_update_xdp(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct bpf_sock *sk = bpf_map_lookup_elem(&socks, &key);

	if (!sk)
		return XDP_PASS;
	bpf_map_update_elem(&socks, &key, sk, BPF_ANY);
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int ok_sockhash_update_xdp(struct xdp_md *ctx)
{
	__u32 key = 0;
	struct bpf_sock *sk = bpf_map_lookup_elem(&hsocks, &key);

	if (!sk)
		return XDP_PASS;
	bpf_map_update_elem(&hsocks, &key, sk, BPF_ANY);
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int ok_map_in_map_pruning(struct xdp_md *ctx)
{
	__u32 key = 0;
	void *m;
	__u64 *v;

	if (ctx->ingress_ifindex & 1)
		key = 1;
	m = bpf_map_lookup_elem(&outer, &key);
	if (!m)
		return XDP_PASS;
	key = 0;
	v = bpf_map_lookup_elem(m, &key);
	if (!v)
		return XDP_PASS;
	return *v ? XDP_DROP : XDP_PASS;
}

char _license[] SEC("license") = "GPL";
