// An object that declares a PROG_ARRAY and a RINGBUF (not modelled by the interpreter):
// `plain` never touches them and must run; `jump` tail-calls through the empty slot 0 of
// `jt` and falls through (XDP_PASS), as on the kernel.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
  __uint(type, BPF_MAP_TYPE_PROG_ARRAY);
  __uint(max_entries, 4);
  __type(key, __u32);
  __type(value, __u32);
} jt SEC(".maps");
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 4096);
} rb SEC(".maps");

SEC("xdp") int plain(struct xdp_md *ctx) {
  void *data = (void *)(long)ctx->data, *data_end = (void *)(long)ctx->data_end;
  return data + 14 > data_end ? XDP_DROP : XDP_PASS;
}

SEC("xdp") int jump(struct xdp_md *ctx) {
  bpf_tail_call(ctx, &jt, 0);
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
