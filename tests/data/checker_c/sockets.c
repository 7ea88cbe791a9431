// SPDX-License-Identifier: GPL-2.0
/* Checker corpus: sock_ops reading fields and filling a sockhash; sk_msg reading its
 * context, pulling data and redirecting; xskmap lookup reading the queue id (B10). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct key { __u32 sip, dip, sport, dport; };

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 64);
	__type(key, struct key);
	__type(value, __u64);
} sh SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 8);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("sockops")
int ops(struct bpf_sock_ops *skops)
{
	struct key k = {};

	if (skops->family != 2)
		return 1;
	switch (skops->op) {
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		k.sip = skops->local_ip4;
		k.dip = skops->remote_ip4;
		k.sport = skops->local_port;
		k.dport = skops->remote_port;
		bpf_sock_hash_update(skops, &sh, &k, BPF_NOEXIST);
		break;
	default:
		skops->reply = skops->args[0] > 3;
	}
	return 1;
}

SEC("sk_msg")
int msg(struct sk_msg_md *m)
{
	struct key k = {};
	void *data, *data_end;

	if (m->size < 4)
		return SK_PASS;
	bpf_msg_pull_data(m, 0, 4, 0);
	data = m->data;
	data_end = m->data_end;
	if (data + 4 > data_end)
		return SK_PASS;
	if (*(__u8 *)data == 'X')
		return SK_DROP;
	k.sip = m->remote_ip4;
	k.dip = m->local_ip4;
	k.sport = m->remote_port;
	k.dport = m->local_port;
	return bpf_msg_redirect_hash(m, &sh, &k, BPF_F_INGRESS);
}

SEC("xdp")
int xsk(struct xdp_md *ctx)
{
	__u32 q = ctx->rx_queue_index;
	struct bpf_xdp_sock *s = bpf_map_lookup_elem(&xsks, &q);

	if (s && s->queue_id == q)
		return bpf_redirect_map(&xsks, q, XDP_PASS);
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
