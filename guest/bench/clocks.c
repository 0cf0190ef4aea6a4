/*
 * clocks: what reading a clock costs, against a plain system call.
 * Prints guest nanoseconds per call for clock_gettime(CLOCK_MONOTONIC),
 * gettimeofday(), time() and syscall(SYS_getppid); under `ukl run --icount`
 * a guest nanosecond is one instruction, so runs repeat exactly.
 */
#include <stdio.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define N 20000

static double now(void)
{
	struct timespec ts;

	syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);	/* never the fast path */
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(void)
{
	struct timespec ts;
	struct timeval tv;
	volatile long sink = 0;
	double t0, per[4];

	for (int i = 0; i < 1000; i++)	/* warm up */
		clock_gettime(CLOCK_MONOTONIC, &ts);
	t0 = now();
	for (int i = 0; i < N; i++)
		clock_gettime(CLOCK_MONOTONIC, &ts);
	per[0] = (now() - t0) / N;
	t0 = now();
	for (int i = 0; i < N; i++)
		gettimeofday(&tv, NULL);
	per[1] = (now() - t0) / N;
	t0 = now();
	for (int i = 0; i < N; i++)
		sink += time(NULL);
	per[2] = (now() - t0) / N;
	t0 = now();
	for (int i = 0; i < N; i++)
		sink += syscall(SYS_getppid);
	per[3] = (now() - t0) / N;
	printf("clock_gettime %.1f\ngettimeofday %.1f\ntime %.1f\ngetppid-syscall %.1f\n", per[0], per[1], per[2],
	       per[3]);
	return 0;
}
