// SPDX-License-Identifier: GPL-2.0
/* Loader compat fixture: one XDP program using array, hash, percpu_array and percpu_hash
 * maps and .rodata configs of several widths.  Behaviour (for tests through
 * BPF_PROG_TEST_RUN):
 *   - frames shorter than `min_len` bytes -> XDP_DROP, counted in `short_frames[0]`;
 *   - otherwise the verdict is `verdict` (XDP_PASS unless set at load time);
 *   - `by_proto` (hash) counts frames by EtherType (host order key);
 *   - `pkts` (percpu_array, key 0) counts all frames per CPU;
 *   - `bytes_by_len` (percpu_hash) adds frame lengths keyed by length / 64;
 *   - `config_echo` (array) receives the configs as the program saw them: slot 0 = min_len,
 *     1 = verdict, 2 = tag (u16), 3 = magic (u64) -- proves .rodata overrides reached it. */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

const volatile __u32 min_len = 60;
const volatile __u8 verdict = XDP_PASS;
const volatile __u16 tag = 0x1234;
const volatile __u64 magic = 0x1122334455667788ULL;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, __u64);
} config_echo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} short_frames SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u16);
	__type(value, __u64);
} by_proto SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} pkts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u64);
} bytes_by_len SEC(".maps");

static __always_inline void echo(__u32 slot, __u64 v)
{
	bpf_map_update_elem(&config_echo, &slot, &v, BPF_ANY);
}

SEC("xdp")
int compat_maps(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 len = data_end - data;
	__u32 zero = 0, bucket;
	__u64 one = 1, *v;
	struct ethhdr *eth = data;
	__u16 proto;

	echo(0, min_len);
	echo(1, verdict);
	echo(2, tag);
	echo(3, magic);

	v = bpf_map_lookup_elem(&pkts, &zero);
	if (v)
		*v += 1;
	if (len < min_len) {
		v = bpf_map_lookup_elem(&short_frames, &zero);
		if (v)
			__sync_fetch_and_add(v, 1);
		return XDP_DROP;
	}
	bucket = len / 64;
	v = bpf_map_lookup_elem(&bytes_by_len, &bucket);
	if (v) {
		*v += len;
	} else {
		__u64 l = len;

		bpf_map_update_elem(&bytes_by_len, &bucket, &l, BPF_NOEXIST);
	}
	if ((void *)(eth + 1) <= data_end) {
		proto = bpf_ntohs(eth->h_proto);
		v = bpf_map_lookup_elem(&by_proto, &proto);
		if (v)
			__sync_fetch_and_add(v, 1);
		else
			bpf_map_update_elem(&by_proto, &proto, &one, BPF_NOEXIST);
	}
	return verdict;
}

char LICENSE[] SEC("license") = "GPL";
