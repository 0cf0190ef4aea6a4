/*
 * ukl_base: a freestanding test program (no C library, the system call shim
 * in runtime/freestanding.h) for the UKL base model. It builds unchanged
 * for --config linux (SYSCALL instruction, ring 3) and --config base (calls
 * ukl_entry_SYSCALL_64, ring 0). argv[1] selects the case.
 */
#include <linux/futex.h>
#include <linux/sched.h>
#include <linux/signal.h>
#include <stdint.h>

#include "../../runtime/freestanding.h"

static int ring(void)
{
	unsigned short cs;

	__asm__ volatile("mov %%cs, %0" : "=r"(cs));
	return cs & 3;
}

/* ---- setjmp/longjmp, enough to leave a signal handler ---- */
typedef unsigned long jmpbuf[8];
int jset(jmpbuf b) __attribute__((returns_twice));
void __attribute__((noreturn)) jback(jmpbuf b, int v);
__asm__(".text\n"
	"jset: mov %rbx,(%rdi); mov %rbp,8(%rdi); mov %r12,16(%rdi); mov %r13,24(%rdi)\n"
	"  mov %r14,32(%rdi); mov %r15,40(%rdi); lea 8(%rsp),%rdx; mov %rdx,48(%rdi)\n"
	"  mov (%rsp),%rdx; mov %rdx,56(%rdi); xor %eax,%eax; ret\n"
	"jback: mov (%rdi),%rbx; mov 8(%rdi),%rbp; mov 16(%rdi),%r12; mov 24(%rdi),%r13\n"
	"  mov 32(%rdi),%r14; mov 40(%rdi),%r15; mov 48(%rdi),%rsp; mov %esi,%eax\n"
	"  jmp *56(%rdi)\n");

/* ---- signals ---- */
struct ksigaction {
	void (*handler)(int);
	unsigned long flags;
	void (*restorer)(void);
	unsigned long mask;
};

#ifdef __UKL__
void ukl_rt_sigreturn(void);
#define RESTORER ukl_rt_sigreturn
#else
void restore_rt(void);
__asm__(".text\nrestore_rt: mov $15, %eax\n syscall\n");
#define RESTORER restore_rt
#endif

static int on(int sig, void (*h)(int), unsigned long flags)
{
	struct ksigaction sa = { h, flags | 0x04000000 /* SA_RESTORER */, RESTORER, 0 };

	return (int)sys(__NR_rt_sigaction, sig, &sa, 0, 8);
}

static volatile int got;
static jmpbuf escape;
static int pipefd[2];

static void h_flag(int sig) { got = sig; }

/* A real division by zero (1 / x is not one: GCC rewrites it). */
static int divide(int a, int b)
{
	__asm__ volatile("cltd; idivl %1" : "+a"(a) : "r"(b) : "rdx");
	return a;
}
static void h_escape(int sig) { got = sig; jback(escape, sig); }
static void h_write(int sig) { got = sig; sys(__NR_write, pipefd[1], "x", 1); }

/* ---- cases ---- */
static int case_info(int argc, char **argv, char **envp, unsigned long *auxv)
{
	int envc = 0;

	say("ring %d\n", ring());
	for (int i = 0; i < argc; i++)
		say("argv[%d] = %s\n", i, argv[i]);
	while (envp[envc])
		envc++;
	say("envc %d\n", envc);
	for (; auxv[0]; auxv += 2) {
		if (auxv[0] == 6)
			say("AT_PAGESZ %lu\n", auxv[1]);
		if (auxv[0] == 25)
			say("AT_RANDOM %s\n", auxv[1] ? "yes" : "no");
	}
	say("pid %ld ppid %ld\n", sys0(__NR_getpid), sys0(__NR_getppid));
	return 0;
}

static const char rodata_msg[] = "write from rodata ok\n";
static char bss_buf[64];
/* what get_user() and put_user() read and write: socket option, time, aio */
static int opt_val;
static unsigned int opt_len;
static long time_val;
static unsigned long aio_ctx;
static const int one_ro = 1;

static int case_memory(void)
{
	char *big, *brk0, *brk1;
	long r, fd, rc;

	big = (char *)sys(__NR_mmap, 0, 64 << 20, 3 /* RW */, 0x22 /* PRIVATE|ANON */, -1, 0);
	if ((long)big < 0)
		return say("mmap failed %ld\n", (long)big), 1;
	for (long i = 0; i < (64 << 20); i += 4096)
		big[i] = (char)i;
	say("mmap 64 MiB touched, munmap %ld\n", sys(__NR_munmap, big, 64 << 20));
	brk0 = (char *)sys(__NR_brk, 0);
	brk1 = (char *)sys(__NR_brk, brk0 + (1 << 20));
	memset(brk0, 7, 1 << 20);
	say("brk grew %ld KiB\n", (long)(brk1 - brk0) >> 10);
	/* system calls with pointers into the application's own image */
	sys(__NR_write, 1, rodata_msg, slen(rodata_msg));
	fd = sys(__NR_open, "/proc/self/comm", 0);
	r = sys(__NR_read, fd, bss_buf, sizeof(bss_buf) - 1);
	say("read into bss: %ld bytes: %s", r, bss_buf);
	/* bad pointers give EFAULT, as for a user process */
	say("write(NULL) = %ld\n", sys(__NR_write, 1, 0, 4));
	say("write(kernel text) = %ld\n", sys(__NR_write, 1, 0xffffffff81000000UL, 4));
	say("write(kernel hole) = %ld\n", sys(__NR_write, 1, 0xffff800000000000UL, 4));
	/* the image's own addresses pass only while the buffer stays in it */
	say("write(rodata, 128 TiB) = %ld\n", sys(__NR_write, 1, rodata_msg, 1UL << 47));
	say("write(past the user top) = %ld\n", sys(__NR_write, 1, 0x7ffffffff000UL - 8, 16));
	/* past the constants' end: under UKL the image's padding, which the
	 * kernel has freed, so EFAULT; a plain process's access_ok() checks
	 * only the user top, and /dev/null reads nothing */
	r = sys(__NR_open, "/dev/null", 1 /* O_WRONLY */);
	say("write(rodata and 1 MiB on) = %ld\n", sys(__NR_write, r, rodata_msg, 1L << 20));
	sys(__NR_close, r);
	sys(__NR_lseek, fd, 0, 0);
	say("read(kernel data) = %ld\n", sys(__NR_read, fd, 0xffff888000100000UL, 4));
	/* get_user() and put_user() of 4 and 8 bytes on the image and beyond */
	r = sys(__NR_socket, 2 /* AF_INET */, 1 /* SOCK_STREAM */, 0);
	opt_len = sizeof(opt_val);
	rc = sys(__NR_getsockopt, r, 1 /* SOL_SOCKET */, 3 /* SO_TYPE */, &opt_val, &opt_len);
	say("getsockopt(SO_TYPE) into bss = %ld, type %d, len %u\n", rc, opt_val, opt_len);
	say("getsockopt(len in kernel text) = %ld\n",
	    sys(__NR_getsockopt, r, 1, 3, &opt_val, 0xffffffff81000000UL));
	say("ioctl(FIONBIO, rodata) = %ld\n", sys(__NR_ioctl, r, 0x5421 /* FIONBIO */, &one_ro));
	say("ioctl(FIONBIO, kernel text) = %ld\n",
	    sys(__NR_ioctl, r, 0x5421, 0xffffffff81000000UL));
	sys(__NR_close, r);
	r = sys(__NR_time, &time_val);
	say("time into bss: %s\n", r > 0 && r == time_val ? "same" : "differs");
	say("time(kernel data) = %ld\n", sys(__NR_time, 0xffff888000100000UL));
	say("time(rodata) = %ld\n", sys(__NR_time, rodata_msg));
	say("io_setup into bss = %ld\n", sys(__NR_io_setup, 1, &aio_ctx));
	say("io_destroy = %ld\n", sys(__NR_io_destroy, aio_ctx));
	sys(__NR_close, fd);
	say("open(missing) = %ld\n", sys(__NR_open, "/nonexistent", 0));
	say("close(-1) = %ld\n", sys(__NR_close, -1));
	return 0;
}

static long depth(long n)
{
	volatile char frame[256];

	frame[0] = (char)n;
	if (n == 0)
		return frame[0];
	return depth(n - 1) + frame[0];
}

static int case_stack(void)
{
	volatile char big[1 << 20];	/* one large frame, touched bottom first */

	for (long i = 0; i < (long)sizeof(big); i += 4096)
		big[i] = 1;
	say("large frame ok\n");
	say("recursion 20000 deep: %ld\n", depth(20000));
	return big[0] - 1;
}

static int overflow(int n)
{
	volatile char frame[4096];

	frame[0] = (char)n;
	return overflow(n + 1) + frame[0];
}

static volatile int tid_word, thread_ran;
static volatile long spins[2];

static int thread_main(void)
{
	volatile char frame[128 << 10];	/* grows the thread's own stack */

	frame[0] = 1;
	thread_ran = 1 + frame[0] + depth(2000) * 0;
	return 0;
}

/* Both counters reach N only if the timer preempts whoever runs first. */
#define SPINS 2000000
static int spin_thread(void)
{
	while (spins[0] < SPINS || spins[1] < SPINS)
		spins[1]++;
	return 0;
}

/*
 * Raw clone in assembly: the child returns from the system call on its new
 * stack, where fn waits, so no compiler-managed stack slot is involved.
 */
long raw_thread(unsigned long flags, char *stack, volatile int *ptid, volatile int *ctid,
		int (*fn)(void));
__asm__(".text\nraw_thread:\n"
	"  sub $16, %rsi\n  mov %r8, (%rsi)\n  mov %rcx, %r10\n  xor %r8d, %r8d\n"
	"  mov $56, %eax\n" SYSCALL_INSN
	"  test %rax, %rax\n  jnz 1f\n"
	"  mov (%rsp), %rax\n  call *%rax\n"
	"  mov $60, %eax\n  xor %edi, %edi\n" SYSCALL_INSN
	"1: ret\n");

static long spawn(int (*fn)(void))
{
	char *stack = (char *)sys(__NR_mmap, 0, 1 << 20, 3, 0x22, -1, 0);
	unsigned long flags = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
			      CLONE_SYSVSEM | CLONE_PARENT_SETTID | CLONE_CHILD_CLEARTID;

	tid_word = 1;
	return raw_thread(flags, stack + (1 << 20), &tid_word, &tid_word, fn);
}

static void join(void)
{
	while (tid_word)
		sys(__NR_futex, &tid_word, FUTEX_WAIT, tid_word, 0);
}

static int case_thread(void)
{
	long tid = spawn(thread_main);

	join();
	say("thread %s, ran %d\n", tid > 0 ? "created" : "failed", thread_ran);
	/* a shared futex on static data (the image, under UKL) */
	say("futex wake on static data: %ld\n", sys(__NR_futex, &tid_word, FUTEX_WAKE, 1, 0));
	return thread_ran == 2 ? 0 : 1;
}

static int case_preempt(void)
{
	/* Two busy threads on one CPU finish only if the timer preempts them. */
	spawn(spin_thread);
	while (spins[0] < SPINS || spins[1] < SPINS)
		spins[0]++;
	join();
	say("preempt: both threads ran\n");
	return 0;
}

static int case_signals(void)
{
	char c;
	long r;

	on(10 /* SIGUSR1 */, h_flag, 0);
	sys(__NR_kill, sys0(__NR_getpid), 10);
	say("SIGUSR1 handled: %d\n", got);

	sys(__NR_pipe, pipefd);
	on(14 /* SIGALRM */, h_flag, 0);
	sys(__NR_alarm, 1);
	r = sys(__NR_read, pipefd[0], &c, 1);
	say("read interrupted: %ld\n", r);

	on(14, h_write, 0x10000000 /* SA_RESTART */);
	sys(__NR_alarm, 1);
	r = sys(__NR_read, pipefd[0], &c, 1);
	say("read restarted: %ld %c\n", r, c);

	got = 0;
	on(11, h_escape, 0x40000000 /* SA_NODEFER */);
	on(8, h_escape, 0x40000000);
	on(4, h_escape, 0x40000000);
	on(5, h_escape, 0x40000000);
	if (!jset(escape))
		*(volatile int *)0 = 1;
	say("caught SIGSEGV %d\n", got);
	if (!jset(escape))
		say("%d", divide(1, 0));
	say("caught SIGFPE %d\n", got);
	if (!jset(escape))
		__asm__ volatile("ud2");
	say("caught SIGILL %d\n", got);
	if (!jset(escape))
		__asm__ volatile("int3");
	say("caught SIGTRAP %d\n", got);
	return 0;
}

static int case_fork(void)
{
	long pid = sys(__NR_clone, 17 /* SIGCHLD */, 0, 0, 0, 0);
	int status = 0;

	if (pid == 0)
		exit_(7);
	if (pid < 0)
		return say("fork: error %ld\n", pid), 0;
	sys(__NR_wait4, pid, &status, 0, 0);
	say("fork: child exited %d\n", (status >> 8) & 0xff);
	return 0;
}

static int run(int argc, char **argv, char **envp, unsigned long *auxv)
{
	const char *c = argc > 1 ? argv[1] : "info";

	if (seq(c, "info"))
		return case_info(argc, argv, envp, auxv);
	if (seq(c, "memory"))
		return case_memory();
	if (seq(c, "stack"))
		return case_stack();
	if (seq(c, "thread"))
		return case_thread();
	if (seq(c, "preempt"))
		return case_preempt();
	if (seq(c, "signals"))
		return case_signals();
	if (seq(c, "fork"))
		return case_fork();
	if (seq(c, "exit"))
		return argc > 2 ? argv[2][0] - '0' : 0;
	flush();
	if (seq(c, "null"))
		return *(volatile int *)0;
	if (seq(c, "wild"))
		return *(volatile int *)0xdead0000UL;
	if (seq(c, "kernel-hole"))
		return *(volatile int *)0xffff800000000000UL;
	if (seq(c, "const")) {
		static const int constant = 1;

		*(volatile int *)&constant = 2;
		return constant;
	}
	if (seq(c, "read") && argc > 2) {	/* read ADDR (hexadecimal) */
		unsigned long a = 0;

		for (const char *d = argv[2]; *d; d++)
			a = a * 16 + (*d <= '9' ? *d - '0' : (*d | 0x20) - 'a' + 10);
		(void)*(volatile const char *)a;
		return 0;
	}
	if (seq(c, "divide"))
		return divide(1, 0);
	if (seq(c, "ud2"))
		__asm__ volatile("ud2");
	if (seq(c, "int3"))
		__asm__ volatile("int3");
	if (seq(c, "overflow"))
		return overflow(0);
	say("unknown case %s\n", c);
	return 2;
}

/* An IFUNC, resolved by applying the IRELATIVE relocations as libc does */
struct rela { unsigned long offset, info; long addend; };
extern const struct rela __rela_iplt_start[], __rela_iplt_end[];

static int answer_impl(void) { return 42; }
static int (*resolve_answer(void))(void) { return answer_impl; }
int answer(void) __attribute__((ifunc("resolve_answer")));

static int apply_irel(void)
{
	int n = 0;

	for (const struct rela *r = __rela_iplt_start; r < __rela_iplt_end; r++, n++)
		if ((r->info & 0xffffffff) == 37 /* R_X86_64_IRELATIVE */)
			*(unsigned long *)r->offset = ((unsigned long (*)(void))r->addend)();
	return n;
}

int main(int argc, char **argv, char **envp)
{
	char **e = envp;
	int irel = apply_irel();

	if (argc > 1 && seq(argv[1], "ifunc")) {
		say("ifunc: %d relocations, answer %d\n", irel, answer());
		return 0;
	}

	while (*e)
		e++;
	return run(argc, argv, envp, (unsigned long *)(e + 1));
}
