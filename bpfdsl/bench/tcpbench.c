// SPDX-License-Identifier: Apache-2.0
/* TCP stream and request/response helper of `bpfdsl bench` (bpfdsl/bench/tcp.py),
 * compiled with the host's C compiler when a benchmark starts.
 *
 * A loop in Python per 64-byte message would measure Python; this helper spends one
 * send() or recv() system call per message and nothing else, so the kernel path (TCP over
 * a veth, or sk_msg redirection) is what is measured.  It reports its own user/system CPU
 * time, so a reader can see that the loops are not the bottleneck.
 *
 * usage: tcpbench stream|rr SIZE MILLIS [KEY=VALUE]...
 *   cgroup=DIR          join this cgroup v2 first (sock_ops programs attached there see
 *                       the sockets made afterwards)
 *   netns=PATH          make both sockets in this network namespace (setns)
 *   server_netns=PATH   make the listening socket there ...
 *   client_netns=PATH   ... and the connecting one there
 *   addr=A.B.C.D        the server's IPv4 address (default 127.0.0.1)
 *   pin=1               sender on the first allowed CPU, receiver on the second
 * The process makes the connection, then forks: the parent is the client (sender), the
 * child the server (receiver).
 *   stream: the client send()s SIZE-byte messages for MILLIS ms, then shuts down the write
 *           side; the server recv()s until EOF.  Throughput = bytes / (last byte received -
 *           first send).
 *   rr:     the client sends SIZE bytes, the server answers 1 byte once it has all SIZE;
 *           TCP_NODELAY on both.  Round trips for MILLIS ms (at most 4M of them kept):
 *           transactions, mean, sd, P50/P90/P99 in microseconds.
 * One line of key=value results on stdout; exit 2 with a message on stderr on failure.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RTTS (1u << 22)

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "tcpbench: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

static void pin_cpu(int nth)
{
	cpu_set_t allowed, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed) || CPU_COUNT(&allowed) < 2)
		return;
	for (int c = 0; c < CPU_SETSIZE; c++) {
		if (!CPU_ISSET(c, &allowed))
			continue;
		if (seen++ == nth) {
			CPU_ZERO(&one);
			CPU_SET(c, &one);
			sched_setaffinity(0, sizeof(one), &one);
			return;
		}
	}
}

static void join_cgroup(const char *dir)
{
	char path[4096];
	FILE *f;

	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "w");
	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0)
		die("joining the cgroup");
}

static void enter_netns(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || setns(fd, CLONE_NEWNET))
		die("entering the network namespace");
	close(fd);
}

static void set_timeouts(int fd)
{
	struct timeval to = { .tv_sec = 10 }; /* never hang: a lost wake-up is an error */

	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &to, sizeof(to));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &to, sizeof(to));
}

static void send_all(int fd, const char *buf, size_t n)
{
	while (n) {
		ssize_t k = send(fd, buf, n, 0);

		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("send");
		}
		buf += k;
		n -= (size_t)k;
	}
}

static int recv_all(int fd, char *buf, size_t n)
{
	while (n) {
		ssize_t k = recv(fd, buf, n, 0);

		if (k == 0)
			return 0;
		if (k < 0) {
			if (errno == EINTR)
				continue;
			die("recv");
		}
		buf += k;
		n -= (size_t)k;
	}
	return 1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double pct(const double *v, size_t n, double p)
{
	size_t i = (size_t)ceil(p / 100.0 * n);

	return n ? v[i ? i - 1 : 0] : 0;
}

int main(int argc, char **argv)
{
	const char *cgroup = NULL, *srv_ns = NULL, *cli_ns = NULL, *addr = "127.0.0.1";
	int cli, srv, lst, pfd[2], status, pin = 0, rr, one = 1;
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	double millis, t0, deadline;
	size_t size;
	char *buf;
	pid_t pid;
	struct rusage ru;

	if (argc < 4 || (strcmp(argv[1], "stream") && strcmp(argv[1], "rr"))) {
		fprintf(stderr, "usage: tcpbench stream|rr SIZE MILLIS [KEY=VALUE]...\n");
		return 2;
	}
	rr = !strcmp(argv[1], "rr");
	size = strtoul(argv[2], NULL, 10);
	millis = atof(argv[3]);
	for (int i = 4; i < argc; i++) {
		char *v = strchr(argv[i], '=');

		if (!v) {
			fprintf(stderr, "tcpbench: %s: want KEY=VALUE\n", argv[i]);
			return 2;
		}
		*v++ = 0;
		if (!strcmp(argv[i], "cgroup"))
			cgroup = v;
		else if (!strcmp(argv[i], "netns"))
			srv_ns = cli_ns = v;
		else if (!strcmp(argv[i], "server_netns"))
			srv_ns = v;
		else if (!strcmp(argv[i], "client_netns"))
			cli_ns = v;
		else if (!strcmp(argv[i], "addr"))
			addr = v;
		else if (!strcmp(argv[i], "pin"))
			pin = atoi(v);
		else {
			fprintf(stderr, "tcpbench: unknown option %s\n", argv[i]);
			return 2;
		}
	}
	if (size < 1 || size > (1u << 24) || millis <= 0 || inet_pton(AF_INET, addr, &a.sin_addr) != 1) {
		fprintf(stderr, "tcpbench: bad SIZE, MILLIS or addr\n");
		return 2;
	}
	buf = calloc(1, size > (1u << 18) ? size : (1u << 18));
	if (!buf)
		die("calloc");
	if (cgroup)
		join_cgroup(cgroup);
	if (srv_ns)
		enter_netns(srv_ns);
	lst = socket(AF_INET, SOCK_STREAM, 0);
	if (lst < 0 || bind(lst, (void *)&a, sizeof(a)) || listen(lst, 1) ||
	    getsockname(lst, (void *)&a, &alen))
		die("listen");
	if (cli_ns)
		enter_netns(cli_ns);
	cli = socket(AF_INET, SOCK_STREAM, 0);
	if (cli < 0)
		die("socket");
	set_timeouts(cli);
	if (connect(cli, (void *)&a, sizeof(a)))
		die("connect");
	srv = accept(lst, NULL, NULL);
	if (srv < 0)
		die("accept");
	close(lst);
	set_timeouts(srv);
	if (rr) {
		setsockopt(cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	if (pipe(pfd))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) { /* server */
		unsigned long long total = 0;
		double last = 0;

		if (pin)
			pin_cpu(1);
		close(cli);
		close(pfd[0]);
		if (!rr) {
			for (;;) {
				ssize_t k = recv(srv, buf, 1u << 18, 0);

				if (k == 0)
					break;
				if (k < 0) {
					if (errno == EINTR)
						continue;
					die("recv");
				}
				total += (unsigned long long)k;
				last = now();
			}
		} else {
			char ack = 1;

			while (recv_all(srv, buf, size))
				send_all(srv, &ack, 1);
		}
		getrusage(RUSAGE_SELF, &ru);
		dprintf(pfd[1], "%llu %.9f %.6f %.6f\n", total, last, tv(ru.ru_utime),
			tv(ru.ru_stime));
		_exit(0);
	}
	close(srv);
	close(pfd[1]);
	if (pin)
		pin_cpu(0);
	t0 = now();
	deadline = t0 + millis / 1000.0;
	if (!rr) {
		unsigned long long msgs = 0, total = 0;
		double last = 0, ru_u = 0, ru_s = 0;
		char line[256] = "";
		FILE *f;

		do {
			for (int i = 0; i < 64; i++, msgs++)
				send_all(cli, buf, size);
		} while (now() < deadline);
		shutdown(cli, SHUT_WR);
		f = fdopen(pfd[0], "r");
		if (!f || !fgets(line, sizeof(line), f))
			die("reading the server's result");
		sscanf(line, "%llu %lf %lf %lf", &total, &last, &ru_u, &ru_s);
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			die("server failed");
		getrusage(RUSAGE_SELF, &ru);
		if (total != msgs * size) {
			fprintf(stderr, "tcpbench: sent %llu bytes, received %llu\n", msgs * size,
				total);
			return 2;
		}
		printf("bytes=%llu msgs=%llu secs=%.9f send_user=%.6f send_sys=%.6f "
		       "recv_user=%.6f recv_sys=%.6f\n",
		       total, msgs, last - t0, tv(ru.ru_utime), tv(ru.ru_stime), ru_u, ru_s);
	} else {
		double *rtt = malloc(sizeof(double) * MAX_RTTS), sum = 0, sq = 0, t, mean, end;
		size_t n = 0;
		char ack;

		if (!rtt)
			die("malloc");
		do {
			t = now();
			send_all(cli, buf, size);
			if (!recv_all(cli, &ack, 1))
				die("server closed");
			end = now();
			t = (end - t) * 1e6;
			rtt[n++] = t;
			sum += t;
			sq += t * t;
		} while (end < deadline && n < MAX_RTTS);
		shutdown(cli, SHUT_WR);
		waitpid(pid, &status, 0);
		mean = sum / n;
		qsort(rtt, n, sizeof(double), cmp_double);
		printf("transactions=%zu secs=%.9f mean_us=%.3f sd_us=%.3f p50_us=%.3f "
		       "p90_us=%.3f p99_us=%.3f\n",
		       n, end - t0, mean, n > 1 ? sqrt(fmax(0, (sq - n * mean * mean) / (n - 1))) : 0.0,
		       pct(rtt, n, 50), pct(rtt, n, 90), pct(rtt, n, 99));
	}
	return 0;
}
