// SPDX-License-Identifier: GPL-2.0
/* Checker fixture: each marked line is where a mutation of the compiled program must be
 * reported (tests/test_checker_lines.py).  Markers: "// L:<kind>". */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

SEC("xdp")
int lines(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data; // L:ctx_write
	struct ethhdr *eth = data;
	__u32 key;
	__u64 *cnt;
	int i;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	key = eth->h_proto; // L:bounds
	if (key == 0)
		return XDP_PASS;
#pragma clang loop unroll(disable)
	for (i = 0; i < 6; i++) // L:loop
		if (eth->h_dest[i] == 0xff)
			break;
	key ^= i; // L:stack
	cnt = bpf_map_lookup_elem(&counts, &key); // L:call
	if (!cnt)
		return XDP_PASS;
	*cnt += 1; // L:null
	return XDP_DROP;
} // L:ret

char LICENSE[] SEC("license") = "GPL";
