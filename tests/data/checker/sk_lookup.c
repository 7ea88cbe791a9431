// Socket lookups from XDP (bpf_sk_lookup_tcp/udp, bpf_skc_lookup_tcp + bpf_sk_release): the
// kernel's reference tracking.  Programs named ok_* are accepted by Linux 6.18, bad_* are
// refused; tests/checker/test_checker_sk_lookup.py checks bpfdsl's checker agrees (verdict,
// message, processed count).
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

#define TUPLE4 sizeof(((struct bpf_sock_tuple *)0)->ipv4)

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} seen SEC(".maps");

static __always_inline int tuple_of(struct xdp_md *ctx, struct bpf_sock_tuple *t)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip = data + sizeof(*eth);
	__u16 *ports = (void *)(ip + 1);

	if ((void *)(ports + 2) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	t->ipv4.saddr = ip->saddr;
	t->ipv4.daddr = ip->daddr;
	t->ipv4.sport = ports[0];
	t->ipv4.dport = ports[1];
	return ip->protocol;
}

SEC("xdp")
int ok_tcp_state(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) != IPPROTO_TCP)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	__u32 state = sk->state, port = sk->dst_port, fam = sk->family;
	__u16 sport = *(volatile __u16 *)&sk->dst_port;
	__u8 b = *(volatile __u8 *)&sk->src_ip4;
	bpf_sk_release(sk);
	return state == 10 && fam == 2 && port + sport + b ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int ok_udp_count(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	__u32 k = 0;
	if (tuple_of(ctx, &t) != IPPROTO_UDP)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_udp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (sk) {
		k = sk->protocol & 3;
		bpf_sk_release(sk);
	}
	__u64 *v = bpf_map_lookup_elem(&seen, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	return XDP_PASS;
}

SEC("xdp")
int ok_skc_lookup(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) != IPPROTO_TCP)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	__u32 fam = sk->family, state = sk->state;
	bpf_sk_release(sk);
	return fam == 10 && state == 1 ? XDP_DROP : XDP_PASS;
}

// one load of sk->family reached with a sock_common on one path and a sock on the other:
// the kernel rewrites socket field loads per insn ("same insn cannot be used with
// different pointers")
SEC("xdp")
int bad_mixed_pointer_insn(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	int proto = tuple_of(ctx, &t);
	struct bpf_sock *sk;
	if (proto == IPPROTO_TCP)
		sk = bpf_skc_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	else if (proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	else
		return XDP_PASS;
	if (!sk)
		return XDP_PASS;
	__u32 fam = sk->family;
	bpf_sk_release(sk);
	return fam == 10 ? XDP_DROP : XDP_PASS;
}

// the packet holds the tuple: the lookups' tuple argument may point into it (pkt_access)
SEC("xdp")
int ok_tuple_in_packet(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	struct bpf_sock_tuple *t = data + sizeof(struct ethhdr) + 12;
	if ((void *)t + TUPLE4 > end)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (sk)
		bpf_sk_release(sk);
	return XDP_PASS;
}

static __noinline struct bpf_sock *lookup_in_subprog(struct xdp_md *ctx, struct bpf_sock_tuple *t)
{
	return bpf_sk_lookup_tcp(ctx, t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
}

static __noinline int release_in_subprog(struct bpf_sock *sk)
{
	bpf_sk_release(sk);
	return 1;
}

SEC("xdp")
int ok_across_calls(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = lookup_in_subprog(ctx, &t);
	if (!sk)
		return XDP_PASS;
	return release_in_subprog(sk) ? XDP_PASS : XDP_DROP;
}

SEC("xdp")
int bad_leak(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (sk && sk->state == 10)
		return XDP_DROP; // leaks sk
	if (sk)
		bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int bad_leak_from_subprog(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	return lookup_in_subprog(ctx, &t) ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_release_maybe_null(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int bad_use_after_release(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	bpf_sk_release(sk);
	return *(volatile __u32 *)&sk->state == 10 ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_double_release(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	bpf_sk_release(sk);
	asm volatile("" : "+r"(sk));
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int bad_sock_field(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	__u16 pad = *(volatile __u16 *)((char *)sk + 50); // dst_port's zero padding
	bpf_sk_release(sk);
	return pad ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_skc_field(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_skc_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	__u32 type = sk->type; // not in sock_common
	bpf_sk_release(sk);
	return type ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_write_sock(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	*(volatile __u32 *)&sk->mark = 1;
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int bad_release_ctx(struct xdp_md *ctx)
{
	bpf_sk_release((void *)ctx);
	return XDP_PASS;
}

// paths with and without a reference meet: the reference set is part of state equality
SEC("xdp")
int ok_join_paths(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	struct bpf_sock *sk = NULL;
	int proto = tuple_of(ctx, &t);
	if (proto == IPPROTO_TCP)
		sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	else if (proto == IPPROTO_UDP)
		sk = bpf_sk_lookup_udp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	__u32 k = proto & 3;
	__u64 *v = bpf_map_lookup_elem(&seen, &k);
	if (v)
		__sync_fetch_and_add(v, 1);
	if (sk)
		bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int ok_lookup_loop(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	__u32 n = 0;
	if (tuple_of(ctx, &t) != IPPROTO_TCP)
		return XDP_PASS;
	for (int i = 0; i < 8; i++) {
		t.ipv4.dport = bpf_htons(8000 + i);
		struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
		if (sk) {
			n += sk->state == 10;
			bpf_sk_release(sk);
		}
	}
	return n ? XDP_DROP : XDP_PASS;
}

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} socks SEC(".maps");

// a sockmap lookup takes a reference too (kernel is_acquire_function)
SEC("xdp")
int ok_sockmap_release(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct bpf_sock *sk = bpf_map_lookup_elem(&socks, &k);
	if (!sk)
		return XDP_PASS;
	__u32 s = sk->state;
	bpf_sk_release(sk);
	return s == 10 ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_sockmap_leak(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct bpf_sock *sk = bpf_map_lookup_elem(&socks, &k);
	if (!sk)
		return XDP_PASS;
	return sk->state == 10 ? XDP_DROP : XDP_PASS;
}

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} jump SEC(".maps");

SEC("xdp")
int bad_tail_call_held(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	bpf_tail_call(ctx, &jump, 0);
	bpf_sk_release(sk);
	return XDP_PASS;
}

SEC("xdp")
int bad_sock_arith(struct xdp_md *ctx)
{
	struct bpf_sock_tuple t = {};
	if (tuple_of(ctx, &t) < 0)
		return XDP_PASS;
	struct bpf_sock *sk = bpf_sk_lookup_tcp(ctx, &t, TUPLE4, BPF_F_CURRENT_NETNS, 0);
	if (!sk)
		return XDP_PASS;
	char *p = (char *)sk;
	asm volatile("%0 += 4" : "+r"(p));
	__u32 v = *(volatile __u32 *)p;
	bpf_sk_release(sk);
	return v ? XDP_DROP : XDP_PASS;
}

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

// an xskmap lookup's socket is a sock_common-compatible type, but no reference
SEC("xdp")
int bad_release_xsk(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct bpf_xdp_sock *s = bpf_map_lookup_elem(&xsks, &k);
	if (!s)
		return XDP_PASS;
	bpf_sk_release((void *)s);
	return XDP_PASS;
}

// sk_msg and sock_ops: a sockhash lookup takes a reference they cannot release
// (bpf_sk_release is not theirs); the context's socket is read by the bpf_sock rules
struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} peers SEC(".maps");

SEC("sk_msg")
int bad_msg_sockhash_leak(struct sk_msg_md *msg)
{
	__u32 k = msg->remote_port;
	struct bpf_sock *sk = bpf_map_lookup_elem(&peers, &k);
	if (!sk)
		return SK_PASS;
	return sk->state == 10 ? SK_DROP : SK_PASS;
}

SEC("sk_msg")
int ok_msg_sk_narrow(struct sk_msg_md *msg)
{
	struct bpf_sock *sk = msg->sk;
	__u16 port = *(volatile __u16 *)&sk->dst_port;
	__u8 state = *(volatile __u8 *)&sk->state;
	return port + state ? SK_DROP : SK_PASS;
}

SEC("sockops")
int ok_sockops_sk_narrow(struct bpf_sock_ops *ops)
{
	struct bpf_sock *sk = ops->sk;
	if (!sk)
		return 1;
	return *(volatile __u8 *)&sk->protocol == 6;
}

char _license[] SEC("license") = "GPL";
