// libbpf-style C writing struct event records to a ring buffer; the unused global puts
// struct event into BTF (bpf2go's trick), so `bpfdsl events --type event` decodes them.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct event { __u32 len; __u32 ifindex; __u64 seq; };
struct { __uint(type, BPF_MAP_TYPE_RINGBUF); __uint(max_entries, 4096); } rb SEC(".maps");
const struct event *unused_event __attribute__((unused));
__u64 seq;

SEC("xdp") int report(struct xdp_md *ctx)
{
	struct event *e = bpf_ringbuf_reserve(&rb, sizeof(*e), 0);
	if (!e)
		return XDP_PASS;
	e->len = ctx->data_end - ctx->data;
	e->ifindex = ctx->ingress_ifindex;
	e->seq = __sync_add_and_fetch(&seq, 1);
	bpf_ringbuf_submit(e, 0);
	return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
