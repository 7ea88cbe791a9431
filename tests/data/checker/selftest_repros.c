// SPDX-License-Identifier: GPL-2.0
/* Minimal reproductions (written for bpfdsl, not copied) of the Linux 6.18 verifier
 * selftests the checker disagreed with (#23):
 *  - tools/testing/selftests/bpf/progs/verifier_ldsx.c "LDSX, xdp s32 xdp_md->data /
 *    data_end / data_meta" (__failure "invalid bpf_context access"): net/core/filter.c
 *    xdp_is_valid_access refuses a sign-extending load of a packet pointer field;
 *  - a bpf_tail_call inside a bpf_loop callback;
 *    (progs/tailcall_fail.c tailcall_direct_callback: "callback unexpected regs 1"), or in
 *    a function the callback calls ("cannot tail call within callback");
 *  - bpf_map_update_elem / bpf_map_delete_elem on a sockmap / sockhash (verifier.c
 *    may_update_sockmap: XDP may, sk_msg may not, sock_ops may only delete; the value is
 *    a socket, resolve_map_arg_type).
 * Programs named ok_* load on 6.18, bad_* are refused. */
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

struct cbctx {
	struct xdp_md *ctx;
};

static long tail_cb(__u64 i, struct cbctx *c)
{
	bpf_tail_call(c->ctx, &progs, 0);
	return 1;
}

SEC("xdp")
int bad_tail_call_in_loop_cb(struct xdp_md *ctx)
{
	struct cbctx c = { .ctx = ctx };

	bpf_loop(2, tail_cb, &c, 0);
	return XDP_PASS;
}

static __attribute__((noinline)) int tail_sub(struct xdp_md *ctx)
{
	bpf_tail_call(ctx, &progs, 1);
	return ctx->rx_queue_index;
}

static long tail_cb2(__u64 i, struct cbctx *c)
{
	return tail_sub(c->ctx) ? 1 : 0;
}

SEC("xdp")
int bad_tail_call_in_loop_cb_subprog(struct xdp_md *ctx)
{
	struct cbctx c = { .ctx = ctx };

	bpf_loop(2, tail_cb2, &c, 0);
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
int bad_sockmap_update_fd(struct xdp_md *ctx)
{
	__u32 key = 0;
	__u64 fd = 3;

	bpf_map_update_elem(&socks, &key, &fd, BPF_ANY);
	return XDP_PASS;
}

SEC("sk_msg")
int bad_sockmap_delete_sk_msg(struct sk_msg_md *msg)
{
	__u32 key = 0;

	bpf_map_delete_elem(&socks, &key);
	return SK_PASS;
}

SEC("sockops")
int bad_sockmap_update_sock_ops(struct bpf_sock_ops *ops)
{
	__u32 key = 0;
	struct bpf_sock *sk = ops->sk;

	if (!sk)
		return 1;
	bpf_map_update_elem(&socks, &key, sk, BPF_ANY);
	return 1;
}

SEC("sockops")
int ok_sockmap_delete_sock_ops(struct bpf_sock_ops *ops)
{
	__u32 key = 0;

	bpf_map_delete_elem(&socks, &key);
	return 1;
}

char _license[] SEC("license") = "GPL";
