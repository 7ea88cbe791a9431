// A devmap program returning XDP_TX (not allowed there): the warning must name line 6, where
// r0 gets the value, not the closing brace (reviewer reproducer, issue 6).
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
SEC("xdp/devmap") int badret(struct xdp_md *ctx) {
  if (ctx->ingress_ifindex == 3) return XDP_TX;
  return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
