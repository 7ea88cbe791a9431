#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))

struct {
    __uint(type, BPF_MAP_TYPE_ARRAY);
    __uint(max_entries, 2);
    __type(key, __u32);
    __type(value, __u64);
} small_mss SEC(".maps");

volatile const __u32 MIN_MSS = 536;

/* the MSS option of an IPv4 TCP segment (RFC 9293 3.2), 0 when there is none */
__noinline int tcp_mss(struct xdp_md *ctx __arg_ctx, __u32 slot)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return 0;
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return 0;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end)
        return 0;
    if (ip->ihl < 5)
        return 0;
    struct tcphdr *th = (void *)ip + ip->ihl * 4;
    if ((void *)th > data_end)
        return 0;
    if (ip->protocol != IPPROTO_TCP)
        return 0;
    if ((void *)(th + 1) > data_end)
        return 0;
    if (th->doff < 5)
        return 0;
    __u32 left = th->doff * 4 - 20;
    __u8 *p = (void *)(th + 1);
    for (int i = 0; i < 10; i++) {
        if (left == 0)
            return 0;
        if ((void *)(p + 1) > data_end)
            return 0;
        __u8 kind = p[0];
        if (kind == 0)
            return 0;
        if (kind == 1) {
            p += 1;
            left -= 1;
            continue;
        }
        if (kind == 2) {
            if ((void *)(p + 4) > data_end)
                return 0;
            if (p[1] != 4 || left < 4)
                return 0;
            __u32 mss = bpf_ntohs(*(__be16 *)(p + 2));
            if (mss < MIN_MSS) {
                __u64 *v = bpf_map_lookup_elem(&small_mss, &slot);
                if (v)
                    __sync_fetch_and_add(v, 1);
            }
            return mss;
        }
        if ((void *)(p + 2) > data_end)
            return 0;
        __u8 len = p[1];
        if (len < 2 || len > 40)
            return 0;
        if ((void *)(p + len) > data_end)
            return 0;
        if (len > left)
            return 0;
        left -= len;
        p += len;
    }
    return 0;
}

SEC("xdp")
int syn_mss(struct xdp_md *ctx)
{
    void *data = (void *)(long)ctx->data;
    void *data_end = (void *)(long)ctx->data_end;
    struct ethhdr *eth = data;
    if ((void *)(eth + 1) > data_end)
        return XDP_PASS;
    __u32 mss = tcp_mss(ctx, 0);
    if (mss != 0 && mss < MIN_MSS)
        return XDP_DROP;
    if (eth->h_proto == bpf_htons(ETH_P_IPV6) && tcp_mss(ctx, 1) != 0)
        return XDP_ABORTED;
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
