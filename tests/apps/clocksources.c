/*
 * clocksources: the C library's clocks give the system calls' answers, for
 * every clock id, under every clock source the kernel offers, and in a
 * time namespace.
 *
 * For each clock source in sysfs's available_clocksource (tsc, hpet,
 * acpi_pm under TCG; kvm-clock under KVM) the program makes it current,
 * then checks each clock id: clock_gettime() lies between two
 * clock_gettime system calls (or fails with the same errno), clock_getres()
 * equals the system call's, gettimeofday() and time() lie between their
 * system calls and are not the epoch. It then enters a new time namespace
 * with offsets for CLOCK_MONOTONIC and CLOCK_BOOTTIME (unshare, the
 * offsets, setns on time_for_children) and checks everything again there,
 * and that the offsets show. UKL's C library reads the clocks by a direct
 * call into the kernel, which must leave the clock sources without a vDSO
 * clock mode and the time namespaces to the system call; under `linux`
 * the same checks hold with the real vDSO.
 *
 * Each failure prints a line starting with FAIL; the last line is
 * "clocksources: N sources, M checks, F failures" and the exit status is 1
 * if F > 0. Runs as root (it writes sysfs and enters a time namespace).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

#define CS_DIR "/sys/devices/system/clocksource/clocksource0/"
#define OFFSET_MONO 100000	/* seconds added to CLOCK_MONOTONIC in the namespace */
#define OFFSET_BOOT 200000	/* and to CLOCK_BOOTTIME */
#define AFTER_2001 1000000000L	/* a wall clock below this is the epoch's */

static const struct {
	clockid_t id;
	const char *name;
} clocks[] = {
	{ CLOCK_REALTIME, "CLOCK_REALTIME" },
	{ CLOCK_MONOTONIC, "CLOCK_MONOTONIC" },
	{ CLOCK_PROCESS_CPUTIME_ID, "CLOCK_PROCESS_CPUTIME_ID" },
	{ CLOCK_THREAD_CPUTIME_ID, "CLOCK_THREAD_CPUTIME_ID" },
	{ CLOCK_MONOTONIC_RAW, "CLOCK_MONOTONIC_RAW" },
	{ CLOCK_REALTIME_COARSE, "CLOCK_REALTIME_COARSE" },
	{ CLOCK_MONOTONIC_COARSE, "CLOCK_MONOTONIC_COARSE" },
	{ CLOCK_BOOTTIME, "CLOCK_BOOTTIME" },
	{ CLOCK_REALTIME_ALARM, "CLOCK_REALTIME_ALARM" },
	{ CLOCK_BOOTTIME_ALARM, "CLOCK_BOOTTIME_ALARM" },
	{ CLOCK_TAI, "CLOCK_TAI" },
	{ 16, "clock 16 (none)" },
	{ 1000, "clock 1000 (none)" },
};

static int checks, failures;
static const char *where = "?";

static void check(int ok, const char *what, const char *detail)
{
	checks++;
	if (!ok) {
		failures++;
		printf("FAIL %s: %s%s%s\n", where, what, detail ? ": " : "", detail ? detail : "");
	}
}

static long long ns(const struct timespec *t)
{
	return t->tv_sec * 1000000000LL + t->tv_nsec;
}

static void check_clock(clockid_t id, const char *name)
{
	struct timespec a = { 0 }, b = { 0 }, c = { 0 }, ra = { 0 }, rb = { 0 };
	char msg[256];
	long r1, r2, rr;
	int r, e1, e, e2, er, ee;

	errno = 0;
	r1 = syscall(SYS_clock_gettime, id, &a);
	e1 = errno;
	errno = 0;
	r = clock_gettime(id, &b);
	e = errno;
	errno = 0;
	r2 = syscall(SYS_clock_gettime, id, &c);
	e2 = errno;
	snprintf(msg, sizeof(msg), "%s: system call %ld/%d %lld, C library %d/%d %lld, system call %ld/%d %lld", name,
		 r1, e1, ns(&a), r, e, ns(&b), r2, e2, ns(&c));
	check(r == r1 && r == r2 && (r == 0 || (e == e1 && e == e2)), "clock_gettime's result", msg);
	if (r == 0 && r1 == 0 && r2 == 0)
		check(ns(&a) <= ns(&b) && ns(&b) <= ns(&c), "clock_gettime between its system calls", msg);

	errno = 0;
	rr = syscall(SYS_clock_getres, id, &ra);
	er = errno;
	errno = 0;
	r = clock_getres(id, &rb);
	ee = errno;
	snprintf(msg, sizeof(msg), "%s: system call %ld/%d %lld, C library %d/%d %lld", name, rr, er, ns(&ra), r, ee,
		 ns(&rb));
	check(r == rr && (r == 0 ? ns(&ra) == ns(&rb) : ee == er), "clock_getres equals its system call", msg);
	errno = 0;
	r = clock_getres(id, NULL);
	ee = errno;
	check(r == rr && (r == 0 || ee == er), "clock_getres(NULL) as its system call", name);
}

static long long us(const struct timeval *t)
{
	return t->tv_sec * 1000000LL + t->tv_usec;
}

static void check_wall(void)
{
	struct timeval a = { 0 }, b = { 0 }, c = { 0 };
	struct timezone tz = { -1, -1 }, tzs = { -2, -2 };
	time_t t1, t, t2, stored = 0;
	char msg[200];
	int r;

	syscall(SYS_gettimeofday, &a, NULL);
	r = gettimeofday(&b, NULL);
	syscall(SYS_gettimeofday, &c, NULL);
	snprintf(msg, sizeof(msg), "%lld <= %lld <= %lld us (returned %d)", us(&a), us(&b), us(&c), r);
	check(r == 0 && us(&a) <= us(&b) && us(&b) <= us(&c), "gettimeofday between its system calls", msg);
	check(b.tv_sec > AFTER_2001, "gettimeofday is not the epoch", msg);
	syscall(SYS_gettimeofday, &a, &tzs);
	r = gettimeofday(&b, &tz);
	syscall(SYS_gettimeofday, &c, NULL);
	snprintf(msg, sizeof(msg), "%lld <= %lld <= %lld us, zone %d/%d against %d/%d", us(&a), us(&b), us(&c),
		 tz.tz_minuteswest, tz.tz_dsttime, tzs.tz_minuteswest, tzs.tz_dsttime);
	check(r == 0 && us(&a) <= us(&b) && us(&b) <= us(&c) && tz.tz_minuteswest == tzs.tz_minuteswest &&
	      tz.tz_dsttime == tzs.tz_dsttime, "gettimeofday with a time zone", msg);

	t1 = syscall(SYS_time, NULL);
	t = time(&stored);
	t2 = syscall(SYS_time, NULL);
	snprintf(msg, sizeof(msg), "%lld <= %lld (stored %lld) <= %lld", (long long)t1, (long long)t,
		 (long long)stored, (long long)t2);
	check(t1 <= t && t <= t2 && stored == t, "time between its system calls", msg);
	check(t > AFTER_2001, "time is not the epoch", msg);
	t = time(NULL);
	check(t >= t2 && t > AFTER_2001, "time(NULL)", msg);
}

static void check_all(void)
{
	for (size_t i = 0; i < sizeof(clocks) / sizeof(clocks[0]); i++)
		check_clock(clocks[i].id, clocks[i].name);
	check_wall();
}

static int read_file(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -1;
	buf[n] = 0;
	buf[strcspn(buf, "\n")] = 0;
	return 0;
}

static int write_file(const char *path, const char *s)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, s, strlen(s));
	close(fd);
	return n == (ssize_t)strlen(s) ? 0 : -1;
}

/* Every clock source in turn, then back to the first one */
static int each_source(const char *ns_name)
{
	char avail[512], orig[64], cur[64], label[128];
	char *save = NULL;
	int n = 0;

	if (read_file(CS_DIR "available_clocksource", avail, sizeof(avail)) ||
	    read_file(CS_DIR "current_clocksource", orig, sizeof(orig))) {
		where = ns_name;
		check(0, "reading " CS_DIR, strerror(errno));
		return 0;
	}
	for (char *src = strtok_r(avail, " ", &save); src; src = strtok_r(NULL, " ", &save)) {
		struct timespec settle = { 0, 20000000 };

		if (write_file(CS_DIR "current_clocksource", src) || read_file(CS_DIR "current_clocksource", cur,
									       sizeof(cur)) || strcmp(cur, src)) {
			printf("clocksources: %s: %s not taken (current %s)\n", ns_name, src, cur);
			continue;
		}
		nanosleep(&settle, NULL);
		snprintf(label, sizeof(label), "%s, %s", ns_name, src);
		where = label;
		check_all();
		printf("clocksources: %s: %s checked\n", ns_name, src);
		n++;
	}
	write_file(CS_DIR "current_clocksource", orig);
	return n;
}

static int enter_time_namespace(void)
{
	struct timespec before, after;
	char offsets[80];
	int fd;

	where = "time namespace";
	if (unshare(CLONE_NEWTIME)) {
		printf("clocksources: no time namespace: unshare: %s\n", strerror(errno));
		return -1;
	}
	snprintf(offsets, sizeof(offsets), "%d %d 0\n%d %d 0\n", CLOCK_MONOTONIC, OFFSET_MONO, CLOCK_BOOTTIME,
		 OFFSET_BOOT);
	if (write_file("/proc/self/timens_offsets", offsets)) {
		check(0, "writing /proc/self/timens_offsets", strerror(errno));
		return -1;
	}
	fd = open("/proc/self/ns/time_for_children", O_RDONLY);
	clock_gettime(CLOCK_MONOTONIC, &before);
	if (fd < 0 || setns(fd, CLONE_NEWTIME)) {
		check(0, "setns(time_for_children)", strerror(errno));
		return -1;
	}
	close(fd);
	clock_gettime(CLOCK_MONOTONIC, &after);
	check(after.tv_sec - before.tv_sec >= OFFSET_MONO && after.tv_sec - before.tv_sec <= OFFSET_MONO + 5,
	      "CLOCK_MONOTONIC shows the namespace's offset", NULL);
	clock_gettime(CLOCK_BOOTTIME, &after);
	check(after.tv_sec >= OFFSET_BOOT, "CLOCK_BOOTTIME shows the namespace's offset", NULL);
	printf("clocksources: entered a time namespace (+%d s monotonic, +%d s boottime)\n", OFFSET_MONO, OFFSET_BOOT);
	return 0;
}

int main(void)
{
	int sources = each_source("initial namespace");

	if (enter_time_namespace() == 0)
		sources += each_source("time namespace");
	printf("clocksources: %d sources, %d checks, %d failures\n", sources, checks, failures);
	return failures ? 1 : 0;
}
