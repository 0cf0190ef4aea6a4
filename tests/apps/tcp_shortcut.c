/*
 * The TCP shortcuts keep the system calls' semantics: every case runs
 * twice, through the C library's read/write/recv/send ("libc") and
 * through <ukl.h>'s ukl_tcp_* ("ukl"), and prints one line per case that
 * must be the same for both paths, in ring 3 (built for linux), in ring 0,
 * and with --opts shortcut (where "libc" takes the shortcut too).
 *
 *	tcp_shortcut cases    the semantics, "case PATH NAME: RESULT"
 *	tcp_shortcut cost N   TSC ticks of N 1-byte write+read pairs per path
 *	                      (under --icount: guest instructions)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>
#include <x86intrin.h>

#include "ukl.h"

struct path {
	const char *name;
	long opts;	/* the thread's options for this path (ukl_opts()) */
	long (*rd)(int, void *, unsigned long);
	long (*wr)(int, const void *, unsigned long);
	long (*rv)(int, void *, unsigned long, int);
	long (*sd)(int, const void *, unsigned long, int);
};

static long libc_read(int fd, void *b, unsigned long n) { return read(fd, b, n); }
static long libc_write(int fd, const void *b, unsigned long n) { return write(fd, b, n); }
static long libc_recv(int fd, void *b, unsigned long n, int f) { return recv(fd, b, n, f); }
static long libc_send(int fd, const void *b, unsigned long n, int f) { return send(fd, b, n, f); }

static const struct path *P;

/* Each path with the options it runs under (none in ring 3) */
static const struct path paths[] = {
	{ "libc", 0, libc_read, libc_write, libc_recv, libc_send },
	{ "ukl", 0, ukl_tcp_read, ukl_tcp_write, ukl_tcp_recv, ukl_tcp_send },
	{ "libc+shortcut", UKL_OPT_SHORTCUT, libc_read, libc_write, libc_recv, libc_send },
	{ "libc+shortcut+byp", UKL_OPT_SHORTCUT | UKL_OPT_BYP,
	  libc_read, libc_write, libc_recv, libc_send },
	{ "ukl+byp", UKL_OPT_BYP, ukl_tcp_read, ukl_tcp_write, ukl_tcp_recv, ukl_tcp_send },
};

/* Run under @p's options; false in an ordinary process (no options) */
static int use(const struct path *p)
{
	long old = ukl_opts(0, 0);

	P = p;
	if (old < 0)
		return !p->opts;
	return ukl_opts(p->opts, ~p->opts & (UKL_OPT_SHORTCUT | UKL_OPT_BYP)) >= 0;
}

static int listener;
static unsigned short port;
static volatile sig_atomic_t sigpipes, alarms;

static void die(const char *what)
{
	perror(what);
	exit(1);
}

/* A connected pair: *a is ours, *b the peer, over loopback */
static void tcp_pair(int *a, int *b)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = port,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };

	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&sin, sizeof(sin)))
		die("connect");
	*b = accept(listener, NULL, NULL);
	if (*b < 0)
		die("accept");
}

static void report(const char *name, long ret, const char *extra)
{
	if (ret < 0)
		printf("case %s %s: -1 %s%s\n", P->name, name, strerrorname_np(errno), extra);
	else
		printf("case %s %s: %ld%s\n", P->name, name, ret, extra);
	fflush(stdout);
}

static void on_sigpipe(int sig) { (void)sig; sigpipes++; }
static void on_alarm(int sig) { (void)sig; alarms++; }

static void set_alarm(int ms, int restart)
{
	struct sigaction sa = { .sa_handler = on_alarm, .sa_flags = restart ? SA_RESTART : 0 };
	struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = ms * 1000 } };

	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
}

struct later {
	int fd;
	int ms;
	const char *data;
	int close_fd;	/* close this one (if >= 0) before writing */
};

static void *write_later(void *arg)
{
	struct later *l = arg;

	usleep(l->ms * 1000);
	if (l->close_fd >= 0)
		close(l->close_fd);
	if (l->data && write(l->fd, l->data, strlen(l->data)) < 0)
		die("write_later");
	return NULL;
}

static void cases(void)
{
	char buf[256], extra[300];
	int a, b, fds[2], u1, u2;
	long r;

	/* A. round trips, lengths, errors of the arguments */
	tcp_pair(&a, &b);
	r = P->wr(a, "hello", 5);
	report("write", r, "");
	memset(buf, 0, sizeof(buf));
	r = P->rd(b, buf, sizeof(buf));
	snprintf(extra, sizeof(extra), " '%s'", buf);
	report("read", r, extra);
	report("read-zero", P->rd(b, buf, 0), "");
	report("write-zero", P->wr(a, buf, 0), "");
	report("send-zero", P->sd(a, buf, 0, 0), "");
	report("read-bad-fd", P->rd(999, buf, 1), "");
	report("recv-bad-fd", P->rv(999, buf, 1, 0), "");
	report("send-bad-fd", P->sd(999, "x", 1, 0), "");
	report("read-kernel-buf", P->rd(b, (void *)0xffff888000000000UL, 1), "");
	report("recv-kernel-buf-bad-fd", P->rv(999, (void *)0xffff888000000000UL, 1, 0), "");
	report("read-bad-fd-kernel-buf", P->rd(999, (void *)0xffff888000000000UL, 1), "");
	report("write-huge-count", P->wr(a, buf, ~0UL), "");
	P->wr(a, "abc", 3);
	usleep(10000);
	report("read-unmapped-buf", P->rd(b, (void *)4096, 3), "");
	r = P->rv(b, buf, sizeof(buf), 0);
	report("recv-after-fault", r, r == 3 && !memcmp(buf, "abc", 3) ? " same bytes" : " lost");

	/* B. flags and modes */
	report("recv-dontwait", P->rv(b, buf, sizeof(buf), MSG_DONTWAIT), "");
	fcntl(b, F_SETFL, O_NONBLOCK);
	report("read-nonblock", P->rd(b, buf, sizeof(buf)), "");
	report("recv-nonblock", P->rv(b, buf, sizeof(buf), 0), "");
	fcntl(b, F_SETFL, 0);
	P->sd(a, "peekme", 6, 0);
	usleep(10000);
	r = P->rv(b, buf, 4, MSG_PEEK);
	buf[r > 0 ? r : 0] = 0;
	snprintf(extra, sizeof(extra), " '%s'", buf);
	report("recv-peek", r, extra);
	r = P->rv(b, buf, sizeof(buf), 0);
	buf[r > 0 ? r : 0] = 0;
	snprintf(extra, sizeof(extra), " '%s'", buf);
	report("recv-after-peek", r, extra);
	{
		struct timeval tv = { .tv_usec = 50000 };

		setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
		report("read-rcvtimeo", P->rd(b, buf, sizeof(buf)), "");
		tv.tv_usec = 0;
		setsockopt(b, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	}
	{
		struct later l = { .fd = a, .ms = 100, .data = "0123456789", .close_fd = -1 };
		pthread_t t;

		P->wr(a, "01234", 5);
		l.data = "56789";
		pthread_create(&t, NULL, write_later, &l);
		r = P->rv(b, buf, 10, MSG_WAITALL);
		pthread_join(t, NULL);
		buf[r > 0 ? r : 0] = 0;
		snprintf(extra, sizeof(extra), " '%s'", buf);
		report("recv-waitall", r, extra);
	}

	/* C. signals: EINTR, restart, SIGPIPE */
	alarms = 0;
	set_alarm(50, 0);
	r = P->rd(b, buf, sizeof(buf));
	snprintf(extra, sizeof(extra), " alarms=%d", (int)alarms);
	report("read-eintr", r, extra);
	{
		struct later l = { .fd = a, .ms = 150, .data = "late", .close_fd = -1 };
		pthread_t t;

		alarms = 0;
		pthread_create(&t, NULL, write_later, &l);
		set_alarm(50, 1);
		r = P->rd(b, buf, sizeof(buf));
		pthread_join(t, NULL);
		snprintf(extra, sizeof(extra), " alarms=%d", (int)alarms);
		report("read-restarted", r, extra);
		alarms = 0;
		pthread_create(&t, NULL, write_later, &l);
		set_alarm(50, 1);
		r = P->rv(b, buf, sizeof(buf), 0);
		pthread_join(t, NULL);
		snprintf(extra, sizeof(extra), " alarms=%d", (int)alarms);
		report("recv-restarted", r, extra);
	}
	signal(SIGPIPE, on_sigpipe);
	shutdown(a, SHUT_WR);
	report("read-eof", P->rd(b, buf, sizeof(buf)), "");
	sigpipes = 0;
	r = P->wr(a, "x", 1);
	snprintf(extra, sizeof(extra), " sigpipes=%d", (int)sigpipes);
	report("write-after-shutdown", r, extra);
	r = P->sd(a, "x", 1, MSG_NOSIGNAL);
	snprintf(extra, sizeof(extra), " sigpipes=%d", (int)sigpipes);
	report("send-nosignal", r, extra);
	close(a);
	close(b);

	tcp_pair(&a, &b);
	{
		struct linger lg = { .l_onoff = 1, .l_linger = 0 };

		setsockopt(b, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
		close(b);	/* RST */
		usleep(20000);
		report("read-reset", P->rd(a, buf, sizeof(buf)), "");
		report("read-after-reset", P->rd(a, buf, sizeof(buf)), "");
		sigpipes = 0;
		r = P->wr(a, "x", 1);
		snprintf(extra, sizeof(extra), " sigpipes=%d", (int)sigpipes);
		report("write-after-reset", r, extra);
	}
	close(a);

	/* D. a descriptor closed by another thread while a read waits on it */
	tcp_pair(&a, &b);
	{
		struct later l = { .fd = b, .ms = 100, .data = "after close", .close_fd = a };
		pthread_t t;

		pthread_create(&t, NULL, write_later, &l);
		r = P->rd(a, buf, sizeof(buf));
		pthread_join(t, NULL);
		report("read-closed-meanwhile", r, "");
		report("read-after-close", P->rd(a, buf, sizeof(buf)), "");
	}
	close(b);

	/* E. a partial write on a full non-blocking socket */
	tcp_pair(&a, &b);
	{
		static char big[4 << 20];
		int small = 4096;

		setsockopt(a, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
		fcntl(a, F_SETFL, O_NONBLOCK);
		/* How much fits depends on timing: only whether it was all */
		r = P->wr(a, big, sizeof(big));
		report("write-partial", r > 0 && r < (long)sizeof(big) ? 1 : r, " (1: partial)");
		do
			r = P->wr(a, big, sizeof(big));
		while (r > 0);
		report("write-until-full", r, "");
		report("send-full", P->sd(a, big, sizeof(big), 0), "");
	}
	close(a);
	close(b);

	/* F. descriptors that are not TCP sockets take the system call */
	if (pipe(fds))
		die("pipe");
	report("write-pipe", P->wr(fds[1], "pipe", 4), "");
	report("read-pipe", P->rd(fds[0], buf, sizeof(buf)), "");
	report("recv-pipe", P->rv(fds[0], buf, sizeof(buf), 0), "");
	report("send-pipe", P->sd(fds[1], "x", 1, 0), "");
	close(fds[0]);
	close(fds[1]);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds))
		die("socketpair");
	report("send-unix", P->sd(fds[0], "unix", 4, 0), "");
	report("recv-unix", P->rv(fds[1], buf, sizeof(buf), 0), "");
	close(fds[0]);
	close(fds[1]);
	{
		struct sockaddr_in sin = { .sin_family = AF_INET,
					   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t len = sizeof(sin);

		u1 = socket(AF_INET, SOCK_DGRAM, 0);
		u2 = socket(AF_INET, SOCK_DGRAM, 0);
		bind(u1, (struct sockaddr *)&sin, sizeof(sin));
		getsockname(u1, (struct sockaddr *)&sin, &len);
		connect(u2, (struct sockaddr *)&sin, sizeof(sin));
		report("send-udp", P->sd(u2, "datagram", 8, 0), "");
		report("read-udp", P->rd(u1, buf, 4), " (truncated)");
		close(u1);
		close(u2);
	}
	{
		int l = socket(AF_INET, SOCK_STREAM, 0);

		report("read-unconnected", P->rd(l, buf, 1), "");
		sigpipes = 0;
		r = P->wr(l, "x", 1);
		snprintf(extra, sizeof(extra), " sigpipes=%d", (int)sigpipes);
		report("write-unconnected", r, extra);
		close(l);
	}
	report("read-listener", P->rd(listener, buf, 1), "");
}

static unsigned long long cost(int n, int a, int b)
{
	unsigned long long t0;
	char c = 'x';
	int i;

	for (i = 0; i < 10; i++) {	/* warm up */
		P->wr(a, &c, 1);
		P->rd(b, &c, 1);
	}
	t0 = __rdtsc();
	for (i = 0; i < n; i++) {
		if (P->wr(a, &c, 1) != 1 || P->rd(b, &c, 1) != 1)
			die("cost");
	}
	return __rdtsc() - t0;
}

int main(int argc, char **argv)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(sin);
	unsigned int i;

	listener = socket(AF_INET, SOCK_STREAM, 0);
	if (listener < 0 || bind(listener, (struct sockaddr *)&sin, sizeof(sin)) ||
	    listen(listener, 16) || getsockname(listener, (struct sockaddr *)&sin, &len))
		die("listen");
	port = sin.sin_port;
	printf("opts: %ld\n", ukl_opts(0, 0));
	if (argc > 1 && !strcmp(argv[1], "cases")) {
		for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
			if (use(&paths[i]))
				cases();
	} else if (argc > 2 && !strcmp(argv[1], "cost")) {
		int n = atoi(argv[2]), a, b;

		tcp_pair(&a, &b);
		for (i = 0; i < sizeof(paths) / sizeof(paths[0]); i++)
			if (use(&paths[i]))
				printf("cost %s: %llu\n", P->name, cost(n, a, b));
	} else {
		fprintf(stderr, "usage: tcp_shortcut cases | cost N\n");
		return 2;
	}
	printf("done\n");
	return 0;
}
