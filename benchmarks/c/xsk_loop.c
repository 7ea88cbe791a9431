// C reference of `bpfdsl bench xsk --loop c` (benchmarks/xsk_bench.py): the AF_XDP socket loop
// of the kernel's xdpsock sample written with libxdp's xsk API (xdp/xsk.h), copy mode,
// in the rxdrop or l2fwd form, with the same ring sizes and batch as the Python loop.
// It does not load an XDP program (XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD): it puts its
// socket into slot QUEUE of the xskmap with id MAP_ID, which the program under test uses.
//   xsk_loop MODE IFNAME QUEUE MAP_ID FRAMES BATCH
// Each line read on stdin prints "rx TX RING_FULL FILL_EMPTY" (totals so far); EOF ends.
#include <bpf/bpf.h>
#include <errno.h>
#include <linux/if_link.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>
#include <xdp/xsk.h>

#define FRAME_SIZE 2048

static struct xsk_ring_prod fq, tx;
static struct xsk_ring_cons cq, rx;
static struct xsk_socket *xsk;
static _Atomic unsigned long rx_total, tx_total;
static atomic_int halt;
static int l2fwd;
static unsigned batch, frames;

static void swap_macs(char *p)
{
	char t[6];
	memcpy(t, p, 6);
	memcpy(p, p + 6, 6);
	memcpy(p + 6, t, 6);
}

static void reap(void)
{
	__u32 idx_cq, idx_fq;
	unsigned n = xsk_ring_cons__peek(&cq, batch * 4, &idx_cq);
	if (!n)
		return;
	while (xsk_ring_prod__reserve(&fq, n, &idx_fq) != n)
		;
	for (unsigned i = 0; i < n; i++)
		*xsk_ring_prod__fill_addr(&fq, idx_fq++) = *xsk_ring_cons__comp_addr(&cq, idx_cq++);
	xsk_ring_prod__submit(&fq, n);
	xsk_ring_cons__release(&cq, n);
}

static void *loop(void *umem_area)
{
	int fd = xsk_socket__fd(xsk);
	struct pollfd pfd = {.fd = fd, .events = POLLIN};
	while (!halt) {
		__u32 idx_rx, idx;
		unsigned n = xsk_ring_cons__peek(&rx, batch, &idx_rx);
		if (!n) {
			if (l2fwd)
				reap();
			poll(&pfd, 1, 1);
			continue;
		}
		if (l2fwd) {
			while (xsk_ring_prod__reserve(&tx, n, &idx) != n)
				reap();
			for (unsigned i = 0; i < n; i++) {
				const struct xdp_desc *d = xsk_ring_cons__rx_desc(&rx, idx_rx++);
				swap_macs(xsk_umem__get_data(umem_area, d->addr));
				struct xdp_desc *o = xsk_ring_prod__tx_desc(&tx, idx++);
				o->addr = d->addr;
				o->len = d->len;
			}
			xsk_ring_prod__submit(&tx, n);
			xsk_ring_cons__release(&rx, n);
			// copy mode sends at most 32 frames per sendto (net/xdp/xsk.c TX_BATCH_SIZE):
			// kick until the kernel took the batch, as the Python loop does
			for (int k = 0; k < 64 && xsk_prod_nb_free(&tx, frames) < frames; k++)
				sendto(fd, NULL, 0, MSG_DONTWAIT, NULL, 0);
			reap();
			tx_total += n;
		} else {
			while (xsk_ring_prod__reserve(&fq, n, &idx) != n)
				;
			for (unsigned i = 0; i < n; i++)
				*xsk_ring_prod__fill_addr(&fq, idx++) =
					xsk_ring_cons__rx_desc(&rx, idx_rx++)->addr;
			xsk_ring_prod__submit(&fq, n);
			xsk_ring_cons__release(&rx, n);
		}
		rx_total += n;
	}
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: xsk_loop rxdrop|l2fwd IFNAME QUEUE MAP_ID FRAMES BATCH\n");
		return 2;
	}
	l2fwd = !strcmp(argv[1], "l2fwd");
	int queue = atoi(argv[3]), map_id = atoi(argv[4]);
	frames = atoi(argv[5]);
	batch = atoi(argv[6]);
	void *area = mmap(NULL, (size_t)frames * FRAME_SIZE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (area == MAP_FAILED)
		return perror("mmap"), 1;
	struct xsk_umem *umem;
	struct xsk_umem_config ucfg = {.fill_size = frames, .comp_size = frames,
				       .frame_size = FRAME_SIZE, .frame_headroom = 0};
	int err = xsk_umem__create(&umem, area, (size_t)frames * FRAME_SIZE, &fq, &cq, &ucfg);
	if (err)
		return fprintf(stderr, "xsk_umem__create: %s\n", strerror(-err)), 1;
	struct xsk_socket_config scfg = {.rx_size = frames, .tx_size = frames,
					 .libxdp_flags = XSK_LIBXDP_FLAGS__INHIBIT_PROG_LOAD,
					 .bind_flags = XDP_COPY};
	err = xsk_socket__create(&xsk, argv[2], queue, umem, &rx, &tx, &scfg);
	if (err)
		return fprintf(stderr, "xsk_socket__create: %s\n", strerror(-err)), 1;
	int map_fd = bpf_map_get_fd_by_id(map_id);
	int sfd = xsk_socket__fd(xsk);
	__u32 key = queue;
	if (map_fd < 0 || bpf_map_update_elem(map_fd, &key, &sfd, 0))
		return fprintf(stderr, "xskmap %d: %s\n", map_id, strerror(errno)), 1;
	__u32 idx;
	if (xsk_ring_prod__reserve(&fq, frames, &idx) != frames)
		return fprintf(stderr, "fill ring\n"), 1;
	for (unsigned i = 0; i < frames; i++)
		*xsk_ring_prod__fill_addr(&fq, idx++) = (__u64)i * FRAME_SIZE;
	xsk_ring_prod__submit(&fq, frames);
	pthread_t t;
	pthread_create(&t, NULL, loop, area);
	printf("ready\n");
	fflush(stdout);
	char line[64];
	while (fgets(line, sizeof(line), stdin)) {
		struct xdp_statistics st = {0};
		socklen_t len = sizeof(st);
		getsockopt(sfd, SOL_XDP, XDP_STATISTICS, &st, &len);
		printf("%lu %lu %llu %llu\n", rx_total, tx_total,
		       (unsigned long long)st.rx_ring_full,
		       (unsigned long long)st.rx_fill_ring_empty_descs);
		fflush(stdout);
	}
	halt = 1;
	pthread_join(t, NULL);
	bpf_map_delete_elem(map_fd, &key);
	xsk_socket__delete(xsk);
	xsk_umem__delete(umem);
	return 0;
}
