#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 4); __type(key, __u32); __type(value, __u64); } h SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_DEVMAP); __uint(max_entries, 4); __type(key, __u32); __type(value, __u32); } dm SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_CPUMAP); __uint(max_entries, 2); __type(key, __u32); __type(value, __u32); } cm SEC(".maps");
struct { __uint(type, BPF_MAP_TYPE_XSKMAP); __uint(max_entries, 4); __type(key, __u32); __type(value, __u32); } xm SEC(".maps");

/* packet[0..16) = parameters; results are written back into the packet and returned */
SEC("xdp") int csum(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	__u32 *p = data;
	if (data + 64 > end) return XDP_ABORTED;
	__u32 fs = (((__u8 *)data)[0] & 7) * 4, ts = (((__u8 *)data)[1] & 7) * 4;
	__s64 r = bpf_csum_diff(p + 4, fs, p + 8, ts, p[1]);
	p[2] = (__u32)r; p[3] = (__u32)(r >> 32);
	return XDP_PASS;
}

SEC("xdp") int head(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end) return XDP_ABORTED;
	int off = *(__s16 *)data;
	long rc = bpf_xdp_adjust_head(ctx, off);
	data = (void *)(long)ctx->data; end = (void *)(long)ctx->data_end;
	if (data + 4 > end) return 100;
	*(__u32 *)data = (__u32)rc;
	return rc ? 3 : 2;
}

SEC("xdp") int tail(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end) return XDP_ABORTED;
	int off = *(__s16 *)data;
	long rc = bpf_xdp_adjust_tail(ctx, off);
	data = (void *)(long)ctx->data; end = (void *)(long)ctx->data_end;
	if (data + 8 > end) return 100;
	*(__u32 *)(data + 4) = (__u32)rc;
	return rc ? 3 : 2;
}

SEC("xdp") int meta(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end) return XDP_ABORTED;
	int off = *(__s16 *)data;
	long rc = bpf_xdp_adjust_meta(ctx, off);
	void *m = (void *)(long)ctx->data_meta;
	data = (void *)(long)ctx->data;
	if (m + 4 <= data) *(__u32 *)m = 0xabcdef01;
	end = (void *)(long)ctx->data_end;
	if (data + 8 > end) return 100;
	*(__u32 *)(data + 4) = (__u32)rc;
	return rc ? 3 : 2;
}

SEC("xdp") int redir(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end) return XDP_ABORTED;
	__u8 which = ((__u8 *)data)[0] & 3;
	__u32 key = ((__u8 *)data)[1];
	__u64 flags = *(__u32 *)(data + 4);
	if (which == 0) return bpf_redirect_map(&dm, key, flags);
	if (which == 1) return bpf_redirect_map(&cm, key, flags);
	if (which == 2) return bpf_redirect_map(&xm, key, flags);
	return bpf_redirect(key, flags);
}

SEC("xdp") int upd(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	if (data + 16 > end) return XDP_ABORTED;
	__u32 key = ((__u8 *)data)[0] & 7;
	__u64 val = *(__u32 *)(data + 4);
	__u64 flags = ((__u8 *)data)[1] & 7;
	long rc;
	if (((__u8 *)data)[2] & 1)
		rc = bpf_map_delete_elem(&h, &key);
	else
		rc = bpf_map_update_elem(&h, &key, &val, flags);
	*(__u32 *)(data + 8) = (__u32)rc;
	__u64 *v = bpf_map_lookup_elem(&h, &key);
	if (v) *(__u32 *)(data + 12) = (__u32)*v;
	return XDP_PASS;
}

SEC("xdp") int bytes(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data, *end = (void *)(long)ctx->data_end;
	char buf[16];
	if (data + 16 > end) return XDP_ABORTED;
	__u32 off = *(__u16 *)data, len = ((__u8 *)data)[2] & 15;
	if (len == 0) len = 1;
	long rc = bpf_xdp_load_bytes(ctx, off, buf, len);
	if (rc == 0) rc = bpf_xdp_store_bytes(ctx, 4, buf, len);
	return rc ? 100 + (-rc) : 2;
}
char LICENSE[] SEC("license") = "GPL";
