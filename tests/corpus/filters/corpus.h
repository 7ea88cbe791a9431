/* SPDX-License-Identifier: GPL-2.0 */
/* Shared by the hand-written C equivalents of the tcpdump filter corpus: libbpf-style XDP
 * programs (clang-19 -O2 -g -target bpf), XDP_PASS where libpcap's filter matches and
 * XDP_DROP where it does not.  LOAD reads a network-order value at byte OFF of the frame,
 * or returns XDP_DROP when the frame ends before its last byte, as a libpcap BPF load
 * past the captured length ends the filter with "no match". */
#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <linux/in.h>
#include <linux/in6.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define DATA(ctx) ((void *)(long)(ctx)->data)
#define DATA_END(ctx) ((void *)(long)(ctx)->data_end)

#define LOAD(type, var, off)                                              \
	type var;                                                         \
	do {                                                              \
		void *p_ = data + (off);                                  \
		if (p_ + sizeof(type) > data_end)                         \
			return XDP_DROP;                                  \
		var = *(type *)p_;                                        \
	} while (0)

#define HAS_PORTS(p) ((p) == 132 || (p) == IPPROTO_TCP || (p) == IPPROTO_UDP)

char LICENSE[] SEC("license") = "GPL";
