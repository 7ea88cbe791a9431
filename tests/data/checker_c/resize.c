// SPDX-License-Identifier: GPL-2.0
/* Checker corpus: packet resize helpers with pointers re-read afterwards (B06 shape),
 * bpf_xdp_load_bytes into the stack, csum_diff over packet memory. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>

SEC("xdp")
int shrink(struct xdp_md *ctx)
{
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	__u8 *p;

	if (data + 64 > data_end)
		return XDP_PASS;
	if (bpf_xdp_adjust_tail(ctx, -4))
		return XDP_ABORTED;
	data_end = (void *)(long)ctx->data_end;
	p = (void *)(long)ctx->data;
	if ((void *)(p + 20) > data_end)
		return XDP_PASS;
	p[19] = 0x42;
	return XDP_TX;
}

SEC("xdp")
int pop_head(struct xdp_md *ctx)
{
	void *data, *data_end;
	struct ethhdr *eth;

	if (bpf_xdp_adjust_head(ctx, 4))
		return XDP_PASS;
	data = (void *)(long)ctx->data;
	data_end = (void *)(long)ctx->data_end;
	eth = data;
	if ((void *)(eth + 1) > data_end)
		return XDP_DROP;
	return eth->h_proto ? XDP_PASS : XDP_DROP;
}

SEC("xdp")
int copy_out(struct xdp_md *ctx)
{
	__u8 buf[16];
	void *data_end = (void *)(long)ctx->data_end;
	void *data = (void *)(long)ctx->data;
	__s64 c;

	if (bpf_xdp_load_bytes(ctx, 0, buf, sizeof(buf)))
		return XDP_PASS;
	if (data + 16 > data_end)
		return XDP_PASS;
	c = bpf_csum_diff(data, 16, (void *)buf, 16, 0);
	return c ? XDP_PASS : XDP_DROP;
}

char LICENSE[] SEC("license") = "GPL";
