/*
 * remote: what a remote system call costs (`ukl bench remote`,
 * runtime/ukl.h ukl_remote_*, Documentation/x86/ukl-remote.rst).
 *
 * Built unchanged for the host (an ordinary process), for `linux` and for
 * a UKL kernel booted with `ukl run --remote DIR`. Where remote calls are
 * not available (ENOSYS, ENODEV) their rows are left out. Prints
 *
 *   RBENCH OP BYTES MEDIAN P99 N     nanoseconds per call, over N batches
 *   JITTER LOAD N MEAN MEDIAN MAX SUM SPAN THRESHOLD   (nanoseconds)
 *   RBENCH-DONE
 *
 * OPs: getppid; null-poll and null-irq (ukl_remote_null(), the thread
 * spinning or asleep until the host's interrupt); read-/write-local (a file
 * in the guest's tmpfs), read-/write-poll and read-/write-irq (a file in
 * DIR on the host), pread/pwrite of BYTES at offset 0.
 *
 * JITTER, as sysjitter does: a thread on CPU 0 reads the TSC in a loop and
 * counts the gaps longer than THRESHOLD (interruptions), while CPU 1 runs
 * LOAD: nothing, a thread reading 4 KiB of a local file every millisecond,
 * or the same thread reading a host file through remote calls (asleep).
 *
 * Usage: remote [quick]
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include "ukl.h"

#define MAX_BYTES	65536
#define REMOTE_FILE	"remote-bench.dat"
#define LOCAL_FILE	"/tmp/remote-bench.dat"
#define THRESHOLD_NS	1000

static int quick;
static int batches, per_batch;
static unsigned char buf[MAX_BYTES];

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Report OP: nanoseconds per call of fn, median and p99 over the batches */
static int measure(const char *op, int bytes, long (*fn)(int, int), int fd)
{
	static uint64_t per[4096];

	for (int i = 0; i < per_batch; i++)	/* warm up */
		if (fn(fd, bytes) < 0)
			return -1;
	for (int b = 0; b < batches; b++) {
		uint64_t t0 = now_ns();

		for (int i = 0; i < per_batch; i++)
			if (fn(fd, bytes) < 0) {
				fprintf(stderr, "remote: %s %d: %s\n", op, bytes, strerror(errno));
				return -1;
			}
		per[b] = (now_ns() - t0) / (uint64_t)per_batch;
	}
	qsort(per, (size_t)batches, sizeof(per[0]), cmp_u64);
	printf("RBENCH %s %d %llu %llu %d\n", op, bytes, (unsigned long long)per[batches / 2],
	       (unsigned long long)per[(batches * 99) / 100], batches);
	fflush(stdout);
	return 0;
}

static long do_getppid(int fd, int bytes)
{
	(void)fd, (void)bytes;
	return syscall(SYS_getppid);
}

static long do_null(int fd, int bytes)
{
	(void)fd, (void)bytes;
	return ukl_remote_null();
}

static long do_read(int fd, int bytes)
{
	return pread(fd, buf, (size_t)bytes, 0) == bytes ? 0 : -1;
}

static long do_write(int fd, int bytes)
{
	return pwrite(fd, buf, (size_t)bytes, 0) == bytes ? 0 : -1;
}

static const int sizes[] = { 1, 64, 1024, 4096, 16384, 65536 };

static int open_file(const char *path)
{
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || pwrite(fd, buf, MAX_BYTES, 0) != MAX_BYTES) {
		fprintf(stderr, "remote: %s: %s\n", path, strerror(errno));
		return -1;
	}
	return fd;
}

/* read and write of each size on fd, as OP-SUFFIX */
static int file_rows(int fd, const char *suffix)
{
	char op[32];

	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		snprintf(op, sizeof(op), "read-%s", suffix);
		if (measure(op, sizes[i], do_read, fd))
			return -1;
		snprintf(op, sizeof(op), "write-%s", suffix);
		if (measure(op, sizes[i], do_write, fd))
			return -1;
	}
	return 0;
}

/* Remote files from here on: 0, or 1 where there are none (rows left out) */
static int remote_enable(void)
{
	if (!ukl_remote_enable())
		return 0;
	if (errno == ENOSYS || errno == ENODEV) {
		printf("remote calls: %s, their rows left out\n", strerror(errno));
		return 1;
	}
	perror("ukl_remote_enable");
	exit(1);
}

static int latency(void)
{
	int fd, remote;

	if (measure("getppid", 0, do_getppid, -1))
		return -1;
	fd = open_file(LOCAL_FILE);
	if (fd < 0 || file_rows(fd, "local"))
		return -1;
	close(fd);
	unlink(LOCAL_FILE);
	remote = remote_enable();
	if (remote)
		return 0;
	if (ukl_remote_on())
		return -1;
	fd = open_file(REMOTE_FILE);
	if (fd < 0)
		return -1;
	if (ukl_remote_poll() || measure("null-poll", 0, do_null, -1) || file_rows(fd, "poll"))
		return -1;
	/* Past the host's polling window (--remote-idle-us): it sleeps too */
	if (ukl_remote_irq() || usleep(50000) || measure("null-irq", 0, do_null, -1) || file_rows(fd, "irq"))
		return -1;
	ukl_remote_poll();
	close(fd);
	unlink(REMOTE_FILE);
	return ukl_remote_disable();
}

/* ---- Jitter ---- */

static volatile int stop_load;
static int load_ready;

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);
}

static void *load_thread(void *arg)
{
	const char *kind = arg;
	struct timespec ms = { 0, 1000000 };
	int fd;

	pin(1);
	if (!strcmp(kind, "remote-io")) {
		if (ukl_remote_enable() || ukl_remote_irq() || ukl_remote_on())
			return NULL;
		fd = open_file(REMOTE_FILE);
	} else {
		fd = open_file(LOCAL_FILE);
	}
	__atomic_store_n(&load_ready, fd >= 0 ? 1 : -1, __ATOMIC_RELEASE);
	while (fd >= 0 && !stop_load) {
		if (pread(fd, buf, 4096, 0) != 4096)
			break;
		nanosleep(&ms, NULL);
	}
	if (fd >= 0) {
		close(fd);
		unlink(!strcmp(kind, "remote-io") ? REMOTE_FILE : LOCAL_FILE);
	}
	return NULL;
}

static int jitter(const char *load, uint64_t span_ns)
{
	static uint64_t gap[200000];
	size_t n = 0, max_n = sizeof(gap) / sizeof(gap[0]);
	pthread_t t;
	uint64_t t0, t1, c0, c1, prev, sum = 0, mx = 0, th;
	double per_ns;

	if (strcmp(load, "none")) {
		stop_load = 0;
		load_ready = 0;
		if (pthread_create(&t, NULL, load_thread, (void *)load))
			return -1;
		while (!__atomic_load_n(&load_ready, __ATOMIC_ACQUIRE))
			sched_yield();
		if (load_ready < 0) {
			pthread_join(t, NULL);
			return -1;
		}
	}
	pin(0);
	/* The TSC's rate: calibrated against the clock over 10 ms */
	t0 = now_ns();
	c0 = __rdtsc();
	while (now_ns() - t0 < 10000000)
		;
	per_ns = (double)(__rdtsc() - c0) / (double)(now_ns() - t0);
	th = (uint64_t)(THRESHOLD_NS * per_ns);
	c1 = (uint64_t)((double)span_ns * per_ns);
	prev = c0 = __rdtsc();
	while (prev - c0 < c1) {
		uint64_t c = __rdtsc(), d = c - prev;

		if (d > th && n < max_n) {
			gap[n++] = d;
			sum += d;
			if (d > mx)
				mx = d;
		}
		prev = c;
	}
	t1 = prev - c0;
	if (strcmp(load, "none")) {
		stop_load = 1;
		pthread_join(t, NULL);
	}
	qsort(gap, n, sizeof(gap[0]), cmp_u64);
	printf("JITTER %s %zu %.0f %.0f %.0f %.0f %.0f %d\n", load, n, n ? (double)sum / (double)n / per_ns : 0.0,
	       n ? (double)gap[n / 2] / per_ns : 0.0, (double)mx / per_ns, (double)sum / per_ns,
	       (double)t1 / per_ns, THRESHOLD_NS);
	fflush(stdout);
	return 0;
}

int main(int argc, char **argv)
{
	uint64_t span = 2000000000u;
	int remote;

	quick = argc > 1 && !strcmp(argv[1], "quick");
	batches = quick ? 40 : 400;
	per_batch = quick ? 5 : 20;
	if (quick)
		span = 300000000u;
	memset(buf, 'r', sizeof(buf));
	mkdir("/tmp", 01777);	/* the guest's initramfs may have none */
	if (latency())
		return 1;
	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		printf("jitter: needs 2 CPUs, left out\n");
	} else if (argc > 2 && !strcmp(argv[2], "nojitter")) {
		printf("jitter: left out\n");
	} else {
		remote = ukl_remote_enable() ? 1 : 0;
		if (!remote)
			ukl_remote_disable();
		if (jitter("none", span) || jitter("local-io", span) || (!remote && jitter("remote-io", span)))
			return 1;
	}
	printf("RBENCH-DONE\n");
	return 0;
}
