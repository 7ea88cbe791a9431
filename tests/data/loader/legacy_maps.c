// SPDX-License-Identifier: GPL-2.0
/* Loader fixture (FIELD-BUGS B12): sockops + sk_msg sharing a sockhash declared the legacy
 * way (struct bpf_map_def records in a "maps" section).  libbpf >= 1.0 refuses it; so must
 * bpfdsl's loader, with a clear message. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct legacy_map_def {
	unsigned int type;
	unsigned int key_size;
	unsigned int value_size;
	unsigned int max_entries;
	unsigned int map_flags;
};

struct legacy_map_def sock_hash SEC("maps") = {
	.type = BPF_MAP_TYPE_SOCKHASH,
	.key_size = 4,
	.value_size = 4,
	.max_entries = 1024,
};

SEC("sockops")
int track(struct bpf_sock_ops *skops)
{
	__u32 key = skops->local_port;

	bpf_sock_hash_update(skops, &sock_hash, &key, BPF_NOEXIST);
	return 1;
}

SEC("sk_msg")
int redir(struct sk_msg_md *msg)
{
	__u32 key = msg->remote_port;

	return bpf_msg_redirect_hash(msg, &sock_hash, &key, BPF_F_INGRESS);
}

char LICENSE[] SEC("license") = "GPL";
