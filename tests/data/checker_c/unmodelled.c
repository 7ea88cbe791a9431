// A helper the kernel knows and bpfdsl check does not model (bpf_get_current_uid_gid,
// offered to XDP by bpf_base_func_proto): `bpfdsl check` must say CANNOT CHECK (exit 2),
// never REJECTED.  (It used bpf_spin_lock, which the checker models now: #23.)
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct val {
  __u64 n;
};
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct val);
} counts SEC(".maps");

SEC("xdp") int uid_count(struct xdp_md *ctx) {
  __u32 k = 0;
  struct val *v = bpf_map_lookup_elem(&counts, &k);
  if (v)
    v->n += bpf_get_current_uid_gid() & 1;
  return XDP_PASS;
}

char LICENSE[] SEC("license") = "GPL";
