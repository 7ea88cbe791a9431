// C reference of benchmarks/userspace_bench.py: load an object with libbpf, then one
// bpf_prog_test_run_opts per frame of a pcap (classic pcap, little endian), and print the
// totals per XDP verdict as `bpfdsl run -q` counts them.
//   testrun_loop OBJ PROG PCAP
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: testrun_loop OBJ PROG PCAP\n");
		return 2;
	}
	libbpf_set_print(NULL);
	struct bpf_object *obj = bpf_object__open_file(argv[1], NULL);
	if (!obj || bpf_object__load(obj)) {
		fprintf(stderr, "cannot load %s\n", argv[1]);
		return 1;
	}
	struct bpf_program *p = bpf_object__find_program_by_name(obj, argv[2]);
	if (!p) {
		fprintf(stderr, "no program %s\n", argv[2]);
		return 1;
	}
	int fd = bpf_program__fd(p);
	FILE *f = fopen(argv[3], "rb");
	unsigned char hdr[24], rec[16], data[65536 + 16], out[65536 + 4096];
	if (!f || fread(hdr, 1, 24, f) != 24) {
		fprintf(stderr, "cannot read %s\n", argv[3]);
		return 1;
	}
	long totals[8] = {0}, frames = 0;
	while (fread(rec, 1, 16, f) == 16) {
		uint32_t caplen;
		memcpy(&caplen, rec + 8, 4);
		if (caplen > 65536 || fread(data, 1, caplen, f) != caplen)
			break;
		LIBBPF_OPTS(bpf_test_run_opts, o, .data_in = data, .data_size_in = caplen,
			    .data_out = out, .data_size_out = sizeof out, .repeat = 1);
		if (bpf_prog_test_run_opts(fd, &o) == 0 && o.retval < 8)
			totals[o.retval]++;
		frames++;
	}
	static const char *names[] = {"XDP_ABORTED", "XDP_DROP", "XDP_PASS", "XDP_TX", "XDP_REDIRECT"};
	printf("%ld frames:", frames);
	for (int i = 0; i < 5; i++)
		if (totals[i])
			printf(" %s %ld", names[i], totals[i]);
	printf("\n");
	bpf_object__close(obj);
	return 0;
}
