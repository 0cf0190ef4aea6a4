// SPDX-License-Identifier: GPL-2.0
/*
 * appload: a small load generator run inside the guest, beside a server,
 * for deterministic per-request costs (`ukl bench app redis|memcached|nginx`).
 *
 *   appload PROTO PORT OP COMM REQUESTS CONNS PIPELINE
 *   appload rate PROTO [ADDR:]PORT OP COMM|- REQUESTS CONNS RATE
 *   appload run PROGRAM [ARG...]
 *
 * PROTO is redis, memcache or http; OP is get or set (http: get only).
 * It waits for the server, stores the key once, then sends REQUESTS
 * requests over CONNS connections, PIPELINE at a time per connection,
 * reading and checking every response. It prints one line:
 *
 *   APPLOAD proto op requests conns pipeline server_ns elapsed_ns
 *
 * server_ns is the CPU time over the load of the processes named COMM
 * (all their threads; nginx's master and workers), read through
 * clock_getcpuclockid(): under `-icount shift=0` a nanosecond is one guest
 * instruction. elapsed_ns is CLOCK_MONOTONIC over the load (server, client
 * and kernel).
 *
 * `appload rate` is an open-loop load (redis and memcache): requests
 * arrive as a Poisson process of RATE requests per second of guest time
 * (under `-icount shift=0,sleep=off` the guest's virtual time, where a
 * busy nanosecond is one guest instruction and idle time passes at once),
 * round robin over CONNS connections, whether or not earlier ones were
 * answered. The arrivals are drawn from a fixed seed, so runs repeat;
 * APPLOAD_SEED=N (environment) draws another sequence. A request's latency runs from its scheduled arrival,
 * not from when it was sent, so a client that falls behind adds its delay
 * to the latencies instead of hiding it (no coordinated omission). It
 * prints
 *
 *   APPRATE proto op requests conns rate offered achieved p50_ns p99_ns max_ns server_ns elapsed_ns
 *
 * offered is the rate the drawn arrivals make: a seed draws the same
 * sequence at every rate, scaled, so it is RATE times that sequence's
 * constant (1.02 for the default seed and a few thousand requests).
 * achieved is the requests answered per second over the load. At most MAX_INFLIGHT requests
 * are unanswered per connection; a request due beyond waits to be sent,
 * its latency running. It is not a plugin region. With ADDR (IPv4) and
 * COMM "-" it loads a server on another machine (the guest, from the host:
 * `ukl bench NAME --clients host`), in this machine's time; server_ns is 0.
 *
 * `appload run` runs PROGRAM to completion and prints
 *
 *   APPRUN cpu_ns elapsed_ns
 *
 * from its resource usage (exact: the scheduler's runtime) and the clock.
 *
 * The load (or the run) is also a measured region for ukl's instruction-
 * class plugin (guest/bench/region.h; `ukl bench ... --icount --model cycles`):
 * region APPLOAD_REGION (from the environment, default 0) begins after the
 * server's CPU clock is first read and ends before it is read again, so it
 * holds everything the guest executes during the load -- server, client,
 * kernel and idle loop. The markers are NOPs without the plugin.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "region.h"

#define VALUE "0123456789abcdef0123456789abcdef"	/* 32 bytes */
#define MAX_INFLIGHT 256	/* unanswered requests per connection (rate) */

struct conn {
	int fd;
	char buf[65536];
	size_t len, pos;
};

static const char *proto;

static void die(const char *what)
{
	fprintf(stderr, "appload: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* The id of this invocation's region (checked: region_select() takes any
 * value but the tool must find the region it named). */
static unsigned int region_id(void)
{
	const char *s = getenv("APPLOAD_REGION");
	char *end;
	unsigned long id;

	if (!s)
		return 0;
	id = strtoul(s, &end, 10);
	if (!*s || *end || id >= REGION_IDS) {
		fprintf(stderr, "appload: APPLOAD_REGION=%s: not a region id below %d\n", s, REGION_IDS);
		exit(2);
	}
	return id;
}

static inline void region_begin(void)
{
	__asm__ volatile(REGION_BEGIN_SELECTED ::: "memory");
}

static inline void region_end(void)
{
	__asm__ volatile(REGION_END_OPEN ::: "memory");
}

static long long now_ns(clockid_t clk)
{
	struct timespec ts;

	if (clock_gettime(clk, &ts))
		die("clock_gettime");
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int connect_to(struct in_addr addr, int port, int tries)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(port), .sin_addr = addr };
	int one = 1;

	for (;;) {
		int fd = socket(AF_INET, SOCK_STREAM, 0);

		if (fd < 0)
			die("socket");
		if (!connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
			setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
			return fd;
		}
		close(fd);
		if (--tries <= 0)
			die("connect");
		usleep(100000);
	}
}

static void send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w <= 0)
			die("write");
		p += w;
		n -= w;
	}
}

static int fill(struct conn *c)
{
	ssize_t r;

	if (c->pos == c->len)
		c->pos = c->len = 0;
	if (c->len == sizeof(c->buf)) {
		memmove(c->buf, c->buf + c->pos, c->len - c->pos);
		c->len -= c->pos;
		c->pos = 0;
	}
	r = read(c->fd, c->buf + c->len, sizeof(c->buf) - c->len);
	if (r <= 0) {
		fprintf(stderr, "appload: the server closed the connection\n");
		exit(1);
	}
	c->len += r;
	return 0;
}

/* One line, without its CRLF, into out (truncated at size) */
static void read_line(struct conn *c, char *out, size_t size)
{
	size_t n = 0;

	for (;;) {
		char *nl;

		while (c->pos == c->len)
			fill(c);
		nl = memchr(c->buf + c->pos, '\n', c->len - c->pos);
		size_t take = nl ? (size_t)(nl - (c->buf + c->pos)) + 1 : c->len - c->pos;

		for (size_t i = 0; i < take; i++)
			if (n + 1 < size)
				out[n++] = c->buf[c->pos + i];
		c->pos += take;
		if (nl)
			break;
	}
	while (n && (out[n - 1] == '\n' || out[n - 1] == '\r'))
		n--;
	out[n] = 0;
}

static void skip(struct conn *c, size_t n)
{
	while (n) {
		size_t take;

		while (c->pos == c->len)
			fill(c);
		take = c->len - c->pos < n ? c->len - c->pos : n;
		c->pos += take;
		n -= take;
	}
}

static void bad(const char *line)
{
	fprintf(stderr, "appload: unexpected %s response: '%s'\n", proto, line);
	exit(1);
}

static void read_response(struct conn *c, const char *op)
{
	char line[512];

	read_line(c, line, sizeof(line));
	if (!strcmp(proto, "redis")) {
		if (line[0] == '$') {
			long n = atol(line + 1);

			if (n != (long)strlen(VALUE))
				bad(line);
			skip(c, n + 2);
		} else if (strcmp(line, "+OK")) {
			bad(line);
		}
	} else if (!strcmp(proto, "memcache")) {
		if (!strcmp(op, "set")) {
			if (strcmp(line, "STORED"))
				bad(line);
			return;
		}
		if (strncmp(line, "VALUE ", 6))
			bad(line);
		skip(c, strlen(VALUE) + 2);
		read_line(c, line, sizeof(line));
		if (strcmp(line, "END"))
			bad(line);
	} else {
		long length = -1;

		if (strncmp(line, "HTTP/1.1 200", 12))
			bad(line);
		for (;;) {
			read_line(c, line, sizeof(line));
			if (!line[0])
				break;
			if (!strncasecmp(line, "Content-Length:", 15))
				length = atol(line + 15);
		}
		if (length < 0)
			bad("(no Content-Length)");
		skip(c, length);
	}
}

static size_t request(char *out, size_t size, const char *what)
{
	if (!strcmp(proto, "redis"))
		return !strcmp(what, "set") ?
			snprintf(out, size, "*3\r\n$3\r\nSET\r\n$6\r\nukl:k1\r\n$%zu\r\n%s\r\n",
				 strlen(VALUE), VALUE) :
			snprintf(out, size, "*2\r\n$3\r\nGET\r\n$6\r\nukl:k1\r\n");
	if (!strcmp(proto, "memcache"))
		return !strcmp(what, "set") ?
			snprintf(out, size, "set ukl:k1 0 0 %zu\r\n%s\r\n", strlen(VALUE), VALUE) :
			snprintf(out, size, "get ukl:k1\r\n");
	return snprintf(out, size, "GET /index.html HTTP/1.1\r\nHost: ukl\r\n\r\n");
}

/* The CPU clocks of every process whose name is comm */
static int server_clocks(const char *comm, clockid_t *clocks, int max)
{
	DIR *proc = opendir("/proc");
	struct dirent *d;
	int n = 0;

	if (!proc)
		die("/proc");
	while ((d = readdir(proc)) && n < max) {
		char path[300], name[64] = "";
		FILE *f;
		pid_t pid = atoi(d->d_name);

		if (pid <= 0)
			continue;
		snprintf(path, sizeof(path), "/proc/%d/comm", pid);
		f = fopen(path, "r");
		if (!f)
			continue;
		if (fgets(name, sizeof(name), f))
			name[strcspn(name, "\n")] = 0;
		fclose(f);
		if (!strcmp(name, comm) && !clock_getcpuclockid(pid, &clocks[n]))
			n++;
	}
	closedir(proc);
	if (!n) {
		fprintf(stderr, "appload: no process named %s\n", comm);
		exit(1);
	}
	return n;
}

static long long cpu_ns(const clockid_t *clocks, int n)
{
	long long sum = 0;

	for (int i = 0; i < n; i++)
		sum += now_ns(clocks[i]);
	return sum;
}

/* The response to a request of the rate load: fixed, since key and value are */
static size_t expected(char *out, size_t size, const char *op)
{
	if (!strcmp(proto, "redis"))
		return !strcmp(op, "set") ? snprintf(out, size, "+OK\r\n") :
			snprintf(out, size, "$%zu\r\n%s\r\n", strlen(VALUE), VALUE);
	return !strcmp(op, "set") ? snprintf(out, size, "STORED\r\n") :
		snprintf(out, size, "VALUE ukl:k1 0 %zu\r\n%s\r\nEND\r\n", strlen(VALUE), VALUE);
}

/* The gap to the next Poisson arrival, in ns: an exponential variate from a
 * fixed-seed xorshift64* generator */
static unsigned long long rng_state = 0x554b4c2d72617465ULL;

static double next_gap(double mean_ns)
{
	unsigned long long x = rng_state;
	double u;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	rng_state = x;
	u = ((x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;	/* [0, 1) */
	return -log(1.0 - u) * mean_ns;
}

static int cmp_ll(const void *a, const void *b)
{
	long long x = *(const long long *)a, y = *(const long long *)b;

	return x < y ? -1 : x > y;
}

/* The nearest-rank q-quantile of n sorted values */
static long long quantile(const long long *v, long n, double q)
{
	long k = (long)ceil(q * n) - 1;

	return v[k < 0 ? 0 : k];
}

static int rate_load(char **argv)
{
	static struct pollfd pfd[64];
	static size_t matched[64];
	static long answered[64];
	static clockid_t clocks[64];
	char req[256], resp[256], buf[65536], *colon = strchr(argv[1], ':');
	struct in_addr addr = { htonl(INADDR_LOOPBACK) };
	const char *op = argv[2];
	long requests = atol(argv[4]), sent = 0, done = 0;
	int nconns = atoi(argv[5]), nclocks = 0, port;
	double rate = atof(argv[6]);
	long long *sched, *lat, t0, last = 0, cpu0;
	double next;
	size_t reqlen, resplen;

	proto = argv[0];
	if (colon) {	/* ADDR:PORT: a server elsewhere (the guest, from the host) */
		*colon = 0;
		if (inet_pton(AF_INET, argv[1], &addr) != 1) {
			fprintf(stderr, "appload: %s: not an IPv4 address\n", argv[1]);
			return 2;
		}
	}
	port = atoi(colon ? colon + 1 : argv[1]);
	if ((strcmp(proto, "redis") && strcmp(proto, "memcache")) ||
	    (strcmp(op, "get") && strcmp(op, "set")) || requests <= 0 || requests > 1000000 ||
	    nconns <= 0 || nconns > 64 || !(rate >= 1 && rate <= 1e8) || port <= 0 || port > 65535) {
		fprintf(stderr, "appload: bad arguments (rate: redis|memcache, [ADDR:]PORT, get|set, "
			"requests 1..10^6, conns 1..64, rate 1..10^8 per second)\n");
		return 2;
	}
	if (getenv("APPLOAD_SEED")) {	/* another sequence: the state must not be 0 */
		rng_state ^= strtoull(getenv("APPLOAD_SEED"), NULL, 10) * 0x9E3779B97F4A7C15ULL;
		if (!rng_state)
			rng_state = 1;
	}
	if (colon && strcmp(argv[3], "-")) {
		fprintf(stderr, "appload: a server at ADDR:PORT is not on this machine: give COMM as -\n");
		return 2;
	}
	/* a sleep must end when asked: the default 50 us slack would delay arrivals */
	if (prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0))
		die("PR_SET_TIMERSLACK");
	sched = calloc(requests, sizeof(*sched));
	lat = calloc(requests, sizeof(*lat));
	if (!sched || !lat)
		die("calloc");
	for (int i = 0; i < nconns; i++) {
		static struct conn c0;

		pfd[i].fd = connect_to(addr, port, i ? 1 : 600);
		pfd[i].events = POLLIN;
		if (!i) {	/* the key the gets read */
			c0.fd = pfd[0].fd;
			reqlen = request(req, sizeof(req), "set");
			send_all(c0.fd, req, reqlen);
			read_response(&c0, "set");
			if (c0.pos != c0.len)
				bad("(more than one response)");
		}
	}
	if (strcmp(argv[3], "-"))	/* "-": not on this machine, server_ns is 0 */
		nclocks = server_clocks(argv[3], clocks, 64);
	reqlen = request(req, sizeof(req), op);
	resplen = expected(resp, sizeof(resp), op);

	cpu0 = cpu_ns(clocks, nclocks);
	t0 = now_ns(CLOCK_MONOTONIC);
	next = t0 + next_gap(1e9 / rate);
	while (done < requests) {
		long long now = now_ns(CLOCK_MONOTONIC);
		struct timespec ts, *wait = NULL;

		/*
		 * Send what is due, unless the connection it goes to has
		 * MAX_INFLIGHT unanswered requests (bounded socket buffers, and
		 * no deadlock of blocking writes far beyond saturation): then it
		 * waits for answers, its latency running from its arrival.
		 */
		while (sent < requests && next <= now &&
		       sent / nconns - answered[sent % nconns] < MAX_INFLIGHT) {
			sched[sent] = (long long)next;
			send_all(pfd[sent % nconns].fd, req, reqlen);
			sent++;
			next += next_gap(1e9 / rate);
			now = now_ns(CLOCK_MONOTONIC);	/* sending takes time */
		}
		if (sent < requests && next > now) {	/* until the next arrival, or an answer */
			long long d = (long long)ceil(next) - now;

			ts.tv_sec = d / 1000000000LL;
			ts.tv_nsec = d % 1000000000LL;
			wait = &ts;
		}
		if (ppoll(pfd, nconns, wait, NULL) < 0 && errno != EINTR)
			die("ppoll");
		now = now_ns(CLOCK_MONOTONIC);
		for (int i = 0; i < nconns; i++) {
			ssize_t r;

			if (!(pfd[i].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			r = read(pfd[i].fd, buf, sizeof(buf));
			if (r <= 0) {
				fprintf(stderr, "appload: the server closed the connection\n");
				return 1;
			}
			for (ssize_t k = 0; k < r; k++) {
				long idx = answered[i] * nconns + i;

				if (idx >= sent)
					bad("(an answer to no request)");
				if (buf[k] != resp[matched[i]])
					bad("(not the expected bytes)");
				if (++matched[i] < resplen)
					continue;
				matched[i] = 0;
				answered[i]++;
				lat[done++] = now - sched[idx];
				last = now;
			}
		}
	}
	cpu0 = cpu_ns(clocks, nclocks) - cpu0;
	qsort(lat, requests, sizeof(*lat), cmp_ll);
	printf("APPRATE %s %s %ld %d %.0f %.0f %.0f %lld %lld %lld %lld %lld\n", proto, op, requests, nconns,
	       rate, requests * 1e9 / (sched[requests - 1] - t0), requests * 1e9 / (last - t0),
	       quantile(lat, requests, 0.5), quantile(lat, requests, 0.99), lat[requests - 1], cpu0, last - t0);
	for (int i = 0; i < nconns; i++)
		close(pfd[i].fd);
	return 0;
}

static int run(char **argv)
{
	long long t0, t1;
	struct rusage ru;
	int st;
	pid_t pid;

	region_select(region_id());
	t0 = now_ns(CLOCK_MONOTONIC);
	region_begin();
	pid = fork();

	if (pid < 0)
		die("fork");
	if (pid == 0) {
		execv(argv[0], argv);
		die(argv[0]);
	}
	if (wait4(pid, &st, 0, &ru) != pid)
		die("wait4");
	region_end();
	t1 = now_ns(CLOCK_MONOTONIC);
	if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "appload: %s failed (wait status %#x)\n", argv[0], st);
		return 1;
	}
	printf("APPRUN %lld %lld\n",
	       (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
	       (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL, t1 - t0);
	return 0;
}

int main(int argc, char **argv)
{
	static struct conn conns[64];
	static clockid_t clocks[64];
	const char *op;
	char req[256], *batch;
	long requests, done = 0;
	int port, nconns, pipeline, nclocks;
	size_t reqlen;
	long long cpu0, t0;

	region_id();	/* a bad APPLOAD_REGION is refused before any work */
	if (argc > 2 && !strcmp(argv[1], "run"))
		return run(argv + 2);
	if (argc == 9 && !strcmp(argv[1], "rate"))
		return rate_load(argv + 2);
	if (argc != 8) {
		fprintf(stderr, "usage: appload redis|memcache|http PORT get|set COMM REQUESTS CONNS PIPELINE\n"
			"       appload rate redis|memcache [ADDR:]PORT get|set COMM|- REQUESTS CONNS RATE\n"
			"       appload run PROGRAM [ARG...]\n");
		return 2;
	}
	proto = argv[1];
	port = atoi(argv[2]);
	op = argv[3];
	requests = atol(argv[5]);
	nconns = atoi(argv[6]);
	pipeline = atoi(argv[7]);
	if ((strcmp(proto, "redis") && strcmp(proto, "memcache") && strcmp(proto, "http")) ||
	    (strcmp(op, "get") && strcmp(op, "set")) || (!strcmp(proto, "http") && strcmp(op, "get")) ||
	    requests <= 0 || nconns <= 0 || nconns > 64 || pipeline <= 0 || pipeline > 256) {
		fprintf(stderr, "appload: bad arguments\n");
		return 2;
	}

	for (int i = 0; i < nconns; i++)
		conns[i].fd = connect_to((struct in_addr){ htonl(INADDR_LOOPBACK) }, port, i ? 1 : 600);
	if (strcmp(proto, "http")) {	/* the key the gets read */
		reqlen = request(req, sizeof(req), "set");
		send_all(conns[0].fd, req, reqlen);
		read_response(&conns[0], "set");
	}
	nclocks = server_clocks(argv[4], clocks, 64);
	reqlen = request(req, sizeof(req), op);
	batch = malloc(reqlen * pipeline);
	if (!batch)
		die("malloc");
	for (int i = 0; i < pipeline; i++)
		memcpy(batch + i * reqlen, req, reqlen);

	region_select(region_id());
	cpu0 = cpu_ns(clocks, nclocks);
	t0 = now_ns(CLOCK_MONOTONIC);
	region_begin();
	while (done < requests) {
		int n[64] = { 0 };

		for (int i = 0; i < nconns && done < requests; i++) {
			n[i] = requests - done < pipeline ? requests - done : pipeline;
			send_all(conns[i].fd, batch, reqlen * n[i]);
			done += n[i];
		}
		for (int i = 0; i < nconns; i++)
			for (int k = 0; k < n[i]; k++)
				read_response(&conns[i], op);
	}
	region_end();
	printf("APPLOAD %s %s %ld %d %d %lld %lld\n", proto, op, requests, nconns, pipeline,
	       cpu_ns(clocks, nclocks) - cpu0, now_ns(CLOCK_MONOTONIC) - t0);
	for (int i = 0; i < nconns; i++)
		close(conns[i].fd);
	return 0;
}
