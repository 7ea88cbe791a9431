// C reference of benchmarks/userspace_bench.py: libbpf's ring_buffer__poll on a pinned ring
// buffer map until COUNT records, each printed as the JSON line `bpfdsl events --json`
// prints for the bench's struct event (or, with `-n`, an empty callback that only counts).
//   rb_print [-n] PIN_PATH COUNT
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct event { __u32 saddr; __u16 dport; __u32 len; __u64 seq; };  // saddr/dport network order
static long count, want;
static double now_s;

static int print_one(void *ctx, void *data, size_t size)
{
	const struct event *e = data;
	char a[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &e->saddr, a, sizeof a);
	printf("{\"map\": \"events\", \"time\": %.6f, \"record\": {\"saddr\": \"%s\", "
	       "\"dport\": %u, \"len\": %u, \"seq\": %llu}}\n",
	       now_s, a, ntohs(e->dport), e->len, (unsigned long long)e->seq);
	return ++count >= want ? 1 : 0;
}

static int count_one(void *ctx, void *data, size_t size)
{
	return ++count >= want ? 1 : 0;
}

int main(int argc, char **argv)
{
	int quiet = argc > 1 && !strcmp(argv[1], "-n");
	if (argc != 3 + quiet) {
		fprintf(stderr, "usage: rb_print [-n] PIN_PATH COUNT\n");
		return 2;
	}
	want = atol(argv[2 + quiet]);
	int fd = bpf_obj_get(argv[1 + quiet]);
	if (fd < 0) {
		perror("bpf_obj_get");
		return 1;
	}
	struct ring_buffer *rb = ring_buffer__new(fd, quiet ? count_one : print_one, NULL, NULL);
	if (!rb) {
		perror("ring_buffer__new");
		return 1;
	}
	struct timespec ts;
	while (count < want) {
		clock_gettime(CLOCK_REALTIME, &ts);
		now_s = ts.tv_sec + ts.tv_nsec / 1e9;
		if (ring_buffer__poll(rb, 200) < 0)
			break;
	}
	ring_buffer__free(rb);
	fprintf(stderr, "%ld record(s)\n", count);
	return 0;
}
