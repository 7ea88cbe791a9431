// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_meta_mark.bpfd: the UDP destination port as a mark in the XDP
 * metadata (bpf_xdp_adjust_meta), read by the cpumap's on-CPU program (xdp/cpumap), which
 * counts frames per mark, or left for the AF_XDP socket of the frame's rx queue. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MARK_MAGIC 0x4b52414du

struct mark_meta {
	__u32 mark;
	__u32 magic;
};

const volatile __u32 mark_cpu = 0;	/* the cpumap slot */

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} marks SEC(".maps");

/* the mark of a UDP/IPv4 frame (host-order destination port), or -1 */
static __always_inline long udp_mark(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;

	if ((void *)(eth + 1) > data_end)
		return -1;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return -1;
	if (ip->protocol != IPPROTO_UDP)
		return -1;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return -1;
	return bpf_ntohs(udp->dest);
}

/* reserve the metadata and write the mark; 0 when done */
static __always_inline int put_mark(struct xdp_md *ctx, __u32 mark)
{
	struct mark_meta *m;

	if (bpf_xdp_adjust_meta(ctx, -(int)sizeof(*m)))
		return -1;
	m = (void *)(long)ctx->data_meta;
	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return -1;
	m->mark = mark;
	m->magic = MARK_MAGIC;
	return 0;
}

SEC("xdp")
int mark_to_cpu(struct xdp_md *ctx)
{
	long mark = udp_mark(ctx);

	if (mark < 0 || put_mark(ctx, mark))
		return XDP_PASS;
	return bpf_redirect_map(&cpu_map, mark_cpu, XDP_PASS);
}

SEC("xdp/cpumap")
int count_marks(struct xdp_md *ctx)
{
	struct mark_meta *m = (void *)(long)ctx->data_meta;
	__u64 one = 1, *cnt;
	__u32 key;

	if ((void *)(m + 1) > (void *)(long)ctx->data)
		return XDP_PASS;
	if (m->magic != MARK_MAGIC)
		return XDP_PASS;
	key = m->mark;
	cnt = bpf_map_lookup_elem(&marks, &key);
	if (cnt)
		__sync_fetch_and_add(cnt, 1);
	else
		bpf_map_update_elem(&marks, &key, &one, BPF_NOEXIST);
	return XDP_PASS;
}

SEC("xdp")
int mark_to_xsk(struct xdp_md *ctx)
{
	long mark = udp_mark(ctx);

	if (mark < 0 || put_mark(ctx, mark))
		return XDP_PASS;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

char LICENSE[] SEC("license") = "GPL";
