"""Global-function arguments as the kernel reads them (Linux 6.18 kernel/bpf/btf.c
btf_prepare_func_args, verifier.c btf_check_func_arg_match and do_check_common): the BTF
``arg:`` decl tags (``__arg_ctx``, ``__arg_nonnull``, ``__arg_nullable``, ``__arg_trusted``,
``__arg_arena``; libbpf's bpf_helpers.h spells them so) and ``struct bpf_dynptr *``
arguments.  Each case is a clang-19 object; the checker gives the kernel's verdict and
message, and on the kernel the object loads exactly when the checker accepts it.  Two
cases the checker cannot decide (a trusted or untrusted kernel object: the kernel matches
the type against vmlinux BTF) are "cannot check", never a verdict."""

from __future__ import annotations

import pytest
from support.objbuild import build_text

from bpfdsl.checker import check_object
from bpfdsl.checker.report import NO_VERDICT
from bpfdsl.obj.collection import read_object

HEAD = r"""#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#define __arg_ctx __attribute__((btf_decl_tag("arg:ctx")))
#define __arg_nonnull __attribute__((btf_decl_tag("arg:nonnull")))
#define __arg_nullable __attribute__((btf_decl_tag("arg:nullable")))
#define __arg_trusted __attribute__((btf_decl_tag("arg:trusted")))
#define __arg_arena __attribute__((btf_decl_tag("arg:arena")))
#define __arg_foo __attribute__((btf_decl_tag("arg:foo")))
struct { __uint(type, BPF_MAP_TYPE_HASH); __uint(max_entries, 1); __type(key, __u32); __type(value, __u64); } m SEC(".maps");
char LICENSE[] SEC("license") = "GPL";
"""

# name: (kernel loads it: True / False, None = the checker cannot decide; message, C body)
CASES = {
    "arena-scalar": (
        True,
        "",
        r"""
__weak __noinline int a(void *p __arg_arena) { return ((long)p & 1); }
SEC("xdp") int prog(struct xdp_md *ctx) { return a((void *)(long)ctx->rx_queue_index) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "arena-stack": (
        False,
        "R1 is not a pointer to arena or scalar.",
        r"""
__weak __noinline int a(void *p __arg_arena) { return ((long)p & 1); }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = 1; return a(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "ctx-void": (
        True,
        "",
        r"""
__weak __noinline int q(void *c __arg_ctx) { struct xdp_md *x = c; return x->rx_queue_index > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { return q(ctx) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "ctx-void-notctx": (
        False,
        "arg#0 expects pointer to ctx",
        r"""
__weak __noinline int q(void *c __arg_ctx) { struct xdp_md *x = c; return x->rx_queue_index > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = 1; return q(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "ctx-wrongtype": (
        False,
        "arg#0 should be `struct xdp_md *`",
        r"""
__weak __noinline int q(struct __sk_buff *c __arg_ctx) { return c->len > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { return q((void *)ctx) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "dynptr-pass": (
        False,
        "Expected an initialized dynptr as arg #0",
        r"""
__weak __noinline int d2(struct bpf_dynptr *p) { return 1; }
__weak __noinline int d(struct bpf_dynptr *p) { return d2(p); }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 junk[2] = {1, 2}; return d((void *)junk) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "dynptr-scalar": (
        False,
        "arg#0 expected pointer to stack or const struct bpf_dynptr",
        r"""
__weak __noinline int d(struct bpf_dynptr *p) { return 1; }
SEC("xdp") int prog(struct xdp_md *ctx) { void *volatile z = 0; return d(z) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "dynptr-stackjunk": (
        False,
        "Expected an initialized dynptr as arg #0",
        r"""
__weak __noinline int d(struct bpf_dynptr *p) { char b[4]; if (bpf_dynptr_read(b, 4, p, 0, 0)) return 0; return b[0]; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 junk[2] = {1, 2}; return d((void *)junk) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "dynptr-uncalled": (
        True,
        "",
        r"""
__weak __noinline int d(struct bpf_dynptr *p) { return 1; }
SEC("xdp") int prog(struct xdp_md *ctx) { return XDP_PASS; }
""",
    ),
    "nn-deref-ok": (
        True,
        "",
        r"""
struct pair { __u32 a, b; };
__weak __noinline int get(struct pair *p __arg_nonnull) { return p->a + p->b > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { struct pair v = { ctx->rx_queue_index, 2 }; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nn-mapval": (
        True,
        "",
        r"""
__weak __noinline int get(__u64 *p __arg_nonnull) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&m, &k); if (!v) return XDP_PASS; return get(v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nn-maybe": (
        False,
        "arg#0 is expected to be non-NULL",
        r"""
__weak __noinline int get(__u64 *p __arg_nonnull) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u32 k = 0; __u64 *v = bpf_map_lookup_elem(&m, &k); return get(v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nn-null": (
        False,
        "arg#0 is expected to be non-NULL",
        r"""
__weak __noinline int get(__u64 *p __arg_nonnull) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { return get((void *)0) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nn-ok": (
        True,
        "",
        r"""
__weak __noinline int get(__u64 *p __arg_nonnull) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = ctx->rx_queue_index; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nn-short": (
        False,
        "invalid read from stack R1 off=-4 size=8",
        r"""
struct pair { __u32 a, b; };
__weak __noinline int get(struct pair *p __arg_nonnull) { return p->a + p->b > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u32 v = ctx->rx_queue_index; return get((void *)&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nonnull-nullable": (
        False,
        "arg#0 has invalid combination of tags",
        r"""
__weak __noinline int get(__u64 *p __arg_nonnull __arg_nullable) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = ctx->rx_queue_index; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "nullable-mem": (
        False,
        "arg#0 has invalid combination of tags",
        r"""
__weak __noinline int get(__u64 *p __arg_nullable) { return p && *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = ctx->rx_queue_index; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "tag-scalar": (
        False,
        "arg#0 has pointer tag, but is not a pointer type",
        r"""
__weak __noinline int q(int n __arg_nonnull) { return n > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { return q(ctx->rx_queue_index) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "tag-static": (
        True,
        "",
        r"""
static __noinline int get(__u64 *p __arg_nonnull) { return *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = ctx->rx_queue_index; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "tag-unknown": (
        False,
        "arg#0 has unsupported set of tags",
        r"""
__weak __noinline int get(__u64 *p __arg_foo) { return p && *p > 3; }
SEC("xdp") int prog(struct xdp_md *ctx) { __u64 v = ctx->rx_queue_index; return get(&v) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "trusted-null": (
        False,
        "arg#0 reference type('FWD sock') has no matches",
        r"""
struct sock;
__weak __noinline int t(struct sock *s __arg_trusted __arg_nullable) { return s != 0; }
SEC("xdp") int prog(struct xdp_md *ctx) { void *volatile z = 0; return t(z) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "trusted-def": (
        None,
        "cannot check",
        r"""
struct sock { int x; };
__weak __noinline int t(struct sock *s __arg_trusted __arg_nullable) { return s != 0; }
SEC("xdp") int prog(struct xdp_md *ctx) { void *volatile z = 0; return t(z) ? XDP_PASS : XDP_DROP; }
""",
    ),
    "untrusted": (
        None,
        "cannot check",
        r"""
#define __arg_untrusted __attribute__((btf_decl_tag("arg:untrusted")))
struct sock { int x; };
__weak __noinline int t(struct sock *s __arg_untrusted) { return s != 0; }
SEC("xdp") int prog(struct xdp_md *ctx) { void *volatile z = 0; return t(z) ? XDP_PASS : XDP_DROP; }
""",
    ),
    # the function may write its memory argument: the caller's stack there is unknown after
    # the call (check_mem_reg checks a write too, which clobbers the stack range)
    "stack-argument-clobbered": (
        False,
        "invalid access to packet",
        r"""
struct pair { __u64 a, b; };
__weak __noinline int get(struct pair *p) { return p ? p->a > 3 : 0; }
SEC("xdp") int prog(struct xdp_md *ctx) {
	struct pair v;
	v.a = 7; v.b = ctx->rx_queue_index;
	asm volatile("" : : "r"(&v) : "memory");
	int r = get(&v);
	__u64 a = *(volatile __u64 *)&v.a;
	if (a != 7) { /* the kernel cannot know a == 7 after the call */
		void *data = (void *)(long)ctx->data;
		return *(char *)data;  /* unchecked packet read */
	}
	return r ? XDP_PASS : XDP_DROP;
}
""",
    ),
    "rodata-argument": (
        True,
        "",
        r"""
struct pair { __u64 a, b; };
const volatile struct pair cfg = { 1, 2 };
__weak __noinline int get(const struct pair *p) { return p ? p->a > 3 : 0; }
SEC("xdp") int prog(struct xdp_md *ctx) { return get((const struct pair *)&cfg) ? XDP_PASS : XDP_DROP; }
""",
    ),
}


def _obj(tmp_path, name: str):
    return build_text(HEAD + CASES[name][2], tmp_path, name.replace("-", "_"))


@pytest.mark.parametrize("name", list(CASES))
def test_checker_verdict_and_message(tmp_path, name):
    ok, msg, _src = CASES[name]
    res = check_object(read_object(_obj(tmp_path, name).read_bytes()))
    errs = [e for p in res.programs for e in p.errors]
    if ok:
        assert res.ok, [e.message for e in errs]
        return
    assert errs, "the checker accepted what the kernel refuses"
    assert msg in errs[0].message, errs[0].message
    assert (errs[0].code in NO_VERDICT) == (ok is None), errs[0].code


@pytest.mark.kernel
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[0] is not None])
def test_kernel_agrees(tmp_path, name):
    from bpfdsl.runtime.loader import VerifierError, load_collection

    ok, msg, _src = CASES[name]
    spec = read_object(_obj(tmp_path, name).read_bytes())
    try:
        load_collection(spec).close()
        loaded, log = True, ""
    except VerifierError as e:
        loaded, log = False, e.log
    assert loaded == ok, log
    assert check_object(spec).ok == loaded
    if not ok:
        assert msg in log, log


@pytest.mark.kernel
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[0] is None])
def test_kernel_refuses_what_the_checker_cannot_decide_here(tmp_path, name):
    """A local ``struct sock`` does not match vmlinux's: the kernel refuses (a real trusted
    pointer would need the kernel's type, which no XDP program receives)."""
    from bpfdsl.runtime.loader import VerifierError, load_collection

    with pytest.raises(VerifierError) as ei:
        load_collection(read_object(_obj(tmp_path, name).read_bytes())).close()
    assert "has no matches" in ei.value.log
