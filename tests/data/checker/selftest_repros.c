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
 *  - progs/verifier_map_in_map.c: inner map lookups (the lookup of a map-in-map yields
 *    the inner map on its non-NULL branch), also across state pruning.
 *  - progs/test_xdp_noinline.c: a static function returning void leaves r0 unset.
 * Programs named ok_* load on 6.18, bad_* are refused. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#define __imm_addr(name) [name] "i"(&name)

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
	__type(value, __u32);
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

/* progs/test_sockmap_invalid_update.c: the arguments are checked before the map's
 * fitness for the helper (check_map_func_compatibility comes last) */
SEC("sockops")
int bad_sockmap_update_sock_ops_null(struct bpf_sock_ops *ops)
{
	__u32 key = 0;

	bpf_map_update_elem(&socks, &key, ops->sk, BPF_ANY);
	return 1;
}

SEC("sockops")
int ok_sockmap_delete_sock_ops(struct bpf_sock_ops *ops)
{
	__u32 key = 0;

	bpf_map_delete_elem(&socks, &key);
	return 1;
}

/* progs/verifier_map_in_map.c "map in map state pruning": two outer/inner lookups whose
 * paths meet at the load (the selftest runs it with BPF_F_TEST_STATE_FREQ) */
SEC("xdp")
__attribute__((naked)) int ok_map_in_map_pruning(void)
{
	asm volatile ("r1 = 0;"
		      "*(u32 *)(r10 - 4) = r1;"
		      "r6 = r10;"
		      "r6 += -4;"
		      "r2 = r6;"
		      "r1 = %[outer] ll;"
		      "call %[bpf_map_lookup_elem];"
		      "if r0 != 0 goto 1f;"
		      "exit;"
		      "1: r2 = r6;"
		      "r1 = r0;"
		      "call %[bpf_map_lookup_elem];"
		      "if r0 != 0 goto 3f;"
		      "r2 = r6;"
		      "r1 = %[outer] ll;"
		      "call %[bpf_map_lookup_elem];"
		      "if r0 != 0 goto 2f;"
		      "exit;"
		      "2: r2 = r6;"
		      "r1 = r0;"
		      "call %[bpf_map_lookup_elem];"
		      "if r0 != 0 goto 3f;"
		      "exit;"
		      "3: r0 = *(u32 *)(r0 + 0);"
		      "exit;"
		      :: __imm_addr(outer), [bpf_map_lookup_elem] "i"(BPF_FUNC_map_lookup_elem)
		      : "memory");
}

SEC("xdp")
int ok_map_in_map_lookup(struct xdp_md *ctx)
{
	__u32 key = ctx->rx_queue_index & 1;
	__u32 *v;
	void *m;

	m = bpf_map_lookup_elem(&outer, &key);
	if (!m)
		return XDP_PASS;
	key = 0;
	v = bpf_map_lookup_elem(m, &key);
	if (!v)
		return XDP_PASS;
	return *v ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_map_in_map_no_null_check(struct xdp_md *ctx)
{
	__u32 key = 0;
	void *m = bpf_map_lookup_elem(&outer, &key);

	asm volatile ("r1 = %[m]; r2 = %[k]; call %[lookup];"
		      :: [m] "r"(m), [k] "r"(&key), [lookup] "i"(BPF_FUNC_map_lookup_elem)
		      : "r0", "r1", "r2", "r3", "r4", "r5", "memory");
	return XDP_PASS;
}

SEC("xdp")
int bad_map_in_map_update(struct xdp_md *ctx)
{
	__u32 key = 0, fd = 0;

	bpf_map_update_elem(&outer, &key, &fd, BPF_ANY);
	return XDP_PASS;
}

/* progs/test_xdp_noinline.c: a static function returning void exits with r0 unset
 * (prepare_func_exit hands r0 back as it is); reading it in the caller is refused */
static __attribute__((noinline)) void set_flag(__u32 *p)
{
	*(volatile __u32 *)p = 1;
}

SEC("xdp")
int ok_static_fn_r0_unset(struct xdp_md *ctx)
{
	__u32 flag = 0;

	set_flag(&flag);
	return flag ? XDP_PASS : XDP_DROP;
}

__attribute__((used, naked, noinline)) static void no_ret(void)
{
	asm volatile ("r1 = 0; exit;" ::: "memory");
}

SEC("xdp")
__attribute__((naked)) int bad_read_unset_r0(void)
{
	asm volatile ("call no_ret; exit;" ::: "memory");
}

char _license[] SEC("license") = "GPL";
