// SPDX-License-Identifier: GPL-2.0
/* Test variant of tests/data/c/xdp_cpumap_steer.c with its two settings in an array map
 * (loadable with bpftool, which cannot set .rodata).  Original comment: spread IPv4 flows over a configurable set of
 * CPUs through a cpumap (flow hash of saddr, daddr, protocol), and an on-CPU program
 * (xdp/cpumap, BPF_XDP_CPUMAP) that counts frames per CPU and drops UDP to one port. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/ip.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define MAX_CPUS 64

/* config[0] = number of valid slots in `cpus`, config[1] = UDP port dropped on the CPU */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u32);
} config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_CPUS);
	__type(key, __u32);
	__type(value, __u32);		/* slot -> CPU number */
} cpus SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_CPUMAP);
	__uint(max_entries, MAX_CPUS);
	__type(key, __u32);
	__type(value, struct bpf_cpumap_val);
} cpu_map SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} on_cpu_count SEC(".maps");

static __always_inline __u32 flow_hash(__u32 a, __u32 b, __u32 c)
{
	/* FNV-1a over the three words, then MurmurHash3's fmix32 (as bpfdsl's hash()) */
	__u32 h = 2166136261u;

	h = (h ^ a) * 16777619u;
	h = (h ^ b) * 16777619u;
	h = (h ^ c) * 16777619u;
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

SEC("xdp")
int steer(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u32 slot, *cpu, n, k0 = 0;
	__u32 *np = bpf_map_lookup_elem(&config, &k0);

	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end)
		return XDP_PASS;
	if (!np)
		return XDP_PASS;
	n = *np;
	if (n == 0 || n > MAX_CPUS)
		return XDP_PASS;
	slot = flow_hash(ip->saddr, ip->daddr, ip->protocol) % n;
	cpu = bpf_map_lookup_elem(&cpus, &slot);
	if (!cpu)
		return XDP_PASS;
	return bpf_redirect_map(&cpu_map, *cpu, XDP_PASS);
}

SEC("xdp/cpumap")
int on_cpu(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	__u32 key = 0, k1 = 1, *port;
	__u64 *cnt;

	cnt = bpf_map_lookup_elem(&on_cpu_count, &key);
	if (cnt)
		*cnt += 1;
	if ((void *)(eth + 1) > data_end)
		return XDP_PASS;
	if (eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > data_end || ip->ihl < 5)
		return XDP_PASS;
	if (ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	udp = (void *)ip + ip->ihl * 4;
	if ((void *)(udp + 1) > data_end)
		return XDP_PASS;
	port = bpf_map_lookup_elem(&config, &k1);
	if (port && udp->dest == bpf_htons((__u16)*port))
		return XDP_DROP;
	return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
