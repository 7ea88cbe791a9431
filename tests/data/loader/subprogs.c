// SPDX-License-Identifier: GPL-2.0
/* Loader fixture: BPF-to-BPF calls of every shape clang emits --
 *   - a static noinline function in .text (call relocated against the .text section symbol),
 *   - a global noinline function in .text (relocated against its own symbol),
 *   - a bpf_loop() callback (ld_imm64 of a function address, BPF_PSEUDO_FUNC),
 *   - a static function called from two programs (appended to each).
 * sum_prog returns 3 + 10 + (0+1+2+3) = 19 (as an XDP retval it is just a number);
 * twice_prog returns 2 * 21 = 42. */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

static __attribute__((noinline)) int add_three(int x)
{
	return x + 3;
}

__attribute__((noinline)) int add_ten(int x)
{
	return x + 10;
}

static int loop_cb(__u32 index, void *ctx)
{
	*(int *)ctx += index;
	return 0;
}

static __attribute__((noinline)) int twice(int x)
{
	return x * 2;
}

SEC("xdp")
int sum_prog(struct xdp_md *ctx)
{
	int acc = 0;

	bpf_loop(4, loop_cb, &acc, 0);
	return add_ten(add_three(acc));
}

SEC("xdp")
int twice_prog(struct xdp_md *ctx)
{
	return twice(21);
}

char LICENSE[] SEC("license") = "GPL";
