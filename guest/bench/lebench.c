/*
 * lebench: LEBench-style kernel-path microbenchmarks in the spirit of the
 * UKL dissertation (§6.3): buffers mmap'ed and pre-faulted, warm-up runs,
 * then N measured iterations per point, each timed with RDTSCP and
 * reported as median and 99th percentile in nanoseconds (calibrated
 * against CLOCK_MONOTONIC; under QEMU -icount shift=0 one nanosecond is
 * one guest instruction). Freestanding, so the same source runs as an
 * ordinary process and linked into the kernel.
 *
 *   lebench [quick]     prints "BENCH <op> <size> <median> <p99> <n>" lines
 *
 * Each measured iteration is also a region for ukl's instruction-class
 * plugin (guest/bench/region.h; `ukl bench syscalls --model cycles`): the
 * region's begin marker sits in the asm statement of the first RDTSCP,
 * before it, and its end marker in that of the second, after it, so the
 * timed code is unchanged and a region holds it plus the two RDTSCPs.
 * "REGION <id> <op> <size> <n>" lines name the regions; warm-up iterations
 * are not in any (one that begins a region without ending it is restarted
 * by the next begin).
 */
#include <linux/futex.h>
#include <linux/sched.h>

#include "../runtime/freestanding.h"
#include "region.h"

#define MAX_ITERS 10000
#define MAX_SIZE 8192

static long iters = MAX_ITERS, warmup = 1000;
static unsigned long samples[MAX_ITERS];
static unsigned long tsc_per_ms;	/* calibrated */
static char *buf;
static unsigned int regions;	/* region ids handed out */

static inline unsigned long tsc(void)
{
	unsigned int lo, hi, aux;

	__asm__ volatile("rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux) :: "memory");
	return ((unsigned long)hi << 32) | lo;
}

/* tsc() that begins the selected region before reading the counter, and
 * one that ends it after: markers outside the timed interval */
static inline unsigned long tsc_begin(void)
{
	unsigned int lo, hi, aux;

	__asm__ volatile(REGION_BEGIN_SELECTED "rdtscp" : "=a"(lo), "=d"(hi), "=c"(aux) :: "memory");
	return ((unsigned long)hi << 32) | lo;
}

static inline unsigned long tsc_end(void)
{
	unsigned int lo, hi, aux;

	__asm__ volatile("rdtscp\n\t" REGION_END_OPEN : "=a"(lo), "=d"(hi), "=c"(aux) :: "memory");
	return ((unsigned long)hi << 32) | lo;
}

/* Name the region of the next measured point and select it. */
static void region_for(const char *op, long size, long n)
{
	say("REGION %u %s %ld %ld\n", regions, op, size, n);
	region_select(regions++);
}

static unsigned long now_ns(void)
{
	long ts[2];

	sys(__NR_clock_gettime, 1 /* CLOCK_MONOTONIC */, ts);
	return (unsigned long)ts[0] * 1000000000UL + (unsigned long)ts[1];
}

static void calibrate(void)
{
	unsigned long t0 = now_ns(), c0 = tsc(), t1, c1;

	do
		t1 = now_ns();
	while (t1 - t0 < 20000000);	/* 20 ms */
	c1 = tsc();
	tsc_per_ms = (c1 - c0) * 1000000 / (t1 - t0);
}

static unsigned long to_ns(unsigned long cycles)
{
	return cycles * 1000000 / tsc_per_ms;
}

/* Shell sort: enough for 10,000 samples, no library. */
static void sort(unsigned long *a, long n)
{
	for (long gap = n / 2; gap > 0; gap /= 2)
		for (long i = gap; i < n; i++)
			for (long j = i; j >= gap && a[j - gap] > a[j]; j -= gap) {
				unsigned long t = a[j];

				a[j] = a[j - gap];
				a[j - gap] = t;
			}
}

static void report(const char *op, long size, long n)
{
	sort(samples, n);
	say("BENCH %s %ld %lu %lu %ld\n", op, size, to_ns(samples[n / 2]),
	    to_ns(samples[n * 99 / 100]), n);
}

/* Time one operation n times after a warm-up; op gets the iteration. */
#define MEASURE(opname, size, stmt) do {				\
	region_for(opname, size, iters);				\
	for (long i_ = 0; i_ < warmup; i_++) { long it = i_; (void)it; stmt; } \
	for (long i_ = 0; i_ < iters; i_++) {				\
		long it = i_; unsigned long t0_;			\
		(void)it;						\
		t0_ = tsc_begin();					\
		stmt;							\
		samples[i_] = tsc_end() - t0_;				\
	}								\
	report(opname, size, iters);					\
} while (0)

static void *map(long len)
{
	return (void *)sys(__NR_mmap, 0, len, 3, 0x22 /* PRIVATE|ANON */, -1, 0);
}

static void bench_small(void)
{
	MEASURE("getppid", 0, sys0(__NR_getppid));
}

static void bench_file(const long *sizes, int nsizes)
{
	long fd = sys(__NR_open, "/tmp/lebench", 0102 /* O_RDWR|O_CREAT */, 0600);

	sys(__NR_write, fd, buf, MAX_SIZE);
	for (int s = 0; s < nsizes; s++)
		MEASURE("write", sizes[s], sys(__NR_pwrite64, fd, buf, sizes[s], 0));
	for (int s = 0; s < nsizes; s++)
		MEASURE("read", sizes[s], sys(__NR_pread64, fd, buf, sizes[s], 0));
	sys(__NR_close, fd);
}

static void bench_socket(const long *sizes, int nsizes)
{
	int sv[2];

	sys(__NR_socketpair, 1 /* AF_UNIX */, 2 /* SOCK_DGRAM */, 0, sv);
	for (int s = 0; s < nsizes; s++) {
		long size = sizes[s];

		/* sendto is timed; the peer drains outside the timing */
		region_for("sendto", size, iters);
		for (long i = 0; i < warmup + iters; i++) {
			unsigned long t0 = tsc_begin();

			sys(__NR_sendto, sv[0], buf, size, 0, 0, 0);
			if (i >= warmup)
				samples[i - warmup] = tsc_end() - t0;
			sys(__NR_recvfrom, sv[1], buf + MAX_SIZE, size, 0, 0, 0);
		}
		report("sendto", size, iters);
		region_for("recvfrom", size, iters);
		for (long i = 0; i < warmup + iters; i++) {
			unsigned long t0;

			sys(__NR_sendto, sv[0], buf, size, 0, 0, 0);
			t0 = tsc_begin();
			sys(__NR_recvfrom, sv[1], buf + MAX_SIZE, size, 0, 0, 0);
			if (i >= warmup)
				samples[i - warmup] = tsc_end() - t0;
		}
		report("recvfrom", size, iters);
	}
}

static void bench_memory(void)
{
	char *region;
	long pages = iters;

	MEASURE("mmap+munmap", 4096, {
		void *p = map(4096);

		sys(__NR_munmap, p, 4096);
	});
	/* first touch of fresh anonymous pages */
	region = map(pages * 4096);
	region_for("page-fault", 4096, pages);
	for (long i = 0; i < pages; i++) {
		unsigned long t0 = tsc_begin();

		region[i * 4096] = 1;
		samples[i] = tsc_end() - t0;
	}
	report("page-fault", 4096, pages);
	sys(__NR_munmap, region, pages * 4096);
}

/* ---- threads ---- */
long raw_thread(unsigned long flags, char *stack, volatile int *tidp, int (*fn)(void));
__asm__(".text\nraw_thread:\n"
	"  sub $16, %rsi\n  mov %rcx, (%rsi)\n  mov %rdx, %r10\n  xor %r8d, %r8d\n"
	"  mov $56, %eax\n" SYSCALL_INSN
	"  test %rax, %rax\n  jnz 1f\n"
	"  mov (%rsp), %rax\n  call *%rax\n"
	"  mov $60, %eax\n  xor %edi, %edi\n" SYSCALL_INSN
	"1: ret\n");

#define THREAD_FLAGS (CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD | \
		      CLONE_SYSVSEM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID)
static volatile int tid_word;
static int pipes[2][2];
static long stack_pages;

static void join(void)
{
	while (tid_word)
		sys(__NR_futex, &tid_word, FUTEX_WAIT, tid_word, 0);
}

static int nothing(void)
{
	return 0;
}

/* Touch fresh stack pages below us, timing each: stack page faults. */
static int stack_toucher(void)
{
	volatile char here;
	volatile char *p = &here;

	__asm__("" : "+r"(p));	/* below our frame is fine: it is our stack */

	for (long i = 1; i <= stack_pages; i++) {
		unsigned long t0 = tsc_begin();

		p[-i * 4096] = 1;
		samples[i - 1] = tsc_end() - t0;
	}
	return 0;
}

static int ponger(void)
{
	char c;

	for (long i = 0; i < warmup + iters; i++) {
		sys(__NR_read, pipes[0][0], &c, 1);
		sys(__NR_write, pipes[1][1], &c, 1);
	}
	return 0;
}

static void spawn(char *stack, long len, int (*fn)(void))
{
	tid_word = 1;
	raw_thread(THREAD_FLAGS, stack + len, &tid_word, fn);
}

static void bench_threads(void)
{
	long len = 1 << 20;
	char *stack = map(len), c = 'x';
	char *big;

	MEASURE("thread-create+join", 0, { spawn(stack, len, nothing); join(); });

	/* stack faults: a fresh, unpopulated stack, touched downwards */
	stack_pages = iters < 2000 ? iters : 2000;
	region_for("stack-fault", 4096, stack_pages);
	big = map((stack_pages + 16) * 4096);
	spawn(big, (stack_pages + 16) * 4096, stack_toucher);
	join();
	report("stack-fault", 4096, stack_pages);

	sys(__NR_pipe, pipes[0]);
	sys(__NR_pipe, pipes[1]);
	spawn(stack, len, ponger);
	MEASURE("context-switch", 0, {
		sys(__NR_write, pipes[0][1], &c, 1);
		sys(__NR_read, pipes[1][0], &c, 1);
	});
	join();
}

int main(int argc, char **argv, char **envp)
{
	static const long quick_sizes[] = { 1, 4096, 8192 };
	static long sizes[1 + MAX_SIZE / 256];
	int nsizes = 0, quick = argc > 1 && seq(argv[1], "quick");

	(void)envp;
	if (quick) {
		iters = 1000;
		warmup = 100;
	}
	buf = map(2 * MAX_SIZE);
	memset(buf, 'a', 2 * MAX_SIZE);	/* pre-fault */
	if (quick) {
		for (int i = 0; i < 3; i++)
			sizes[nsizes++] = quick_sizes[i];
	} else {
		sizes[nsizes++] = 1;
		for (long s = 256; s <= MAX_SIZE; s += 256)
			sizes[nsizes++] = s;
	}
	/* Measure in silence: let the console drain, print at the end. */
	sys(__NR_ioctl, 1, 0x5409 /* TCSBRK: drain */, 1);
	hold_output = 1;
	calibrate();
	say("BENCH-INFO iterations %ld warmup %ld tsc_per_ms %lu\n", iters, warmup, tsc_per_ms);
	bench_small();
	bench_file(sizes, nsizes);
	bench_socket(sizes, nsizes);
	bench_memory();
	bench_threads();
	say("BENCH-DONE\n");
	return 0;
}
