// SPDX-License-Identifier: Apache-2.0
/* Sender/receiver for bench/skmsg_bench.py, compiled at run time with gcc -O2.
 *
 * A Python loop per 64-byte message would measure Python; this helper spends one send() or
 * recv() system call per message and nothing else, so the kernel path (TCP, or sk_msg
 * redirection) dominates.  It reports its own user/system CPU time so the script can show
 * that the loops are not the bottleneck (user time is a small share).
 *
 * usage: skbench CGROUP_DIR|- tput SIZE MILLIS [pin]  -> one line of key=value results
 *        skbench CGROUP_DIR|- lat  SIZE MILLIS [pin]
 * The process first moves itself into CGROUP_DIR (so the sock_ops program attached there sees
 * its sockets), then makes a TCP connection over 127.0.0.1 to itself and forks: the parent
 * sends, the child receives.
 * With "pin" the sender runs on the first allowed CPU, the receiver on the second.
 * TCP_NODELAY is set for lat (request/response traffic), not for tput (kernel defaults).
 *   tput: the parent send()s SIZE-byte messages for MILLIS ms, then shuts down the write side;
 *         the child recv()s until EOF.  bytes / (last byte received - first send) = throughput.
 *   lat:  ping-pong: the parent sends SIZE bytes, the child answers 1 byte once it has all
 *         SIZE; round-trip times over MILLIS ms -> mean and sd in microseconds.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
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

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what)
{
	fprintf(stderr, "skbench: %s: %s\n", what, strerror(errno));
	exit(2);
}

static double tv(struct timeval t)
{
	return t.tv_sec + t.tv_usec / 1e6;
}

/* sender on the first allowed CPU, receiver on the second (when there is one): the two
 * loops do not take turns on one CPU, which steadies the figures (as netperf -T) */
static void pin_cpu(int nth)
{
	cpu_set_t allowed, one;
	int seen = 0;

	if (sched_getaffinity(0, sizeof(allowed), &allowed))
		return;
	if (CPU_COUNT(&allowed) < 2)
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

	if (strcmp(dir, "-") == 0)
		return;
	snprintf(path, sizeof(path), "%s/cgroup.procs", dir);
	f = fopen(path, "w");
	if (!f || fprintf(f, "%d\n", getpid()) < 0 || fclose(f) != 0)
		die("joining the cgroup");
}

static void connect_pair(int *cli, int *srv, int nodelay)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	struct timeval to = { .tv_sec = 10 };
	int one = 1, l;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (void *)&a, sizeof(a)) || listen(l, 1) ||
	    getsockname(l, (void *)&a, &alen))
		die("listen");
	*cli = socket(AF_INET, SOCK_STREAM, 0);
	if (*cli < 0 || connect(*cli, (void *)&a, sizeof(a)))
		die("connect");
	*srv = accept(l, NULL, NULL);
	if (*srv < 0)
		die("accept");
	close(l);
	if (nodelay) {
		setsockopt(*cli, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		setsockopt(*srv, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	/* never hang: a lost wake-up ends the run with an error instead */
	setsockopt(*cli, SOL_SOCKET, SO_RCVTIMEO, &to, sizeof(to));
	setsockopt(*srv, SOL_SOCKET, SO_RCVTIMEO, &to, sizeof(to));
	setsockopt(*cli, SOL_SOCKET, SO_SNDTIMEO, &to, sizeof(to));
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

int main(int argc, char **argv)
{
	int cli, srv, pfd[2], status, pin;
	size_t size;
	double millis, t0, deadline;
	char *buf;
	pid_t pid;
	struct rusage ru;

	if (argc < 5 || argc > 6 || (strcmp(argv[2], "tput") && strcmp(argv[2], "lat"))) {
		fprintf(stderr, "usage: skbench CGROUP_DIR|- tput|lat SIZE MILLIS [pin]\n");
		return 2;
	}
	pin = argc == 6 && !strcmp(argv[5], "pin");
	size = strtoul(argv[3], NULL, 10);
	millis = atof(argv[4]);
	if (size < 1 || size > (1u << 24) || millis <= 0) {
		fprintf(stderr, "skbench: bad SIZE or MILLIS\n");
		return 2;
	}
	buf = calloc(1, size > (1u << 18) ? size : (1u << 18));
	if (!buf)
		die("calloc");
	join_cgroup(argv[1]);
	connect_pair(&cli, &srv, strcmp(argv[2], "lat") == 0);
	if (pipe(pfd))
		die("pipe");
	pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) { /* receiver */
		unsigned long long total = 0;
		double last = 0;

		if (pin)
			pin_cpu(1);
		close(cli);
		close(pfd[0]);
		if (!strcmp(argv[2], "tput")) {
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
			char one = 1;

			while (recv_all(srv, buf, size))
				send_all(srv, &one, 1);
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
	if (!strcmp(argv[2], "tput")) {
		unsigned long long msgs = 0;
		char line[256] = "";
		unsigned long long total = 0;
		double last = 0, ru_u = 0, ru_s = 0;
		FILE *f;

		do {
			for (int i = 0; i < 64; i++, msgs++)
				send_all(cli, buf, size);
		} while (now() < deadline);
		shutdown(cli, SHUT_WR);
		f = fdopen(pfd[0], "r");
		if (!f || !fgets(line, sizeof(line), f))
			die("reading the receiver's result");
		sscanf(line, "%llu %lf %lf %lf", &total, &last, &ru_u, &ru_s);
		if (waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) || WEXITSTATUS(status))
			die("receiver failed");
		getrusage(RUSAGE_SELF, &ru);
		if (total != msgs * size) {
			fprintf(stderr, "skbench: sent %llu bytes, received %llu\n", msgs * size, total);
			return 1;
		}
		printf("bytes=%llu msgs=%llu secs=%.9f send_user=%.6f send_sys=%.6f "
		       "recv_user=%.6f recv_sys=%.6f\n",
		       total, msgs, last - t0, tv(ru.ru_utime), tv(ru.ru_stime), ru_u, ru_s);
	} else {
		double sum = 0, sq = 0, t, mean;
		unsigned long long n = 0;
		char ack;

		do {
			t = now();
			send_all(cli, buf, size);
			if (!recv_all(cli, &ack, 1))
				die("peer closed");
			t = (now() - t) * 1e6;
			sum += t;
			sq += t * t;
			n++;
		} while (now() < deadline);
		shutdown(cli, SHUT_WR);
		waitpid(pid, &status, 0);
		mean = sum / n;
		printf("rtts=%llu mean_us=%.3f sd_us=%.3f\n", n, mean,
		       n > 1 ? sqrt((sq - n * mean * mean) / (n - 1)) : 0.0);
	}
	return 0;
}
