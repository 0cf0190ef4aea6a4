/*
 * sometimes: a program whose recorded run differs from its later runs.
 *
 * With "quiet" it prints one line and exits with status 3: the run
 * `ukl build --specialize --record-args quiet --record-status 3` records,
 * which uses none of the calls below. With "all" it uses each of them and
 * the clocks a UKL C library reads by system call: eventfd, epoll, timerfd,
 * signalfd, flock, timer_create, an AF_UNIX socketpair, and clock_gettime
 * and clock_getres of CLOCK_MONOTONIC_RAW, the coarse clocks and
 * CLOCK_TAI. A kernel specialized from the quiet run must still serve
 * them, since the program's code can make them. Prints a FAIL line for
 * each that fails, then "sometimes: N calls, F failed", and exits 1 if F > 0.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static int failures, calls;

static void want(int ok, const char *what)
{
	calls++;
	if (!ok) {
		failures++;
		printf("FAIL %s: %s\n", what, strerror(errno));
	}
}

int main(int argc, char **argv)
{
	static const struct {
		clockid_t id;
		const char *name;
	} clocks[] = {
		{ CLOCK_MONOTONIC_RAW, "CLOCK_MONOTONIC_RAW" },
		{ CLOCK_REALTIME_COARSE, "CLOCK_REALTIME_COARSE" },
		{ CLOCK_MONOTONIC_COARSE, "CLOCK_MONOTONIC_COARSE" },
		{ CLOCK_TAI, "CLOCK_TAI" },
	};
	struct epoll_event ev = { .events = EPOLLIN };
	struct sigevent sev = { .sigev_notify = SIGEV_NONE };
	struct timespec ts;
	sigset_t mask;
	timer_t timer;
	int sv[2], fd, ep, lockfd;
	char name[64];

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc < 2 || strcmp(argv[1], "all")) {
		printf("sometimes: nothing this time\n");
		return 3;
	}
	fd = eventfd(0, 0);
	want(fd >= 0, "eventfd");
	ep = epoll_create1(0);
	want(ep >= 0, "epoll_create1");
	want(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) == 0, "epoll_ctl");
	want(timerfd_create(CLOCK_MONOTONIC, 0) >= 0, "timerfd_create");
	sigemptyset(&mask);
	sigaddset(&mask, SIGUSR1);
	want(signalfd(-1, &mask, 0) >= 0, "signalfd");
	lockfd = open("/tmp/sometimes.lock", O_CREAT | O_RDWR, 0600);
	want(lockfd >= 0 && flock(lockfd, LOCK_EX) == 0, "flock");
	want(timer_create(CLOCK_MONOTONIC, &sev, &timer) == 0, "timer_create");
	want(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0 && write(sv[0], "x", 1) == 1, "socketpair(AF_UNIX)");
	for (size_t i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++) {
		snprintf(name, sizeof(name), "clock_gettime(%s)", clocks[i].name);
		want(clock_gettime(clocks[i].id, &ts) == 0, name);
		snprintf(name, sizeof(name), "clock_getres(%s)", clocks[i].name);
		want(clock_getres(clocks[i].id, &ts) == 0, name);
	}
	printf("sometimes: %d calls, %d failed\n", calls, failures);
	return failures ? 1 : 0;
}
