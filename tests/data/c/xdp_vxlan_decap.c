// SPDX-License-Identifier: GPL-2.0
/* Reference for progs/xdp_vxlan_decap.bpfd: a frame to UDP port 4789 over IPv4 (not a
 * fragment) whose VXLAN header (RFC 7348) has the I flag loses the outer Ethernet, IPv4
 * (with options), UDP and VXLAN headers through bpf_xdp_adjust_head, when a whole inner
 * Ethernet header follows; count decapsulations per CPU.  Anything else passes unchanged;
 * a failed adjust_head aborts (XDP_ABORTED). */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define VXLAN_PORT 4789
#define VXLAN_I 0x08		/* flags: the VNI is valid */
#define IP_MF 0x2000
#define IP_OFFSET 0x1fff

struct vxlanhdr {		/* RFC 7348, as net/vxlan.h */
	__u8 flags;
	__u8 reserved1[3];
	__u8 vni[3];
	__u8 reserved2;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} decapped SEC(".maps");

SEC("xdp")
int vxlan_decap(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	struct vxlanhdr *vx;
	struct ethhdr *inner;
	__u32 key = 0;
	__u64 *cnt;

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP || (ip->frag_off & bpf_htons(IP_MF | IP_OFFSET)))
		return XDP_PASS;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return XDP_PASS;
	if (udp->dest != bpf_htons(VXLAN_PORT))
		return XDP_PASS;
	vx = (void *)(udp + 1);
	if ((void *)(vx + 1) > data_end)
		return XDP_PASS;
	if (!(vx->flags & VXLAN_I))
		return XDP_PASS;
	inner = (void *)(vx + 1);
	if ((void *)(inner + 1) > data_end)
		return XDP_PASS;
	if (bpf_xdp_adjust_head(ctx, (int)((void *)inner - data)))
		return XDP_ABORTED;
	cnt = bpf_map_lookup_elem(&decapped, &key);
	if (cnt)
		*cnt += 1;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
