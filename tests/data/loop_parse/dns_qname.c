#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

volatile const __u32 MAX_NAME = 64;

struct dnshdr { __be16 id, flags, qdcount, ancount, nscount, arcount; };

/* bpf_loop's callback context: the program's context, the cursor as an offset from the
 * packet's first byte, the walk's state (as dns_qname.bpfd's loop frame and `qname`) */
struct qname {
    struct xdp_md *ctx;
    __u64 off;
    __u32 start;
    __u32 len;
};

/* one label of the name at q->off (RFC 1035 3.1): 1 stops the walk */
static long label_at(__u64 i, struct qname *q)
{
    void *data = (void *)(long)q->ctx->data;
    void *data_end = (void *)(long)q->ctx->data_end;
    __u64 off = q->off;
    if (off > 0x7fff)
        return 1;
    __u8 *p = data + off;
    if ((void *)(p + 1) > data_end)
        return 1;
    __u32 len = 1 + p[0];
    if (len > 64)
        return 1;
    if ((void *)(p + len) > data_end)
        return 1;
    if (len == 1) {
        q->len = off + 1 - q->start;
        return 1;
    }
    q->off = off + len;
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
    if ((void *)udp > data_end)
        return XDP_PASS;
    if (ip->protocol != IPPROTO_UDP)
        return XDP_PASS;
    if ((void *)(udp + 1) > data_end)
        return XDP_PASS;
    if (udp->dest != bpf_htons(53))
        return XDP_PASS;
    struct dnshdr *h = (void *)(udp + 1);
    if ((void *)(h + 1) > data_end)
        return XDP_DROP;
    if (h->qdcount != bpf_htons(1))
        return XDP_DROP;
    __u32 start = (void *)(h + 1) - data;
    struct qname q = { .ctx = ctx, .off = start, .start = start, .len = 0 };
    bpf_loop(16, label_at, &q, 0);
    if (q.len == 0 || q.len > MAX_NAME)
        return XDP_DROP;
    return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
