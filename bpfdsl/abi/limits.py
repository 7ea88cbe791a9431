"""Kernel limits and sizes the verifier, loader and language check against
(include/linux/bpf.h, bpf_verifier.h, uapi/linux/bpf.h, skbuff.h, errno.h, magic.h,
include/net/xdp.h; net/bpf/test_run.c, kernel/bpf/cpumap.c, verifier.c, btf.c, net/core/filter.c).
"""

from __future__ import annotations

from typing import Final

# include/linux/bpf.h (kernel-internal): the verifier proves a packet range from
# ``p + k > pkt_end`` only while p's variable part (umax) plus its fixed offset stays
# within this many bytes of the packet start (find_good_pkt_pointers, kernel/bpf/verifier.c)
MAX_PACKET_OFF = 0xFFFF

MAX_BPF_STACK: Final = 512  # bytes of stack per program (kernel limit)
BPF_MAXINSNS = 4096  # unprivileged insn limit; privileged: BPF_COMPLEXITY_LIMIT_INSNS
BPF_COMPLEXITY_LIMIT_INSNS: Final = 1_000_000  # processed-insn budget of the verifier
BPF_COMPLEXITY_LIMIT_JMP_SEQ: Final = 8192  # kernel/bpf/verifier.c: pending branch states at once
BPF_MAX_VAR_OFF: Final = 1 << 29  # include/linux/bpf_verifier.h: bound of a variable pointer offset
MAX_CALL_FRAMES: Final = 8  # include/linux/bpf_verifier.h: frames of a bpf-to-bpf call chain
MAX_TAIL_CALL_CNT: Final = 33  # include/linux/bpf.h: tail calls one run may make
BPF_MAX_LOOPS: Final = 8 * 1024 * 1024  # include/linux/bpf.h: the most iterations bpf_loop runs
BPF_SOCK_SIZE: Final = 80  # sizeof(struct bpf_sock), include/uapi/linux/bpf.h
BPF_FS_MAGIC: Final = 0xCAFE4A11  # include/uapi/linux/magic.h: statfs f_type of a bpffs mount
XDP_PACKET_HEADROOM: Final = 256  # include/uapi/linux/bpf.h: bytes before an XDP frame
MAX_SKB_FRAGS: Final = 17  # include/linux/skbuff.h (CONFIG_MAX_SKB_FRAGS default)
# BPF_PROG_TEST_RUN's XDP buffer (net/bpf/test_run.c bpf_prog_test_run_xdp): a 4096-byte
# frame (frame_sz; each frag is a PAGE_SIZE page), XDP_PACKET_HEADROOM before the packet and
# SKB_DATA_ALIGN(sizeof(struct skb_shared_info)) of tailroom (320 bytes on x86_64) after it.
# max_data_sz = 4096 - headroom - tailroom bytes are linear; a longer frame keeps the rest in
# page frags (a multi-buffer xdp_buff), -ENOMEM past MAX_SKB_FRAGS of them.
XDP_FRAME_SIZE: Final = 4096
XDP_SHINFO_TAILROOM: Final = 320
XDP_MAX_LINEAR: Final = XDP_FRAME_SIZE - XDP_PACKET_HEADROOM - XDP_SHINFO_TAILROOM  # 3520
XDP_TEST_RUN_MAX: Final = XDP_MAX_LINEAR + MAX_SKB_FRAGS * XDP_FRAME_SIZE  # 73152 bytes
# BPF_PROG_TEST_RUN with BPF_F_TEST_XDP_LIVE_FRAMES: the largest batch_size
# (net/bpf/test_run.c TEST_XDP_MAX_BATCH; one more answers E2BIG)
TEST_XDP_MAX_BATCH: Final = 256
XDP_FRAME_STRUCT: Final = 40  # sizeof(struct xdp_frame), include/net/xdp.h: starts the headroom
XDP_METALEN_MAX: Final = 255  # type_max(skb_shared_info.meta_len), include/net/xdp.h
CPUMAP_QSIZE_MAX: Final = 16384  # kernel/bpf/cpumap.c: "sanity limit on qsize" (EOVERFLOW above)
# kernel/bpf/verifier.c check_max_stack_depth_subprog: a subprogram that tail-calls may have
# less than this many bytes of caller stack above it ("tail_calls are not allowed when call
# stack of previous frames is %d bytes. Too large")
TAIL_CALL_STACK: Final = 256
# include/linux/bpf.h: arguments a function takes in registers (r1-r5): BPF-to-BPF calls
# and global functions (btf_prepare_func_args)
MAX_BPF_FUNC_REG_ARGS: Final = 5
# net/core/filter.c bpf_csum_diff: bytes per side, sizeof(struct bpf_scratchpad.diff)
CSUM_DIFF_MAX: Final = 512
# kernel/bpf/btf.c, libbpf btf.c (btf__resolve_size): nesting of modifiers, typedefs and
# arrays resolved before giving up
MAX_RESOLVE_DEPTH: Final = 32
# include/linux/errno.h: the kernel's internal "not supported" (not EOPNOTSUPP, 95)
ENOTSUPP: Final = 524
