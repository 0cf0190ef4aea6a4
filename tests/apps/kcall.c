/*
 * Direct calls into the kernel with ukl_call() (<ukl.h>).
 *
 *   kcall calls     (a UKL application) call kernel functions: a clock,
 *                   one that sleeps, one that copies from user memory,
 *                   from the main thread and a second thread; refused
 *                   targets give -EFAULT
 *   kcall refused   (an ordinary process) the direct call is an unknown
 *                   system call: prints its result
 *
 * Each check prints one line; the test compares them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ukl.h>
#include <unistd.h>

static long long now_ns(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#ifdef __UKL__
/* Kernel functions, declared as the kernel declares them */
unsigned long long ktime_get_mono_fast_ns(void) UKL_KERNEL_SYMBOL(ktime_get_mono_fast_ns);
void msleep(unsigned int msecs) UKL_KERNEL_SYMBOL(msleep);
long ksys_write(unsigned int fd, const char *buf, size_t count) UKL_KERNEL_SYMBOL(ksys_write);
extern char jiffies[] UKL_KERNEL_SYMBOL(jiffies);
void entry_SYSCALL_64(void) UKL_KERNEL_SYMBOL(entry_SYSCALL_64);

static int app_function(void) { return 1; }

static void *calls(void *arg)
{
	const char *who = arg;
	char buf[64];
	long long t0, t1, k;
	int len;

	t0 = now_ns(CLOCK_MONOTONIC);
	k = ukl_call(ktime_get_mono_fast_ns);
	t1 = now_ns(CLOCK_MONOTONIC);
	printf("%s: clock %s\n", who, t0 <= k && k <= t1 ? "between" : "outside");

	t0 = now_ns(CLOCK_MONOTONIC);
	ukl_call(msleep, 30);
	t1 = now_ns(CLOCK_MONOTONIC);
	printf("%s: slept %s\n", who, t1 - t0 >= 30000000 ? "30 ms" : "too little");

	/* A buffer on this thread's stack, in the user half: copied by uaccess */
	fflush(stdout);
	len = snprintf(buf, sizeof(buf), "%s: written by ksys_write\n", who);
	printf("%s: write returned %s\n", who, ukl_call(ksys_write, 1, buf, len) == len ? "its length" : "other");
	return NULL;
}

static int direct_calls(void)
{
	void *heap = malloc(16);
	pthread_t t;

	calls("main");
	pthread_create(&t, NULL, calls, "thread");
	pthread_join(t, NULL);

	printf("NULL: %s\n", strerror((int)-ukl_call(NULL)));
	printf("heap: %s\n", strerror((int)-ukl_call(heap)));
	printf("application: %s\n", strerror((int)-ukl_call(app_function)));
	printf("kernel data: %s\n", strerror((int)-ukl_call(jiffies)));
	printf("entry code: %s\n", strerror((int)-ukl_call(entry_SYSCALL_64)));
	printf("vsyscall page: %s\n", strerror((int)-ukl_call((void *)0xffffffffff600000UL)));
	free(heap);
	return 0;
}
#else
static int direct_calls(void)
{
	fprintf(stderr, "kcall: built as an ordinary program\n");
	return 2;
}
#endif

int main(int argc, char **argv)
{
	if (argc > 1 && !strcmp(argv[1], "calls"))
		return direct_calls();
	if (argc > 1 && !strcmp(argv[1], "refused")) {
		long r = ukl_call((void *)0xffffffff81000000UL, 1, 2, 3);

		printf("refused: %s\n", r < 0 ? strerror((int)-r) : "called");
		return 0;
	}
	fprintf(stderr, "usage: kcall calls|refused\n");
	return 2;
}
