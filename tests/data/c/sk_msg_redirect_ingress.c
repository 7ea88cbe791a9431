// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/sk_msg_redirect_ingress.bpfd: sock_ops puts every established IPv4 TCP
 * socket into a sockhash keyed by its 4-tuple (as seen from that socket); sk_msg redirects each
 * message into the receive queue of the peer socket (BPF_F_INGRESS), skipping TCP/IP. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define AF_INET 2

struct sock_key {
	__be32 sip;	/* local address of the socket */
	__be32 dip;	/* remote address */
	__be16 sport;	/* local port */
	__be16 dport;	/* remote port */
};

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 65536);
	__type(key, struct sock_key);
	__type(value, __u64);
} socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} redirects SEC(".maps");

SEC("sockops")
int track(struct bpf_sock_ops *skops)
{
	struct sock_key key = {};

	if (skops->family != AF_INET)
		return 1;
	if (skops->op != BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB &&
	    skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	key.sip = skops->local_ip4;
	key.dip = skops->remote_ip4;
	key.sport = bpf_htons((__u16)skops->local_port);	/* local_port: host order */
	key.dport = (__be16)(skops->remote_port >> 16);	/* remote_port: network order, high half */
	bpf_sock_hash_update(skops, &socks, &key, BPF_NOEXIST);
	return 1;
}

SEC("sk_msg")
int redir(struct sk_msg_md *msg)
{
	struct sock_key peer = {};
	__u32 zero = 0;
	__u64 *cnt;
	long verdict;

	if (msg->family != AF_INET)
		return SK_PASS;
	peer.sip = msg->remote_ip4;
	peer.dip = msg->local_ip4;
	peer.sport = (__be16)(msg->remote_port >> 16);
	peer.dport = bpf_htons((__u16)msg->local_port);
	verdict = bpf_msg_redirect_hash(msg, &socks, &peer, BPF_F_INGRESS);
	if (verdict == SK_PASS) {
		cnt = bpf_map_lookup_elem(&redirects, &zero);
		if (cnt)
			*cnt += 1;
	}
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
