// Helpers the kernel knows and bpfdsl check does not model (spin lock, ring buffer):
// `bpfdsl check` must say CANNOT CHECK (exit 2), never REJECTED.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct val {
  struct bpf_spin_lock l;
  __u64 n;
};
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct val);
} locked SEC(".maps");

SEC("xdp") int lock_count(struct xdp_md *ctx) {
  __u32 k = 0;
  struct val *v = bpf_map_lookup_elem(&locked, &k);
  if (v) {
    bpf_spin_lock(&v->l);
    v->n += 1;
    bpf_spin_unlock(&v->l);
  }
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
