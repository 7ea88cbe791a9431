// bpf_spin_lock / bpf_spin_unlock on a map value with a struct bpf_spin_lock (BTF): the
// kernel's process_spin_lock rules.  ok_* are accepted by Linux 6.18, bad_* refused;
// tests/checker/test_checker_spin_lock.py checks bpfdsl's checker agrees.
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct counter {
	__u64 packets;
	struct bpf_spin_lock lock;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16);
	__type(key, __u32);
	__type(value, struct counter);
} counters SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct counter);
} slots SEC(".maps");

struct plain {
	__u64 packets;
	__u64 bytes;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 4);
	__type(key, __u32);
	__type(value, struct plain);
} unlocked SEC(".maps");

// the lock inside a struct member, at any depth, through an array of one (the kernel's
// btf_find_nested_struct); not inside a union member
struct inner {
	__u64 a;
	struct bpf_spin_lock lock;
};
struct outer {
	__u64 x;
	struct inner in;
	__u64 y;
};
struct deep {
	__u32 z;
	struct outer o;
};
struct in_array {
	__u64 x;
	struct inner in[1];
};
union lock_or_word {
	struct bpf_spin_lock lock;
	__u64 word;
};
struct in_union {
	__u64 x;
	union lock_or_word u;
};
#define ARRAY_OF(name, T)                                                               \
	struct {                                                                        \
		__uint(type, BPF_MAP_TYPE_ARRAY);                                       \
		__uint(max_entries, 1);                                                 \
		__type(key, __u32);                                                     \
		__type(value, T);                                                       \
	} name SEC(".maps")
ARRAY_OF(nested, struct outer);
ARRAY_OF(nested_deep, struct deep);
ARRAY_OF(nested_array, struct in_array);
ARRAY_OF(nested_union, struct in_union);

static __always_inline __u32 key_of(struct xdp_md *ctx)
{
	return ctx->rx_queue_index & 15;
}

SEC("xdp")
int ok_count(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	c->packets++;
	c->bytes += ctx->data_end - ctx->data;
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

SEC("xdp")
int ok_const_key_array(struct xdp_md *ctx)
{
	__u32 k = 1;
	struct counter *c = bpf_map_lookup_elem(&slots, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	__u64 n = ++c->packets;
	bpf_spin_unlock(&c->lock);
	return n & 1 ? XDP_DROP : XDP_PASS;
}

// two values, locked one after the other; paths join with and without the lock taken
SEC("xdp")
int ok_two_in_turn(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx), j = 2;
	struct counter *a = bpf_map_lookup_elem(&counters, &k);
	struct counter *b = bpf_map_lookup_elem(&slots, &j);
	if (!a || !b)
		return XDP_PASS;
	bpf_spin_lock(&a->lock);
	if (a->packets > 100)
		a->bytes = 0;
	a->packets++;
	bpf_spin_unlock(&a->lock);
	bpf_spin_lock(&b->lock);
	b->packets++;
	bpf_spin_unlock(&b->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_exit_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	if (c->packets++ > 10)
		return XDP_DROP; // still locked
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_call_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	c->packets = bpf_ktime_get_ns();
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_double_lock(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx), j = 1;
	struct counter *a = bpf_map_lookup_elem(&counters, &k);
	struct counter *b = bpf_map_lookup_elem(&slots, &j);
	if (!a || !b)
		return XDP_PASS;
	bpf_spin_lock(&a->lock);
	bpf_spin_lock(&b->lock);
	bpf_spin_unlock(&b->lock);
	bpf_spin_unlock(&a->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_unlock_unlocked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_unlock_other(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx), j = 1;
	struct counter *a = bpf_map_lookup_elem(&counters, &k);
	struct counter *b = bpf_map_lookup_elem(&slots, &j);
	if (!a || !b)
		return XDP_PASS;
	bpf_spin_lock(&a->lock);
	bpf_spin_unlock(&b->lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_lock_field_read(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	return *(volatile __u32 *)&c->lock ? XDP_DROP : XDP_PASS;
}

SEC("xdp")
int bad_lock_wrong_offset(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock((struct bpf_spin_lock *)&c->bytes);
	bpf_spin_unlock((struct bpf_spin_lock *)&c->bytes);
	return XDP_PASS;
}

SEC("xdp")
int bad_no_lock_in_value(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct plain *p = bpf_map_lookup_elem(&unlocked, &k);
	if (!p)
		return XDP_PASS;
	bpf_spin_lock((struct bpf_spin_lock *)p);
	bpf_spin_unlock((struct bpf_spin_lock *)p);
	return XDP_PASS;
}

SEC("xdp")
int bad_lock_maybe_null(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	bpf_spin_lock((struct bpf_spin_lock *)c); // not checked for NULL (nor at the lock)
	if (c)
		bpf_spin_unlock((struct bpf_spin_lock *)c);
	return XDP_PASS;
}

SEC("xdp")
int bad_lock_stack(struct xdp_md *ctx)
{
	struct bpf_spin_lock l = {};
	bpf_spin_lock(&l);
	bpf_spin_unlock(&l);
	return XDP_PASS;
}

SEC("xdp")
int ok_loop_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	for (int i = 0; i < 8; i++) {
		bpf_spin_lock(&c->lock);
		if (c->bytes > i)
			c->packets += i;
		bpf_spin_unlock(&c->lock);
	}
	return XDP_PASS;
}

// a static function called with the lock held may release it (BPF_PSEUDO_CALL is allowed)
static __noinline int bump_and_unlock(struct counter *c)
{
	c->packets++;
	bpf_spin_unlock(&c->lock);
	return 0;
}

SEC("xdp")
int ok_unlock_in_subprog(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	return bump_and_unlock(c) ? XDP_DROP : XDP_PASS;
}

// the map value holding the lock passed as a helper's memory: the helper would read it
SEC("xdp")
int bad_value_to_helper(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx), j = 0;
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_map_update_elem(&slots, &j, c, BPF_ANY);
	return XDP_PASS;
}

__noinline int global_bump(struct counter *c)
{
	if (c)
		c->bytes++;
	return 0;
}

SEC("xdp")
int bad_global_call_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	global_bump(c);
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

static int step(__u64 i, void *data)
{
	return 0;
}

SEC("xdp")
int bad_loop_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx);
	struct counter *c = bpf_map_lookup_elem(&counters, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	bpf_loop(4, step, NULL, 0);
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}

char _license[] SEC("license") = "GPL";

SEC("xdp")
int ok_nested_lock(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct outer *v = bpf_map_lookup_elem(&nested, &k);
	if (!v)
		return XDP_PASS;
	bpf_spin_lock(&v->in.lock);
	v->y++;
	bpf_spin_unlock(&v->in.lock);
	return XDP_PASS;
}

SEC("xdp")
int ok_deep_lock(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct deep *v = bpf_map_lookup_elem(&nested_deep, &k);
	if (!v)
		return XDP_PASS;
	bpf_spin_lock(&v->o.in.lock);
	v->z++;
	bpf_spin_unlock(&v->o.in.lock);
	return XDP_PASS;
}

SEC("xdp")
int ok_lock_in_array_of_one(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct in_array *v = bpf_map_lookup_elem(&nested_array, &k);
	if (!v)
		return XDP_PASS;
	bpf_spin_lock(&v->in[0].lock);
	v->x++;
	bpf_spin_unlock(&v->in[0].lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_lock_in_union(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct in_union *v = bpf_map_lookup_elem(&nested_union, &k);
	if (!v)
		return XDP_PASS;
	bpf_spin_lock(&v->u.lock);
	v->x++;
	bpf_spin_unlock(&v->u.lock);
	return XDP_PASS;
}

SEC("xdp")
int bad_nested_lock_field_read(struct xdp_md *ctx)
{
	__u32 k = 0;
	struct outer *v = bpf_map_lookup_elem(&nested, &k);
	if (!v)
		return XDP_PASS;
	return *(volatile __u32 *)&v->in.lock ? XDP_DROP : XDP_PASS;
}

// the same value type in two maps: paths that lock a value of either join
SEC("xdp")
int ok_either_map_locked(struct xdp_md *ctx)
{
	__u32 k = key_of(ctx) & 3;
	struct counter *c;

	if (ctx->rx_queue_index & 16)
		c = bpf_map_lookup_elem(&counters, &k);
	else
		c = bpf_map_lookup_elem(&slots, &k);
	if (!c)
		return XDP_PASS;
	bpf_spin_lock(&c->lock);
	c->packets++;
	bpf_spin_unlock(&c->lock);
	return XDP_PASS;
}
