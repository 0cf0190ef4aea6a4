/*
 * insnclass: a known mix of classed instructions inside a measured region,
 * for tests/vm/test_cyclemodel_vm.py (the QEMU plugin tools/qemu-plugin/insnclass.c
 * must count exactly these). Freestanding; built for --config linux, where
 * it runs in ring 3 (so no CLI/STI, WRMSR, MOV to CR*: those fault there).
 *
 *   insnclass     runs ROUNDS iterations of region REGION and prints
 *                 "INSNCLASS region R rounds N xsave X" (X: 1 when XSAVE and
 *                 XRSTOR ran, which needs CR4.OSXSAVE)
 *   insnclass migrate
 *                 one iteration of region MIGRATE_REGION that begins on CPU 0,
 *                 moves to CPU 1 after a round and ends there after a second
 *                 (for the plugin's machine=on), and prints
 *                 "INSNCLASS migrate cpus A B xsave X" (A, B: the CPUs the
 *                 rounds ran on)
 */
#include "../../runtime/freestanding.h"
#include "../../guest/bench/region.h"

#define REGION 7
#define ROUNDS 10
#define MIGRATE_REGION 8

static unsigned char xbuf[4096] __attribute__((aligned(64)));

static int osxsave(void)
{
	unsigned int a = 1, b, c = 0, d;

	__asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
	return !!(c & (1u << 27));
}

/* Per round: CPUID x3, RDTSCP x5, RDTSC x4, LFENCE x6, MFENCE x2,
 * SFENCE x1, VERW x2, POPF x3, getppid() (SYSCALL, and in the kernel
 * SWAPGS x2 and SYSRET), and XSAVE + XRSTOR when the kernel enabled them. */
static void round_(int xsave)
{
	unsigned int a, b, c, d;
	unsigned short sel;
	unsigned long flags;

	for (int i = 0; i < 3; i++) {
		a = 0, c = 0;
		__asm__ volatile("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
	}
	for (int i = 0; i < 5; i++)
		__asm__ volatile("rdtscp" : "=a"(a), "=d"(d), "=c"(c));
	for (int i = 0; i < 4; i++)
		__asm__ volatile("rdtsc" : "=a"(a), "=d"(d));
	for (int i = 0; i < 6; i++)
		__asm__ volatile("lfence" ::: "memory");
	__asm__ volatile("mfence\n\tmfence\n\tsfence" ::: "memory");
	__asm__ volatile("mov %%ss, %0" : "=r"(sel));
	for (int i = 0; i < 2; i++)
		__asm__ volatile("verw %0" : : "m"(sel) : "cc");	/* ring 3 may; sets ZF */
	for (int i = 0; i < 3; i++)
		__asm__ volatile("pushf\n\tpop %0\n\tpush %0\n\tpopf" : "=r"(flags) : : "cc", "memory");
	sys0(__NR_getppid);
	if (xsave)
		__asm__ volatile("xsave64 %0\n\txrstor64 %0" : "+m"(xbuf) : "a"(3), "d"(0) : "memory");
}

/* Bind the calling thread to CPU alone; the CPU it then runs on */
static long on_cpu(int cpu)
{
	unsigned long mask = 1UL << cpu;
	unsigned int now = ~0u;

	if (sys(__NR_sched_setaffinity, 0, sizeof(mask), &mask) < 0)
		return -1;
	sys(__NR_getcpu, &now, 0, 0);
	return now;
}

int main(int argc, char **argv, char **envp)
{
	int xsave = osxsave();

	(void)envp;
	if (argc > 1 && seq(argv[1], "migrate")) {
		long a = on_cpu(0), b;

		REGION_BEGIN(MIGRATE_REGION);
		round_(xsave);
		b = on_cpu(1);
		round_(xsave);
		REGION_END(MIGRATE_REGION);
		say("INSNCLASS migrate cpus %ld %ld xsave %d\n", a, b, xsave);
		return 0;
	}
	for (int r = 0; r < ROUNDS; r++) {
		REGION_BEGIN(REGION);
		round_(xsave);
		REGION_END(REGION);
	}
	say("INSNCLASS region %d rounds %d xsave %d\n", REGION, ROUNDS, xsave);
	return 0;
}
