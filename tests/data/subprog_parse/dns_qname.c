#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 1);
    __type(key, __u32);
    __type(value, __u64);
} long_names SEC(".maps");

volatile const __u32 MAX_NAME = 64;

struct dnshdr { __be16 id, flags, qdcount, ancount, nscount, arcount; };

/* the length of the question's name after the DNS header at pos (RFC 1035 3.1),
 * 0 when it is malformed or has more than 16 labels */
static __noinline __u32 qname_len(struct xdp_md *ctx, void *pos)
{
    void *data_end = (void *)(long)ctx->data_end;
    struct dnshdr *h = pos;
    if ((void *)(h + 1) > data_end)
        return 0;
    if (h->qdcount != bpf_htons(1))
        return 0;
    __u8 *p = (void *)(h + 1);
    for (int i = 0; i < 16; i++) {
        if ((void *)(p + 1) > data_end)
            return 0;
        __u8 len = p[0];
        if (len > 63)
            return 0;
        if ((void *)(p + 1 + len) > data_end)
            return 0;
        if (len == 0)
            return (__u32)((void *)p - (void *)(h + 1)) + 1;
        p += len + 1;
    }
    return 0;
}

SEC("xdp")
int dns_guard(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return XDP_PASS;
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end)
        return XDP_PASS;
    if (ip->ihl < 5)
        return XDP_PASS;
    struct udphdr *udp = (void *)ip + ip->ihl * 4;
    if ((void *)(udp + 1) > data_end)
        return XDP_PASS;
    if (ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    if (udp->dest != bpf_htons(53))
        return XDP_PASS;
    __u32 n = qname_len(ctx, udp + 1);
    if (n == 0 || n > MAX_NAME) {
        __u32 k = 0;
        __u64 *v = bpf_map_lookup_elem(&long_names, &k);
        if (v)
            __sync_fetch_and_add(v, 1);
        return XDP_DROP;
    }
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
