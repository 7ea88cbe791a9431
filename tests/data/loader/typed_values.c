// SPDX-License-Identifier: GPL-2.0
/* BTF fixture for value formatting/parsing: a map whose key is an LPM-trie style
 * {prefixlen, addr} and whose value mixes network-order ints, addresses, bitfields, an enum,
 * a char array, a signed int and an array.  The program only touches the map so that clang
 * keeps the types. */
#include <linux/bpf.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>

typedef __be32 ipv4_addr;

struct v4_prefix {
	__u32 prefixlen;
	__be32 addr;
};

enum color { RED = 1, GREEN = 2 };

struct rich {
	__be16 port;
	__u8 flags : 3, kind : 5;
	struct in6_addr src6;
	ipv4_addr dst;
	enum color c;
	char label[8];
	__s32 delta;
	__u64 counts[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, 16);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct v4_prefix);
	__type(value, struct rich);
} typed SEC(".maps");

SEC("xdp")
int touch(struct xdp_md *ctx)
{
	struct v4_prefix k = { .prefixlen = 32, .addr = 0 };
	struct rich *r = bpf_map_lookup_elem(&typed, &k);

	return r ? XDP_DROP : XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
