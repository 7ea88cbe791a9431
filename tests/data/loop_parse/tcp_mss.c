#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/tcp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

volatile const __u32 MIN_MSS = 536;

/* bpf_loop's callback context: the program's context, the cursor as an offset from the
 * packet's first byte, the walk's state (as tcp_mss.bpfd's loop frame and `walk`) */
struct walk {
    struct xdp_md *ctx;
    __u64 off;
    __u32 left;
    __u32 mss;
};

/* one TCP option at w->off (RFC 9293 3.2): 1 stops the walk */
static long option(__u64 i, struct walk *w)
{
    void *data = (void *)(long)w->ctx->data;
    void *data_end = (void *)(long)w->ctx->data_end;
    __u64 off = w->off;
    if (off > 0x7fff)
        return 1;
    __u8 *p = data + off;
    if (w->left == 0)
        return 1;
    if ((void *)(p + 1) > data_end)
        return 1;
    __u8 kind = p[0];
    if (kind == 0)
        return 1;
    if (kind == 1) {
        w->left -= 1;
        w->off = off + 1;
        return 0;
    }
    if (kind == 2) {
        if ((void *)(p + 4) > data_end)
            return 1;
        if (p[1] == 4 && w->left >= 4)
            w->mss = bpf_ntohs(*(__be16 *)(p + 2));
        return 1;
    }
    if ((void *)(p + 2) > data_end)
        return 1;
    __u8 len = p[1];
    if (len < 2 || len > 40)
        return 1;
    if ((void *)(p + len) > data_end)
        return 1;
    if (len > w->left)
        return 1;
    w->left -= len;
    w->off = off + len;
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
    if (eth->h_proto != bpf_htons(ETH_P_IP))
        return XDP_PASS;
    struct iphdr *ip = (void *)(eth + 1);
    if ((void *)(ip + 1) > data_end)
        return XDP_PASS;
    if (ip->ihl < 5)
        return XDP_PASS;
    struct tcphdr *th = (void *)ip + ip->ihl * 4;
    if ((void *)th > data_end)
        return XDP_PASS;
    if (ip->protocol != IPPROTO_TCP)
        return XDP_PASS;
    if ((void *)(th + 1) > data_end)
        return XDP_PASS;
    if (th->doff < 5)
        return XDP_PASS;
    struct walk w = {
        .ctx = ctx, .off = (void *)(th + 1) - data, .left = th->doff * 4 - 20, .mss = 0,
    };
    bpf_loop(40, option, &w, 0);
    if (w.mss != 0 && w.mss < MIN_MSS)
        return XDP_DROP;
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
