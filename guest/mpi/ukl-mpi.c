// SPDX-License-Identifier: GPL-2.0
/*
 * ukl-mpi: the MPI subset (mpi.h) that Secrecy needs, over TCP, so that
 * its three parties can run as three ranks in three VMs. Debian's MPICH
 * does not fit: it is built for UCX (no static library), and its process
 * manager starts the ranks on one OS. Single-threaded; plain glibc/POSIX.
 *
 * Environment (read by MPI_Init):
 *   UKL_MPI_HOSTS    comma-separated IPv4 addresses, each optionally
 *                    ADDR:PORT, in rank order; the world size N is the
 *                    number of entries. Unset: a world of size 1 (rank 0),
 *                    as MPI's singleton MPI_Init.
 *   UKL_MPI_RANK     this rank, 0..N-1 (required with UKL_MPI_HOSTS).
 *   UKL_MPI_PORT     the port of an entry that names none (default 7350).
 *   UKL_MPI_TIMEOUT  seconds for the connection setup (default 60).
 *   UKL_MPI_FINALIZE_TIMEOUT
 *                    seconds MPI_Finalize waits at most for its peers
 *                    (below); unset, empty or 0: no limit (the default).
 *   UKL_MPI_WAIT     block (default): a rank that waits sleeps in poll();
 *                    spin: it calls poll() with a zero timeout in a loop,
 *                    as MPICH's and Open MPI's TCP transports do.
 *   UKL_MPI_STATS    1: MPI_Finalize prints the statistics line below.
 * A value that cannot be used is an error (below). When UKL_MPI_HOSTS is
 * unset, UKL_HOSTS and UKL_RANK, which `ukl cluster` gives each node (its
 * nodes' addresses, its number), stand for UKL_MPI_HOSTS and UKL_MPI_RANK.
 *
 * Connection setup (MPI_Init): a full mesh of TCP connections. Every rank
 * but the last listens on its entry's port (all addresses, SO_REUSEADDR),
 * connects to every lower rank in order -- retrying every 100 ms while the
 * peer is not up yet (refused, unreachable, timed out) -- and then accepts
 * one connection from every higher rank. Each connection starts with a
 * hello both ways (magic, version, rank, world size): the connecting rank
 * says who it is, the accepting one answers, and each checks the other's
 * rank and that both have the same world size. Every socket has
 * TCP_NODELAY. Rank 0 answers at once, and a rank answers once it has
 * connected to the ranks below it, so the setup cannot deadlock; it ends
 * with an error after UKL_MPI_TIMEOUT seconds.
 *
 * Messages: a 16-byte header (magic, tag, byte length, in host byte order:
 * all ranks run on the same architecture) and the bytes. A receive
 * matches by (source, tag), and between two ranks messages with the same
 * tag match in the order they were sent (MPI's non-overtaking rule). A
 * message whose receive is already posted goes straight to its buffer
 * (through a 64 KiB staging buffer per connection; bodies of 32 KiB and
 * more are read into place); one that arrives first is kept (malloc) on
 * its source's queue of unexpected messages until a receive matches it.
 * A send to the rank itself is copied through that queue.
 *
 * Progress: every call that waits (MPI_Send until its bytes are written,
 * MPI_Recv, MPI_Wait, MPI_Waitall, MPI_Finalize) drives all connections
 * through poll(): it writes the queued sends (non-blocking sockets,
 * partial writes kept) and reads and parses whatever arrives, whoever it
 * is for. MPI_Isend writes what the socket takes at once and queues the
 * rest. So sends never wait for a receive to be posted, and ranks that
 * all send large messages to each other at once cannot deadlock. MPI_Send
 * returns once its data is in the socket (a valid standard-mode send).
 *
 * MPI_Finalize writes the queued sends and a goodbye (a header with tag
 * BYE_TAG and no bytes) to every peer, shuts each connection down for
 * writing and reads until each peer's end of file, so that no rank's last
 * message is lost to a reset; then it frees everything. Like MPICH's, it
 * waits as long as its peers take: a rank may finish long before another,
 * or a peer may be slow to read what is queued for it. It fails only on
 * evidence that a peer is gone, at once: a connection that closed (or
 * was reset) without the peer's goodbye, which it sends only from its
 * MPI_Finalize (it ended without MPI_Finalize, or was killed), or that
 * was reset while this rank's last messages were still being written to
 * it. Without a launcher to stop the job, that is how the other ranks end
 * with a failure, as under mpiexec, instead of reporting success. A peer
 * that is stopped, hung, or whose machine is gone without a word (no end
 * of file, no reset) is waited for, unless UKL_MPI_FINALIZE_TIMEOUT sets a
 * limit: then a peer that has not taken this rank's last messages, or not
 * finalized, by then is an error naming it. (`ukl cluster` stops the
 * other nodes when one fails, and its --timeout applies to each.)
 *
 * Errors (bad values, setup failures, a peer closing its connection while
 * a receive waits for it or in the middle of a message, a message longer
 * than its receive buffer, misuse of a call): one line on stderr,
 *   ukl-mpi: rank R: WHAT (VARIABLE, PEER OR CALL)
 * (R is "?" before the rank is known), and exit status 1. MPI_Abort(comm,
 * code) prints "ukl-mpi: rank R: MPI_Abort(code)" and ends the process at
 * once with status code (_exit; its low 8 bits, or 1 where those are 0). There is no launcher to kill the other
 * ranks: they see the connection close, and end with an error when they
 * wait for a message from the aborted rank, or from a rank that ended so.
 *
 * Statistics: with UKL_MPI_STATS=1, MPI_Finalize prints first, on stderr,
 *   ukl-mpi: rank R stats send N TOTAL_NS SUMSQ recv N TOTAL_NS SUMSQ polls P sleeps S vcsw V ivcsw I
 * "send" covers the calls MPI_Send and MPI_Isend, "recv" the calls that
 * wait for completion, MPI_Recv, MPI_Wait and MPI_Waitall: N calls, the
 * time spent inside them in ns (CLOCK_MONOTONIC) and the sum of the
 * squares of each call's ns (exact, in decimal; mean = TOTAL/N, variance
 * = SUMSQ/N - mean^2). P: poll() calls of the progress engine until then;
 * S: those of them with a nonzero timeout, which may sleep (UKL_MPI_WAIT=
 * spin never does). V and I: the process's voluntary and involuntary
 * context switches since MPI_Init returned (getrusage): V counts the
 * times it went to sleep, waiting. The times are only taken when UKL_MPI_STATS=1.
 *
 * Measured region: MPI_Init's return and MPI_Finalize's call mark the
 * begin and end of region UKL_MPI_REGION for ukl's QEMU plugin (`ukl run
 * --count-insns`, tools/qemu-plugin/insnclass.c): the program's work and
 * communication, without the connection setup and teardown. A marker is a
 * multi-byte NOP, so it costs nothing without the plugin.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/*
 * The markers of guest/bench/region.h (REGION_BEGIN, REGION_END), whose
 * encoding tools/qemu-plugin/insnclass.h defines; written out here since
 * the recipe builds this directory alone.
 */
#define UKL_MPI_REGION 1
#define UKL_MPI_MARK_(low) \
	__asm__ volatile(".byte 0x0f, 0x1f, 0x80\n\t.long 0x554B0000 + (" #low ")" ::: "memory")
#define UKL_MPI_MARK(low) UKL_MPI_MARK_(low)	/* LOW expanded first */

#include "mpi.h"

#define DEFAULT_PORT		7350
#define DEFAULT_TIMEOUT		60
#define MAX_RANKS		4096
#define HELLO_MAGIC		0x554b4d48u	/* "UKMH" */
#define HELLO_VERSION		2u	/* 2: MPI_Finalize's goodbye */
#define MSG_MAGIC		0x554b4d4du	/* "UKMM" */
#define BYE_TAG			(-1)		/* MPI_Finalize's goodbye; user tags are >= 0 */
#define RBUF_SIZE		65536
#define DIRECT_MIN		(RBUF_SIZE / 2)
#define RETRY_MS		100
#define ATTEMPT_MS		1000

struct hello {
	uint32_t magic;
	uint32_t version;
	int32_t rank;
	int32_t size;
};

struct wire_hdr {
	uint32_t magic;
	int32_t tag;
	uint64_t len;
};

enum { REQ_SEND = 1, REQ_RECV };

struct umsg;

struct ukl_mpi_request {
	struct ukl_mpi_request *next;	/* send queue, posted list, free list */
	int kind;
	bool done;
	bool internal;		/* the library's own (the goodbye): freed once written */
	int peer;
	int tag;
	char *buf;
	size_t len;		/* send: bytes; receive: capacity */
	size_t got;		/* receive: bytes received */
	struct umsg *msg;	/* receive: the unexpected message it takes */
	struct wire_hdr hdr;	/* send */
	size_t off;		/* send: bytes of hdr and data written */
};

/* A message that arrived before a receive matched it. */
struct umsg {
	struct umsg *next;
	int tag;
	bool complete;
	size_t len;
	char *data;
	struct ukl_mpi_request *req;	/* matched while it still arrives */
};

struct peer {
	int fd;
	bool eof;			/* no more input */
	bool bye;			/* its MPI_Finalize's goodbye arrived */
	bool shut;			/* MPI_Finalize: shut down for writing */
	struct sockaddr_in addr;
	struct ukl_mpi_request *sendq, *sendq_tail;
	struct ukl_mpi_request *posted, *posted_tail;
	struct umsg *unexp, *unexp_tail;
	/* input: the staging buffer and the message being read */
	char *rbuf;
	size_t rpos, rend;
	bool in_body;
	char *dest;
	size_t need, have;
	struct ukl_mpi_request *cur_req;
	struct umsg *cur_msg;
};

struct bucket {
	uint64_t n;
	uint64_t ns;
	unsigned __int128 sq;
};

static struct {
	int state;		/* 0: before MPI_Init, 1: initialized, 2: finalized */
	int rank;		/* -1 until known */
	int size;
	int port;
	int timeout;
	int finalize_timeout;	/* 0: none */
	bool finalizing;
	const char *hosts_var, *rank_var;	/* where the world came from */
	bool spin;
	bool stats;
	struct peer *peers;
	struct pollfd *pfd;
	int *pfd_peer;
	struct ukl_mpi_request *free_reqs;
	struct bucket send, recv;
	uint64_t polls, sleeps;
	struct rusage start;	/* at the end of MPI_Init */
} w = { .rank = -1 };

static void vsay(const char *fmt, va_list ap)
{
	if (w.rank >= 0)
		fprintf(stderr, "ukl-mpi: rank %d: ", w.rank);
	else
		fprintf(stderr, "ukl-mpi: rank ?: ");
	vfprintf(stderr, fmt, ap);
}

/* "ukl-mpi: rank R: WHAT (WHERE)" and exit status 1 */
static void __attribute__((noreturn, format(printf, 2, 3)))
die(const char *where, const char *fmt, ...)
{
	va_list ap;

	fflush(stdout);
	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fprintf(stderr, " (%s)\n", where);
	exit(1);
}

static void __attribute__((format(printf, 2, 3)))
warn(const char *where, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsay(fmt, ap);
	va_end(ap);
	fprintf(stderr, " (%s)\n", where);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Milliseconds left until DEADLINE (ns), for poll(); 0 when past it. */
static int ms_left(uint64_t deadline)
{
	uint64_t now = now_ns();

	if (now >= deadline)
		return 0;
	return (int)((deadline - now + 999999) / 1000000);
}

static void account(struct bucket *b, uint64_t t0)
{
	uint64_t d = now_ns() - t0;

	b->n++;
	b->ns += d;
	b->sq += (unsigned __int128)d * d;
}

static const char *u128_str(unsigned __int128 v, char *buf, size_t size)
{
	char *p = buf + size - 1;

	*p = '\0';
	do {
		*--p = (char)('0' + (int)(v % 10));
		v /= 10;
	} while (v);
	return p;
}

static const char *peer_name(int r, char *buf, size_t size)
{
	char a[INET_ADDRSTRLEN];

	inet_ntop(AF_INET, &w.peers[r].addr.sin_addr, a, sizeof(a));
	snprintf(buf, size, "rank %d at %s:%d", r, a, ntohs(w.peers[r].addr.sin_port));
	return buf;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		die("malloc", "out of memory for %zu bytes", n);
	return p;
}

/* ---- the environment ---- */

/* VALUE as an integer in [MIN, MAX], else an error naming VAR. */
static long env_int(const char *var, const char *value, long min, long max)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(value, &end, 10);
	if (!*value || *end || errno || v < min || v > max)
		die(var, "invalid value '%s': expected an integer from %ld to %ld", value, min, max);
	return v;
}

/* HOSTS, the value of VAR: the peers' addresses and the world size. */
static void parse_hosts(const char *var, const char *hosts)
{
	const char *s = hosts;
	int n = 1, i;

	for (const char *c = hosts; *c; c++)
		n += *c == ',';
	if (n > MAX_RANKS)
		die(var, "%d entries: at most %d ranks", n, MAX_RANKS);
	w.size = n;
	w.peers = calloc((size_t)n, sizeof(*w.peers));
	if (!w.peers)
		die("malloc", "out of memory");
	for (i = 0; i < n; i++) {
		const char *end = strchr(s, ',');
		size_t len = end ? (size_t)(end - s) : strlen(s);
		char entry[64], *colon;
		struct sockaddr_in *a = &w.peers[i].addr;
		long port = w.port;

		if (len == 0 || len >= sizeof(entry))
			die(var, "entry %d of '%s' is %s: expected ADDR or ADDR:PORT", i, hosts,
			    len ? "too long" : "empty");
		memcpy(entry, s, len);
		entry[len] = '\0';
		colon = strchr(entry, ':');
		if (colon) {
			char *pend;

			*colon = '\0';
			errno = 0;
			port = strtol(colon + 1, &pend, 10);
			if (!colon[1] || *pend || errno || port < 1 || port > 65535)
				die(var, "entry %d: '%s' is not a port from 1 to 65535", i, colon + 1);
		}
		a->sin_family = AF_INET;
		a->sin_port = htons((uint16_t)port);
		if (inet_pton(AF_INET, entry, &a->sin_addr) != 1)
			die(var, "entry %d: '%s' is not an IPv4 address", i, entry);
		w.peers[i].fd = -1;
		s = end ? end + 1 : s + len;
	}
}

static void read_env(void)
{
	const char *hosts_var = "UKL_MPI_HOSTS", *rank_var = "UKL_MPI_RANK";
	const char *hosts = getenv(hosts_var), *rank, *v;

	w.port = DEFAULT_PORT;
	w.timeout = DEFAULT_TIMEOUT;
	if ((v = getenv("UKL_MPI_PORT")))
		w.port = (int)env_int("UKL_MPI_PORT", v, 1, 65535);
	if ((v = getenv("UKL_MPI_TIMEOUT")))
		w.timeout = (int)env_int("UKL_MPI_TIMEOUT", v, 1, 86400);
	if ((v = getenv("UKL_MPI_FINALIZE_TIMEOUT")) && *v)
		w.finalize_timeout = (int)env_int("UKL_MPI_FINALIZE_TIMEOUT", v, 0, 86400);
	if ((v = getenv("UKL_MPI_WAIT"))) {
		if (!strcmp(v, "spin"))
			w.spin = true;
		else if (strcmp(v, "block"))
			die("UKL_MPI_WAIT", "invalid value '%s': expected block or spin", v);
	}
	if ((v = getenv("UKL_MPI_STATS"))) {
		if (!strcmp(v, "1"))
			w.stats = true;
		else if (strcmp(v, "0") && *v)
			die("UKL_MPI_STATS", "invalid value '%s': expected 0 or 1", v);
	}
	if (!hosts && getenv("UKL_HOSTS")) {	/* `ukl cluster` */
		hosts_var = "UKL_HOSTS";
		rank_var = "UKL_RANK";
		hosts = getenv(hosts_var);
	}
	rank = getenv(rank_var);
	if (!hosts) {
		if (rank && strcmp(rank, "0"))
			die("UKL_MPI_RANK", "UKL_MPI_RANK=%s without UKL_MPI_HOSTS (a world of one rank)", rank);
		w.size = 1;
		w.rank = 0;
		w.peers = calloc(1, sizeof(*w.peers));
		if (!w.peers)
			die("malloc", "out of memory");
		w.peers[0].fd = -1;
		return;
	}
	if (!*hosts)
		die(hosts_var, "%s is empty (unset it for a world of one rank)", hosts_var);
	w.hosts_var = hosts_var;
	w.rank_var = rank_var;
	parse_hosts(hosts_var, hosts);
	if (!rank)
		die(rank_var, "%s is set but %s is not", hosts_var, rank_var);
	w.rank = (int)env_int(rank_var, rank, 0, w.size - 1);
}

/* ---- connection setup ---- */

static void tune(int fd)
{
	int one = 1;

	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)))
		die("TCP_NODELAY", "setsockopt: %s", strerror(errno));
}

/* Move LEN bytes through FD before DEADLINE: 1, or 0 on end of file or
 * a timeout (errno ETIMEDOUT), or -1 (errno). */
static int xfer_all(int fd, void *buf, size_t len, bool out, uint64_t deadline)
{
	char *p = buf;

	while (len) {
		struct pollfd pf = { .fd = fd, .events = out ? POLLOUT : POLLIN };
		ssize_t n;
		int r = poll(&pf, 1, ms_left(deadline));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = ETIMEDOUT;
			return 0;
		}
		n = out ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
		if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (n < 0)
			return -1;
		if (n == 0) {
			errno = 0;
			return 0;
		}
		p += n;
		len -= (size_t)n;
	}
	return 1;
}

static bool retryable(int err)
{
	return err == ECONNREFUSED || err == ETIMEDOUT || err == EHOSTUNREACH ||
	       err == ENETUNREACH || err == ECONNRESET || err == ECONNABORTED;
}

static void connect_to(int r, uint64_t deadline)
{
	struct peer *p = &w.peers[r];
	struct hello h = { HELLO_MAGIC, HELLO_VERSION, w.rank, w.size };
	char name[64];
	int fd, err, res;

	peer_name(r, name, sizeof(name));
	for (;;) {
		socklen_t elen = sizeof(err);

		fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (fd < 0)
			die("socket", "cannot make a socket: %s", strerror(errno));
		err = 0;
		if (connect(fd, (struct sockaddr *)&p->addr, sizeof(p->addr))) {
			err = errno;
			if (err == EINPROGRESS) {
				struct pollfd pf = { .fd = fd, .events = POLLOUT };
				int left = ms_left(deadline);

				do
					res = poll(&pf, 1, left < ATTEMPT_MS ? left : ATTEMPT_MS);
				while (res < 0 && errno == EINTR);
				if (res < 0)
					die("poll", "connecting to %s: %s", name, strerror(errno));
				if (res == 0)
					err = ETIMEDOUT;
				else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen))
					err = errno;
			}
		}
		if (!err)
			break;
		close(fd);
		if (!retryable(err))
			die(name, "cannot connect: %s", strerror(err));
		if (ms_left(deadline) == 0)
			die("UKL_MPI_TIMEOUT", "no connection to %s within %d s: %s", name, w.timeout,
			    strerror(err));
		if (err != ETIMEDOUT) {
			int left = ms_left(deadline);

			poll(NULL, 0, left < RETRY_MS ? left : RETRY_MS);
		}
	}
	tune(fd);
	res = xfer_all(fd, &h, sizeof(h), true, deadline);
	if (res > 0)
		res = xfer_all(fd, &h, sizeof(h), false, deadline);
	if (res < 0)
		die(name, "setup: %s", strerror(errno));
	if (res == 0 && errno == ETIMEDOUT)
		die("UKL_MPI_TIMEOUT", "no hello from %s within %d s", name, w.timeout);
	if (res == 0)
		die(name, "the connection closed during the setup");
	if (h.magic != HELLO_MAGIC || h.version != HELLO_VERSION)
		die(name, "it is not a ukl-mpi rank of this version (its hello: %08x version %u)",
		    h.magic, h.version);
	if (h.rank != r)
		die(w.hosts_var, "%s answered as rank %d", name, h.rank);
	if (h.size != w.size)
		die(w.hosts_var, "%s has a world of %d ranks, this rank %d", name, h.size, w.size);
	p->fd = fd;
}

static void accept_higher(int lfd, uint64_t deadline)
{
	int missing = w.size - 1 - w.rank;

	while (missing) {
		struct pollfd pf = { .fd = lfd, .events = POLLIN };
		struct sockaddr_in from;
		socklen_t flen = sizeof(from);
		struct hello h;
		char a[INET_ADDRSTRLEN], name[64];
		int fd, r, res = poll(&pf, 1, ms_left(deadline));

		if (res < 0 && errno == EINTR)
			continue;
		if (res < 0)
			die("poll", "waiting for connections: %s", strerror(errno));
		if (res == 0) {
			char list[256];
			size_t len = 0;

			list[0] = '\0';
			for (r = w.rank + 1; r < w.size && len < sizeof(list) - 16; r++)
				if (w.peers[r].fd < 0)
					len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%d",
								len ? ", " : "", r);
			die("UKL_MPI_TIMEOUT", "rank%s %s did not connect within %d s", missing > 1 ? "s" : "",
			    list, w.timeout);
		}
		fd = accept4(lfd, (struct sockaddr *)&from, &flen, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EINTR || errno == EAGAIN || errno == ECONNABORTED)
				continue;
			die("accept", "%s", strerror(errno));
		}
		inet_ntop(AF_INET, &from.sin_addr, a, sizeof(a));
		snprintf(name, sizeof(name), "a connection from %s:%d", a, ntohs(from.sin_port));
		tune(fd);
		res = xfer_all(fd, &h, sizeof(h), false, deadline);
		if (res <= 0 || h.magic != HELLO_MAGIC || h.version != HELLO_VERSION) {
			warn(name, "ignored: no ukl-mpi hello");
			close(fd);
			continue;
		}
		if (h.size != w.size)
			die(w.hosts_var, "rank %d (%s) has a world of %d ranks, this rank %d", h.rank, a,
			    h.size, w.size);
		if (h.rank <= w.rank || h.rank >= w.size)
			die(w.rank_var, "%s says it is rank %d; expected a rank from %d to %d", name,
			    h.rank, w.rank + 1, w.size - 1);
		if (w.peers[h.rank].fd >= 0)
			die(w.rank_var, "rank %d connected twice (%s)", h.rank, a);
		r = h.rank;
		h.rank = w.rank;
		if (xfer_all(fd, &h, sizeof(h), true, deadline) <= 0)
			die(name, "cannot answer rank %d's hello: %s", r, strerror(errno));
		w.peers[r].fd = fd;
		missing--;
	}
}

static void setup(void)
{
	uint64_t deadline = now_ns() + (uint64_t)w.timeout * 1000000000u;
	int lfd = -1, one = 1;

	if (w.rank < w.size - 1) {
		struct sockaddr_in any = w.peers[w.rank].addr;

		any.sin_addr.s_addr = htonl(INADDR_ANY);
		lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
		if (lfd < 0)
			die("socket", "cannot make a socket: %s", strerror(errno));
		setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
		if (bind(lfd, (struct sockaddr *)&any, sizeof(any)) || listen(lfd, w.size + 16))
			die(w.hosts_var, "cannot listen on port %d: %s", ntohs(any.sin_port),
			    strerror(errno));
	}
	for (int r = 0; r < w.rank; r++)
		connect_to(r, deadline);
	if (lfd >= 0) {
		accept_higher(lfd, deadline);
		close(lfd);
	}
	for (int r = 0; r < w.size; r++)
		if (r != w.rank)
			w.peers[r].rbuf = xmalloc(RBUF_SIZE);
	w.pfd = xmalloc(sizeof(*w.pfd) * (size_t)w.size);
	w.pfd_peer = xmalloc(sizeof(*w.pfd_peer) * (size_t)w.size);
}

/* ---- requests and queues ---- */

static struct ukl_mpi_request *new_req(int kind, int peer, int tag, void *buf, size_t len)
{
	struct ukl_mpi_request *r = w.free_reqs;

	if (r)
		w.free_reqs = r->next;
	else
		r = xmalloc(sizeof(*r));
	memset(r, 0, sizeof(*r));
	r->kind = kind;
	r->peer = peer;
	r->tag = tag;
	r->buf = buf;
	r->len = len;
	return r;
}

static void free_req(struct ukl_mpi_request *r)
{
	r->next = w.free_reqs;
	w.free_reqs = r;
}

static void truncated(int src, int tag, size_t len, size_t cap)
{
	die("MPI_ERR_TRUNCATE", "a message from rank %d with tag %d has %zu bytes, its receive buffer %zu",
	    src, tag, len, cap);
}

/* The unexpected message M now has all its bytes, or matched receive R. */
static void deliver(struct umsg *m, struct ukl_mpi_request *r)
{
	if (m->len)
		memcpy(r->buf, m->data, m->len);
	r->got = m->len;
	r->done = true;
	free(m->data);
	free(m);
}

/* Take the first message from P with TAG off P's unexpected queue. */
static struct umsg *take_unexpected(struct peer *p, int tag)
{
	struct umsg *m, *prev = NULL;

	for (m = p->unexp; m; prev = m, m = m->next)
		if (m->tag == tag)
			break;
	if (!m)
		return NULL;
	if (prev)
		prev->next = m->next;
	else
		p->unexp = m->next;
	if (p->unexp_tail == m)
		p->unexp_tail = prev;
	m->next = NULL;
	return m;
}

static void add_unexpected(struct peer *p, struct umsg *m)
{
	m->next = NULL;
	if (p->unexp_tail)
		p->unexp_tail->next = m;
	else
		p->unexp = m;
	p->unexp_tail = m;
}

static struct ukl_mpi_request *take_posted(struct peer *p, int tag)
{
	struct ukl_mpi_request *r, *prev = NULL;

	for (r = p->posted; r; prev = r, r = r->next)
		if (r->tag == tag)
			break;
	if (!r)
		return NULL;
	if (prev)
		prev->next = r->next;
	else
		p->posted = r->next;
	if (p->posted_tail == r)
		p->posted_tail = prev;
	r->next = NULL;
	return r;
}

static void post(struct peer *p, struct ukl_mpi_request *r)
{
	r->next = NULL;
	if (p->posted_tail)
		p->posted_tail->next = r;
	else
		p->posted = r;
	p->posted_tail = r;
}

/* ---- output ---- */

/*
 * Write what the socket takes of R; whether R is all written. Only send()
 * is used, one call per message where it fits SMALL_MSG (header and body
 * copied together), so that a message is one TCP segment under
 * TCP_NODELAY, as with a vector write, and the TCP shortcut (--opts
 * shortcut: read, write, recv and send) applies to every call.
 */
#define SMALL_MSG 4096

/* Bytes of P's queued sends not written yet. */
static size_t unsent(const struct peer *p)
{
	size_t n = 0;

	for (const struct ukl_mpi_request *r = p->sendq; r; r = r->next)
		n += sizeof(r->hdr) + r->len - r->off;
	return n;
}

static bool write_some(struct peer *p, struct ukl_mpi_request *r)
{
	size_t total = sizeof(r->hdr) + r->len;

	while (r->off < total) {
		char small[SMALL_MSG];
		const char *from;
		size_t want;
		int more = 0;
		ssize_t n;

		if (r->off < sizeof(r->hdr) && total <= sizeof(small)) {
			memcpy(small, &r->hdr, sizeof(r->hdr));
			if (r->len)
				memcpy(small + sizeof(r->hdr), r->buf, r->len);
			from = small + r->off;
			want = total - r->off;
		} else if (r->off < sizeof(r->hdr)) {
			from = (const char *)&r->hdr + r->off;
			want = sizeof(r->hdr) - r->off;
			more = MSG_MORE;	/* the body follows at once */
		} else {
			from = (const char *)r->buf + (r->off - sizeof(r->hdr));
			want = total - r->off;
		}
		n = send(p->fd, from, want, MSG_NOSIGNAL | MSG_DONTWAIT | more);
		if (n < 0) {
			char name[64];

			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return false;
			/* a goodbye to a peer that is gone: its end of file says so (drain_all) */
			if (r->internal && (errno == EPIPE || errno == ECONNRESET))
				return true;
			if (w.finalizing && (errno == EPIPE || errno == ECONNRESET))
				die(peer_name(r->peer, name, sizeof(name)), "MPI_Finalize: the connection was "
				    "reset before the peer took this rank's last messages (%zu bytes unsent): it "
				    "ended, or was killed", unsent(p));
			die(peer_name(r->peer, name, sizeof(name)), "sending a message with tag %d: %s",
			    r->tag, strerror(errno));
		}
		r->off += (size_t)n;
		if ((size_t)n < want)
			return false;	/* the socket is full for now */
	}
	return true;
}

static void flush(struct peer *p)
{
	while (p->sendq && write_some(p, p->sendq)) {
		struct ukl_mpi_request *r = p->sendq;

		r->done = true;
		p->sendq = r->next;
		if (!p->sendq)
			p->sendq_tail = NULL;
		r->next = NULL;
		if (r->internal)
			free_req(r);
	}
}

/* ---- input ---- */

static void body_done(struct peer *p)
{
	p->in_body = false;
	if (p->cur_req) {
		p->cur_req->done = true;
		p->cur_req = NULL;
	} else {
		struct umsg *m = p->cur_msg;

		p->cur_msg = NULL;
		m->complete = true;
		if (m->req)
			deliver(m, m->req);
	}
}

static void begin_message(struct peer *p, int src, const struct wire_hdr *h)
{
	struct ukl_mpi_request *r;
	char name[64];

	if (h->magic == MSG_MAGIC && h->tag == BYE_TAG && h->len == 0) {
		p->bye = true;
		return;
	}
	/* no valid message is longer than INT_MAX elements of 8 bytes */
	if (h->magic != MSG_MAGIC || h->tag < 0 || h->len > (uint64_t)INT_MAX * 8)
		die(peer_name(src, name, sizeof(name)), "garbled message header (magic %08x, tag %d, length %llu)",
		    h->magic, h->tag, (unsigned long long)h->len);
	r = take_posted(p, h->tag);
	if (r) {
		if (h->len > r->len)
			truncated(src, h->tag, h->len, r->len);
		r->got = h->len;
		p->cur_req = r;
		p->dest = r->buf;
	} else {
		struct umsg *m = xmalloc(sizeof(*m));

		memset(m, 0, sizeof(*m));
		m->tag = h->tag;
		m->len = h->len;
		m->data = xmalloc(h->len);
		add_unexpected(p, m);
		p->cur_msg = m;
		p->dest = m->data;
	}
	p->need = h->len;
	p->have = 0;
	if (h->len)
		p->in_body = true;
	else
		body_done(p);
}

static void parse(struct peer *p, int src)
{
	while (p->rpos < p->rend) {
		size_t avail = p->rend - p->rpos;

		if (!p->in_body) {
			struct wire_hdr h;

			if (avail < sizeof(h))
				break;
			memcpy(&h, p->rbuf + p->rpos, sizeof(h));
			p->rpos += sizeof(h);
			begin_message(p, src, &h);
		} else {
			size_t n = p->need - p->have;

			if (n > avail)
				n = avail;
			memcpy(p->dest + p->have, p->rbuf + p->rpos, n);
			p->have += n;
			p->rpos += n;
			if (p->have == p->need)
				body_done(p);
		}
	}
	/* What is left is part of a header: move it to the front. */
	if (p->rpos == p->rend) {
		p->rpos = p->rend = 0;
	} else if (p->rpos) {
		memmove(p->rbuf, p->rbuf + p->rpos, p->rend - p->rpos);
		p->rend -= p->rpos;
		p->rpos = 0;
	}
}

static void closed(struct peer *p, int src, int err)
{
	char name[64];

	if (p->in_body || p->rend > p->rpos)
		die(peer_name(src, name, sizeof(name)), "the connection %s in the middle of a message",
		    err ? "was reset" : "closed");
	p->eof = true;
}

/* Read and parse what P's socket has now. */
static void input(struct peer *p, int src)
{
	for (;;) {
		size_t want;
		ssize_t n;
		char name[64];

		if (p->in_body && p->rpos == p->rend && p->need - p->have >= DIRECT_MIN) {
			want = p->need - p->have;
			n = recv(p->fd, p->dest + p->have, want, MSG_DONTWAIT);
			if (n > 0) {
				p->have += (size_t)n;
				if (p->have == p->need)
					body_done(p);
			}
		} else {
			want = RBUF_SIZE - p->rend;
			n = recv(p->fd, p->rbuf + p->rend, want, MSG_DONTWAIT);
			if (n > 0) {
				p->rend += (size_t)n;
				parse(p, src);
			}
		}
		if (n > 0) {
			if ((size_t)n < want)
				return;	/* drained for now */
			continue;
		}
		if (n == 0) {
			closed(p, src, 0);
			return;
		}
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return;
		if (errno == ECONNRESET) {
			closed(p, src, errno);
			return;
		}
		die(peer_name(src, name, sizeof(name)), "receiving: %s", strerror(errno));
	}
}

/* ---- progress ---- */

/* One poll() over every connection with something to do, and its work.
 * TIMEOUT in ms (-1: none). False when no connection has anything to do. */
static bool progress(int timeout)
{
	int n = 0, res;

	for (int r = 0; r < w.size; r++) {
		struct peer *p = &w.peers[r];
		short ev = 0;

		if (p->fd < 0)
			continue;
		if (!p->eof)
			ev |= POLLIN;
		if (p->sendq)
			ev |= POLLOUT;
		if (!ev)
			continue;
		w.pfd[n].fd = p->fd;
		w.pfd[n].events = ev;
		w.pfd[n].revents = 0;
		w.pfd_peer[n++] = r;
	}
	if (!n)
		return false;
	w.polls++;
	if (timeout)
		w.sleeps++;
	res = poll(w.pfd, (nfds_t)n, timeout);
	if (res < 0) {
		if (errno == EINTR)
			return true;
		die("poll", "%s", strerror(errno));
	}
	for (int i = 0; i < n && res; i++) {
		struct peer *p = &w.peers[w.pfd_peer[i]];
		short re = w.pfd[i].revents;

		if (!re)
			continue;
		res--;
		if (re & POLLNVAL)
			die("poll", "the connection's descriptor %d is not open", w.pfd[i].fd);
		if ((re & (POLLIN | POLLHUP | POLLERR)) && !p->eof)
			input(p, w.pfd_peer[i]);
		if ((re & (POLLOUT | POLLHUP | POLLERR)) && p->sendq)
			flush(p);
	}
	return true;
}

/* Whether R can still complete while this rank waits; an error if not. */
static void check_waitable(const struct ukl_mpi_request *r)
{
	char name[64];

	if (r->done || r->kind != REQ_RECV || r->msg)
		return;
	if (r->peer == w.rank)
		die("MPI_Recv", "waiting for a message from itself with tag %d that was never sent: deadlock",
		    r->tag);
	if (w.peers[r->peer].eof)
		die(peer_name(r->peer, name, sizeof(name)),
		    "the connection closed while waiting for a message with tag %d", r->tag);
}

/* Drive progress until the N requests in REQS (NULL entries: none) are done. */
static void wait_for(MPI_Request *reqs, int n)
{
	for (;;) {
		bool all = true;

		for (int i = 0; i < n; i++) {
			if (reqs[i] && !reqs[i]->done) {
				check_waitable(reqs[i]);
				all = false;
			}
		}
		if (all)
			return;
		if (!progress(w.spin ? 0 : -1))
			die("MPI_Wait", "nothing left that could complete the request: deadlock");
	}
}

static void fill_status(MPI_Status *st, const struct ukl_mpi_request *r)
{
	if (!st)
		return;
	st->MPI_ERROR = MPI_SUCCESS;
	if (!r) {
		st->MPI_SOURCE = -1;
		st->MPI_TAG = -1;
		st->ukl_bytes = 0;
	} else if (r->kind == REQ_RECV) {
		st->MPI_SOURCE = r->peer;
		st->MPI_TAG = r->tag;
		st->ukl_bytes = (long long)r->got;
	} else {
		st->MPI_SOURCE = w.rank;
		st->MPI_TAG = r->tag;
		st->ukl_bytes = 0;
	}
}

/* ---- argument checks ---- */

static void check_world(const char *call, MPI_Comm comm)
{
	if (w.state != 1)
		die(call, "called %s", w.state ? "after MPI_Finalize" : "before MPI_Init");
	if (comm != MPI_COMM_WORLD)
		die(call, "the communicator is not MPI_COMM_WORLD (the only one ukl-mpi has)");
}

static size_t type_size(const char *call, MPI_Datatype t)
{
	switch (t) {
	case MPI_CHAR:
		return sizeof(char);
	case MPI_C_BOOL:
		return sizeof(_Bool);
	case MPI_INT:
		return sizeof(int);
	case MPI_UNSIGNED:
		return sizeof(unsigned int);
	case MPI_LONG:
		return sizeof(long);
	case MPI_UNSIGNED_LONG:
		return sizeof(unsigned long);
	case MPI_LONG_LONG:
		return sizeof(long long);
	case MPI_UNSIGNED_LONG_LONG:
		return sizeof(unsigned long long);
	case MPI_BYTE:
		return 1;
	case MPI_DOUBLE:
		return sizeof(double);
	}
	die(call, "unknown datatype %d", t);
}

/* Bytes of COUNT items of DATATYPE to or from rank PEER with TAG. */
static size_t check_p2p(const char *call, int count, MPI_Datatype datatype, int peer, int tag,
			MPI_Comm comm)
{
	check_world(call, comm);
	if (count < 0)
		die(call, "count %d is negative", count);
	if (peer < 0 || peer >= w.size)
		die(call, "rank %d is not in 0..%d", peer, w.size - 1);
	if (tag < 0)
		die(call, "tag %d is negative", tag);
	return (size_t)count * type_size(call, datatype);
}

/* ---- the calls ---- */

static struct ukl_mpi_request *isend(const void *buf, size_t len, int dest, int tag)
{
	struct ukl_mpi_request *r = new_req(REQ_SEND, dest, tag, (void *)buf, len);
	struct peer *p = &w.peers[dest];

	if (dest == w.rank) {
		struct ukl_mpi_request *rr = take_posted(p, tag);

		if (rr) {
			if (len > rr->len)
				truncated(dest, tag, len, rr->len);
			if (len)
				memcpy(rr->buf, buf, len);
			rr->got = len;
			rr->done = true;
		} else {
			struct umsg *m = xmalloc(sizeof(*m));

			memset(m, 0, sizeof(*m));
			m->tag = tag;
			m->len = len;
			m->data = xmalloc(len);
			if (len)
				memcpy(m->data, buf, len);
			m->complete = true;
			add_unexpected(p, m);
		}
		r->done = true;
		return r;
	}
	r->hdr.magic = MSG_MAGIC;
	r->hdr.tag = tag;
	r->hdr.len = len;
	if (!p->sendq && write_some(p, r)) {
		r->done = true;
		return r;
	}
	if (p->sendq_tail)
		p->sendq_tail->next = r;
	else
		p->sendq = r;
	p->sendq_tail = r;
	return r;
}

static struct ukl_mpi_request *irecv(void *buf, size_t cap, int src, int tag)
{
	struct ukl_mpi_request *r = new_req(REQ_RECV, src, tag, buf, cap);
	struct peer *p = &w.peers[src];
	struct umsg *m = take_unexpected(p, tag);

	if (!m) {
		post(p, r);
		return r;
	}
	if (m->len > cap)
		truncated(src, tag, m->len, cap);
	if (m->complete) {
		deliver(m, r);
	} else {
		m->req = r;
		r->msg = m;
	}
	return r;
}

int MPI_Init(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (w.state)
		die("MPI_Init", "called twice");
	read_env();
	if (w.size > 1)
		setup();
	getrusage(RUSAGE_SELF, &w.start);
	w.state = 1;
	UKL_MPI_MARK(0x0000 + UKL_MPI_REGION);	/* begin */
	return MPI_SUCCESS;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
	check_world("MPI_Comm_rank", comm);
	*rank = w.rank;
	return MPI_SUCCESS;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
	check_world("MPI_Comm_size", comm);
	*size = w.size;
	return MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm,
	      MPI_Request *request)
{
	size_t len = check_p2p("MPI_Isend", count, datatype, dest, tag, comm);
	uint64_t t0 = w.stats ? now_ns() : 0;

	*request = isend(buf, len, dest, tag);
	if (w.stats)
		account(&w.send, t0);
	return MPI_SUCCESS;
}

int MPI_Send(const void *buf, int count, MPI_Datatype datatype, int dest, int tag, MPI_Comm comm)
{
	size_t len = check_p2p("MPI_Send", count, datatype, dest, tag, comm);
	uint64_t t0 = w.stats ? now_ns() : 0;
	MPI_Request r = isend(buf, len, dest, tag);

	wait_for(&r, 1);
	free_req(r);
	if (w.stats)
		account(&w.send, t0);
	return MPI_SUCCESS;
}

int MPI_Irecv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
	      MPI_Request *request)
{
	size_t cap = check_p2p("MPI_Irecv", count, datatype, source, tag, comm);

	*request = irecv(buf, cap, source, tag);
	return MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype datatype, int source, int tag, MPI_Comm comm,
	     MPI_Status *status)
{
	size_t cap = check_p2p("MPI_Recv", count, datatype, source, tag, comm);
	uint64_t t0 = w.stats ? now_ns() : 0;
	MPI_Request r = irecv(buf, cap, source, tag);

	wait_for(&r, 1);
	fill_status(status, r);
	free_req(r);
	if (w.stats)
		account(&w.recv, t0);
	return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *request, MPI_Status *status)
{
	uint64_t t0 = w.stats ? now_ns() : 0;

	check_world("MPI_Wait", MPI_COMM_WORLD);
	wait_for(request, 1);
	fill_status(status, *request);
	if (*request)
		free_req(*request);
	*request = NULL;
	if (w.stats)
		account(&w.recv, t0);
	return MPI_SUCCESS;
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[])
{
	uint64_t t0 = w.stats ? now_ns() : 0;

	check_world("MPI_Waitall", MPI_COMM_WORLD);
	if (count < 0)
		die("MPI_Waitall", "count %d is negative", count);
	wait_for(requests, count);
	for (int i = 0; i < count; i++) {
		fill_status(statuses ? &statuses[i] : NULL, requests[i]);
		if (requests[i])
			free_req(requests[i]);
		requests[i] = NULL;
	}
	if (w.stats)
		account(&w.recv, t0);
	return MPI_SUCCESS;
}

int MPI_Abort(MPI_Comm comm, int errorcode)
{
	(void)comm;
	fflush(stdout);
	if (w.rank >= 0)
		fprintf(stderr, "ukl-mpi: rank %d: MPI_Abort(%d)\n", w.rank, errorcode);
	else
		fprintf(stderr, "ukl-mpi: rank ?: MPI_Abort(%d)\n", errorcode);
	/* an exit status is 8 bits: a code that would read as success is 1 */
	_exit(errorcode & 0xff ? errorcode & 0xff : 1);
}

static void print_stats(void)
{
	char a[48], b[48];

	struct rusage now;

	getrusage(RUSAGE_SELF, &now);
	fprintf(stderr, "ukl-mpi: rank %d stats send %llu %llu %s recv %llu %llu %s polls %llu sleeps %llu "
		"vcsw %ld ivcsw %ld\n",
		w.rank, (unsigned long long)w.send.n, (unsigned long long)w.send.ns,
		u128_str(w.send.sq, a, sizeof(a)), (unsigned long long)w.recv.n,
		(unsigned long long)w.recv.ns, u128_str(w.recv.sq, b, sizeof(b)),
		(unsigned long long)w.polls, (unsigned long long)w.sleeps,
		now.ru_nvcsw - w.start.ru_nvcsw, now.ru_nivcsw - w.start.ru_nivcsw);
}

static bool has_unsent(int r)
{
	return w.peers[r].sendq != NULL;
}

static bool still_open(int r)
{
	return w.peers[r].fd >= 0 && !w.peers[r].eof;
}

/* "rank R at ADDR:PORT, ..." into LIST: the peers SELECTED picks, each
 * with its bytes not sent yet, if any (as many as fit). */
static void peer_list(bool (*selected)(int r), char *list, size_t size)
{
	size_t len = 0;

	list[0] = '\0';
	for (int r = 0; r < w.size; r++) {
		char name[64], entry[128];
		int n;

		if (r == w.rank || !selected(r))
			continue;
		peer_name(r, name, sizeof(name));
		if (has_unsent(r))
			n = snprintf(entry, sizeof(entry), "%s%s (%zu bytes unsent)", len ? ", " : "", name,
				     unsent(&w.peers[r]));
		else
			n = snprintf(entry, sizeof(entry), "%s%s", len ? ", " : "", name);
		if (n < 0 || (size_t)n >= sizeof(entry) || (size_t)n >= size - len)
			break;
		memcpy(list + len, entry, (size_t)n + 1);
		len += (size_t)n;
	}
}

/* Queue the goodbye to every peer, after what is queued for it. */
static void say_goodbye(void)
{
	for (int r = 0; r < w.size; r++) {
		struct peer *p = &w.peers[r];
		struct ukl_mpi_request *q;

		if (p->fd < 0)
			continue;
		q = new_req(REQ_SEND, r, BYE_TAG, NULL, 0);
		q->internal = true;
		q->hdr.magic = MSG_MAGIC;
		q->hdr.tag = BYE_TAG;
		q->hdr.len = 0;
		if (p->sendq_tail)
			p->sendq_tail->next = q;
		else
			p->sendq = q;
		p->sendq_tail = q;
	}
}

/* A peer whose connection closed without its goodbye is gone: it ended
 * without MPI_Finalize, or was killed. */
static void check_gone(void)
{
	char name[64];

	for (int r = 0; r < w.size; r++) {
		struct peer *p = &w.peers[r];

		if (p->fd >= 0 && p->eof && !p->bye)
			die(peer_name(r, name, sizeof(name)), "MPI_Finalize: the connection closed "
			    "without the peer's MPI_Finalize: it ended without it, or was killed");
	}
}

/* poll()'s timeout until DEADLINE (ns; 0: none) */
static int finalize_wait(uint64_t deadline)
{
	if (w.spin)
		return 0;
	return deadline ? ms_left(deadline) : -1;
}

static bool past(uint64_t deadline)
{
	return deadline && ms_left(deadline) == 0;
}

/* Write every queued send (MPI_Isends never waited for, the goodbyes),
 * before DEADLINE if there is one. Each connection is shut down for
 * writing once its last byte is out, so that a peer waits for no other. */
static void flush_all(uint64_t deadline)
{
	char list[512];

	for (;;) {
		bool queued = false;

		check_gone();
		for (int r = 0; r < w.size; r++) {
			struct peer *p = &w.peers[r];

			if (p->fd < 0 || p->shut)
				continue;
			if (p->sendq) {
				queued = true;
			} else {
				shutdown(p->fd, SHUT_WR);
				p->shut = true;
			}
		}
		if (!queued)
			return;
		if (past(deadline))
			break;
		if (!progress(finalize_wait(deadline)))
			return;
	}
	peer_list(has_unsent, list, sizeof(list));
	die("UKL_MPI_FINALIZE_TIMEOUT", "MPI_Finalize: %s did not take this rank's last messages within %d s",
	    list, w.finalize_timeout);
}

/* Read until every peer has closed, before DEADLINE if there is one; each
 * must have said goodbye first. */
static void drain_all(uint64_t deadline)
{
	char list[512];

	for (;;) {
		bool open = false;

		check_gone();
		for (int r = 0; r < w.size; r++)
			open |= still_open(r);
		if (!open)
			return;
		if (past(deadline))
			break;
		progress(finalize_wait(deadline));
	}
	peer_list(still_open, list, sizeof(list));
	die("UKL_MPI_FINALIZE_TIMEOUT", "MPI_Finalize: %s did not finalize within %d s", list,
	    w.finalize_timeout);
}

int MPI_Finalize(void)
{
	uint64_t deadline;

	check_world("MPI_Finalize", MPI_COMM_WORLD);
	UKL_MPI_MARK(0x4000 + UKL_MPI_REGION);	/* end */
	if (w.stats)
		print_stats();
	deadline = w.finalize_timeout ? now_ns() + (uint64_t)w.finalize_timeout * 1000000000u : 0;
	w.finalizing = true;
	say_goodbye();
	flush_all(deadline);
	drain_all(deadline);
	/* Free everything. */
	for (int r = 0; r < w.size; r++) {
		struct peer *p = &w.peers[r];

		if (p->fd >= 0)
			close(p->fd);
		while (p->unexp) {
			struct umsg *m = p->unexp;

			p->unexp = m->next;
			free(m->data);
			free(m);
		}
		while (p->posted) {
			struct ukl_mpi_request *q = p->posted;

			p->posted = q->next;
			free(q);
		}
		free(p->rbuf);
	}
	while (w.free_reqs) {
		struct ukl_mpi_request *q = w.free_reqs;

		w.free_reqs = q->next;
		free(q);
	}
	free(w.peers);
	free(w.pfd);
	free(w.pfd_peer);
	w.peers = NULL;
	w.pfd = NULL;
	w.pfd_peer = NULL;
	w.state = 2;
	return MPI_SUCCESS;
}
