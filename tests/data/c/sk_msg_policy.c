// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/sk_msg_policy.bpfd: drop messages sent to one port; for another port let
 * only the first `limit_bytes` of each message through under this verdict (apply_bytes). */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u16 drop_port = 7001;		/* host order */
const volatile __u16 limit_port = 7002;		/* host order */
const volatile __u32 limit_bytes = 1024;

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u64);
} policy_socks SEC(".maps");

SEC("sk_msg")
int policy(struct sk_msg_md *msg)
{
	__u16 dport = bpf_ntohs((__u16)(msg->remote_port >> 16));

	if (dport == drop_port)
		return SK_DROP;
	if (dport == limit_port)
		bpf_msg_apply_bytes(msg, limit_bytes);
	return SK_PASS;
}

char LICENSE[] SEC("license") = "GPL";
