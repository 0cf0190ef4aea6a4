/*
 * Faults, flags, traps and abuse: an ordinary C program built for
 * --config linux (ring 3) and --config base (ring 0). Each fault class must
 * end the process exactly as Linux ends an ordinary one, and leave the
 * kernel without a complaint.
 *
 *   faults matrix            the CPU's vendor ("cpu-vendor GenuineIntel"),
 *                            then every class in every context, one line
 *                            each: "CLASS CONTEXT STATUS" (STATUS: exit
 *                            code, or 128+N for signal N), each in a
 *                            forked child
 *   faults CLASS [CONTEXT]   one class, in this process (exit status is the
 *                            class's)
 *   faults vfork             vfork+_exit and vfork+execve
 *   faults abuse             what an unprivileged user may do to a UKL
 *                            process: exec it, ptrace it, write its memory
 *   faults storm SECONDS     two threads take page faults and signals
 *                            (and timer interrupts) for SECONDS, while
 *                            the caller sends NMIs
 *   faults lkdtm TEST        run lkdtm's TEST in this task (debugfs must be
 *                            mounted), after a poll() that uses more
 *                            kernel stack than the write that runs it
 *
 * Contexts: main (this thread), thread (a second thread), handler (a
 * signal handler), child (a forked child, whose status is passed on).
 */
#define _GNU_SOURCE
#include <cpuid.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/ptrace.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define KERNEL_HOLE 0xffff800000001000UL	/* never mapped (guard hole) */
#define NONCANONICAL 0x8000000000000000UL

static const char *self;


static int status_code(int st)
{
	return WIFSIGNALED(st) ? 128 + WTERMSIG(st) : WEXITSTATUS(st);
}

/* ---- the classes ---- */

static void null_read(void) { (void)*(volatile int *)0; }
static void wild_read(void) { (void)*(volatile int *)0x123456789000UL; }
static void kernel_read(void) { (void)*(volatile long *)KERNEL_HOLE; }
static void null_call(void) { ((void (*)(void))0)(); }
static void kernel_call(void) { ((void (*)(void))KERNEL_HOLE)(); }
static void noncanonical_call(void) { ((void (*)(void))NONCANONICAL)(); }

static void heap_call(void)
{
	unsigned char *code = malloc(64);

	memset(code, 0xc3, 64);			/* ret */
	((void (*)(void))code)();
}

static void stack_call(void)
{
	unsigned char code[64];

	memset(code, 0xc3, sizeof(code));
	((void (*)(void))(volatile void *)code)();
}

/* System calls with a flag the kernel must not inherit */
static int pipe_roundtrip(void)
{
	char out[64], in[64];
	int fds[2];

	for (unsigned i = 0; i < sizeof(out); i++)
		out[i] = (char)i;
	if (pipe(fds) || write(fds[1], out, sizeof(out)) != sizeof(out) ||
	    read(fds[0], in, sizeof(in)) != sizeof(in))
		return 0;
	close(fds[0]);
	close(fds[1]);
	return !memcmp(in, out, sizeof(in));
}

static void df_syscall(void)
{
	int ok;

	__asm__ volatile("std" ::: "memory");
	ok = (int)getppid() > 0;
	__asm__ volatile("cld" ::: "memory");
	exit(ok && pipe_roundtrip() ? 0 : 1);
}

static void set_flags(unsigned long set, unsigned long clear)
{
	__asm__ volatile("pushfq; orq %0, (%%rsp); andq %1, (%%rsp); popfq"
			 :: "r"(set), "r"(~clear) : "memory", "cc");
}

static void nt_syscall(void)
{
	int ok;

	set_flags(1UL << 14, 0);		/* NT */
	ok = getppid() > 0;
	set_flags(0, 1UL << 14);
	exit(ok && pipe_roundtrip() ? 0 : 1);
}

static void ac_cleared(void)
{
	volatile char *p = malloc(1 << 20);

	set_flags(0, 1UL << 18);		/* AC: no-op in ring 3 */
	for (int i = 0; i < (1 << 20); i += 4096)
		p[i] = 1;			/* fresh pages fault too */
	exit(pipe_roundtrip() ? 0 : 1);
}

static void tf_set(void)
{
	set_flags(1UL << 8, 0);			/* TF: SIGTRAP after the popf */
	__asm__ volatile("nop");
}

/* Single-step with a handler: steps through system calls, then stops */
static volatile int steps;

static void on_step(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;

	(void)sig; (void)si;
	if (++steps >= 300)
		uc->uc_mcontext.gregs[REG_EFL] &= ~0x100;
}

static void tf_stepped(void)
{
	struct sigaction sa = { .sa_sigaction = on_step, .sa_flags = SA_SIGINFO };

	sigaction(SIGTRAP, &sa, NULL);
	set_flags(1UL << 8, 0);
	while (steps < 300)
		(void)getppid();
	exit(steps == 300 && pipe_roundtrip() ? 0 : 1);
}

static void on_usr2(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;

	(void)sig; (void)si;
	uc->uc_mcontext.gregs[REG_RIP] = (greg_t)NONCANONICAL;
}

static void sigreturn_noncanonical(void)
{
	struct sigaction sa = { .sa_sigaction = on_usr2, .sa_flags = SA_SIGINFO };

	sigaction(SIGUSR2, &sa, NULL);
	raise(SIGUSR2);
}

static void on_usr1_nostrict(int sig, siginfo_t *si, void *uc_)
{
	ucontext_t *uc = uc_;

	(void)sig; (void)si;
	uc->uc_flags &= ~0x4UL;	/* UC_STRICT_RESTORE_SS, as in a frame the program built */
}

/* rt_sigreturn without UC_STRICT_RESTORE_SS: the interrupted code goes on */
static void sigreturn_no_strict_ss(void)
{
	struct sigaction sa = { .sa_sigaction = on_usr1_nostrict, .sa_flags = SA_SIGINFO };

	sigaction(SIGUSR1, &sa, NULL);
	raise(SIGUSR1);
	exit(pipe_roundtrip() ? 0 : 1);
}

/*
 * The tracer's end: make the stopped child's register at @off
 * non-canonical, let it go, pass on the signal it reports (its SIGSEGV),
 * and exit with the child's status
 */
static void poke_and_finish(pid_t pid, size_t off)
{
	int st;

	if (ptrace(PTRACE_POKEUSER, pid, off, NONCANONICAL))
		exit(3);
	ptrace(PTRACE_CONT, pid, 0, 0);
	waitpid(pid, &st, 0);
	if (WIFSTOPPED(st)) {			/* the SIGSEGV, reported to us */
		ptrace(PTRACE_CONT, pid, 0, WSTOPSIG(st));
		waitpid(pid, &st, 0);
	}
	exit(status_code(st));
}

/* A child stops; its tracer (root) points its instruction pointer nowhere */
static void ptrace_noncanonical(void)
{
	int st;
	pid_t pid = fork();

	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		raise(SIGSTOP);
		_exit(0);
	}
	waitpid(pid, &st, 0);
	if (!WIFSTOPPED(st))
		exit(2);
	poke_and_finish(pid, offsetof(struct user, regs.rip));
}

/*
 * A tracer (root) sets a child's %rcx to a non-canonical value at a system
 * call's exit. %rcx is clobbered by SYSCALL, so on Linux the child goes on;
 * a UKL child returns through %rcx (the emulated SYSCALL's return address),
 * so it gets SIGSEGV there, and the kernel must not mind.
 */
static void ptrace_syscall_rcx(void)
{
	int st, stops = 0;
	pid_t pid = fork();

	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		raise(SIGSTOP);
		(void)getppid();
		_exit(0);
	}
	waitpid(pid, &st, 0);
	if (!WIFSTOPPED(st))
		exit(2);
	/* The stops after SIGSTOP: getppid's entry, then its exit */
	while (stops < 2) {
		ptrace(PTRACE_SYSCALL, pid, 0, 0);
		waitpid(pid, &st, 0);
		if (!WIFSTOPPED(st) || WSTOPSIG(st) != SIGTRAP)
			exit(4);
		stops++;
	}
	poke_and_finish(pid, offsetof(struct user, regs.rcx));
}

/* A tracer (root) single-steps a child through system calls, then lets it go */
static void ptrace_stepped(void)
{
	int st, steps = 0;
	pid_t pid = fork();

	if (pid == 0) {
		ptrace(PTRACE_TRACEME, 0, 0, 0);
		raise(SIGSTOP);
		for (int i = 0; i < 100; i++)
			(void)getppid();
		_exit(0);
	}
	waitpid(pid, &st, 0);
	for (; steps < 200 && WIFSTOPPED(st); steps++) {
		if (steps > 0 && WSTOPSIG(st) != SIGTRAP)
			exit(4);
		ptrace(PTRACE_SINGLESTEP, pid, 0, 0);
		waitpid(pid, &st, 0);
	}
	if (steps != 200)
		exit(5);
	ptrace(PTRACE_CONT, pid, 0, 0);
	waitpid(pid, &st, 0);
	exit(status_code(st));
}

static void divide_error(void)
{
	__asm__ volatile("xorl %%ecx, %%ecx\n\tmovl $1, %%eax\n\tcltd\n\tidivl %%ecx"
			 ::: "eax", "ecx", "edx");
}
static void ud2(void) { __asm__ volatile("ud2"); }
static void int3(void) { __asm__ volatile("int3"); }
static void icebp(void) { __asm__ volatile(".byte 0xf1"); }

static volatile int forever = 1;

static int recurse(int n)
{
	volatile char frame[4096];

	frame[0] = (char)n;
	return forever ? recurse(n + 1) + frame[0] : 0;
}

static void stack_overflow(void) { recurse(0); }
static void do_abort(void) { abort(); }

/*
 * The bytes 0f 05 (SYSCALL) hidden inside a MOV: exit_group(7) on Linux; the
 * UKL application must call the entry, so there it is an invalid opcode.
 */
static void raw_syscall(void)
{
	__asm__ volatile("movl $231, %%eax\n\tmovl $7, %%edi\n\tjmp 1f+1\n"
			 "1:\tmovl $0x050f, %%ecx\n\tud2" ::: "rax", "rdi", "rcx", "memory");
}

/*
 * SYSENTER (hidden from ukl-cc's check, as above): on AMD CPUs an invalid
 * opcode in long mode; on Intel CPUs #GP where MSR_IA32_SYSENTER_CS is 0
 * (no IA32_EMULATION, or a UKL task), else a 32-bit system call entry
 */
static void sysenter(void)
{
	__asm__ volatile("jmp 1f+2\n1:\tmovw $0x340f, %%cx\n\tud2" ::: "rcx", "memory");
}

/*
 * INT $0x80 (hidden from ukl-cc's check, as above): exit(7) as a 32-bit
 * system call where IA32_EMULATION runs one for a 64-bit process, but
 * SIGSEGV in the UKL application, which has no 32-bit ABI; #GP (SIGSEGV)
 * in ring 3 without IA32_EMULATION
 */
static void int80(void)
{
	__asm__ volatile("movl $1, %%eax\n\tmovl $7, %%ebx\n\tjmp 1f+2\n"
			 "1:\tmovw $0x80cd, %%cx\n\tud2" ::: "rax", "rbx", "rcx", "memory");
}

static const struct fault {
	const char *name;
	void (*fn)(void);
} faults[] = {
	{ "null-read", null_read },
	{ "wild-read", wild_read },
	{ "kernel-read", kernel_read },
	{ "null-call", null_call },
	{ "heap-call", heap_call },
	{ "stack-call", stack_call },
	{ "kernel-call", kernel_call },
	{ "noncanonical-call", noncanonical_call },
	{ "df-syscall", df_syscall },
	{ "nt-syscall", nt_syscall },
	{ "ac-cleared", ac_cleared },
	{ "tf-set", tf_set },
	{ "tf-stepped", tf_stepped },
	{ "sigreturn-noncanonical", sigreturn_noncanonical },
	{ "sigreturn-no-strict-ss", sigreturn_no_strict_ss },
	{ "ptrace-noncanonical", ptrace_noncanonical },
	{ "ptrace-syscall-rcx", ptrace_syscall_rcx },
	{ "ptrace-stepped", ptrace_stepped },
	{ "divide-error", divide_error },
	{ "ud2", ud2 },
	{ "int3", int3 },
	{ "icebp", icebp },
	{ "stack-overflow", stack_overflow },
	{ "abort", do_abort },
	{ "raw-syscall", raw_syscall },
	{ "sysenter", sysenter },
	{ "int80", int80 },
};

#define NFAULTS (sizeof(faults) / sizeof(faults[0]))

/* ---- the contexts ---- */

static const struct fault *current_fault;

static void *thread_fn(void *arg)
{
	(void)arg;
	current_fault->fn();
	return NULL;
}

static void on_usr1(int sig) { (void)sig; current_fault->fn(); }

/* Run @f in context @ctx; returns only if the class did not end us */
static void run_in(const struct fault *f, const char *ctx)
{
	current_fault = f;
	if (!strcmp(ctx, "main")) {
		f->fn();
	} else if (!strcmp(ctx, "thread")) {
		pthread_t t;

		pthread_create(&t, NULL, thread_fn, NULL);
		pthread_join(t, NULL);
	} else if (!strcmp(ctx, "handler")) {
		signal(SIGUSR1, on_usr1);
		raise(SIGUSR1);
	} else if (!strcmp(ctx, "child")) {
		int st;
		pid_t pid = fork();

		if (pid == 0) {
			f->fn();
			_exit(0);
		}
		waitpid(pid, &st, 0);
		exit(status_code(st));
	} else {
		fprintf(stderr, "unknown context %s\n", ctx);
		exit(2);
	}
	exit(0);
}

static const struct fault *find(const char *name)
{
	for (unsigned i = 0; i < NFAULTS; i++)
		if (!strcmp(faults[i].name, name))
			return &faults[i];
	return NULL;
}

static int matrix(void)
{
	static const char *const ctxs[] = { "main", "thread", "handler", "child" };
	unsigned int eax, ebx, ecx, edx;
	char vendor[13] = "";

	/* SYSENTER's fate depends on it: #UD on AMD, valid on Intel */
	if (__get_cpuid(0, &eax, &ebx, &ecx, &edx)) {
		memcpy(vendor, &ebx, 4);
		memcpy(vendor + 4, &edx, 4);
		memcpy(vendor + 8, &ecx, 4);
	}
	printf("cpu-vendor %s\n", vendor);
	for (unsigned i = 0; i < NFAULTS; i++) {
		for (unsigned c = 0; c < 4; c++) {
			int st;
			pid_t pid;

			fflush(stdout);
			pid = fork();
			if (pid == 0)
				run_in(&faults[i], ctxs[c]);
			waitpid(pid, &st, 0);
			printf("%s %s %d\n", faults[i].name, ctxs[c], status_code(st));
		}
	}
	return 0;
}

/* ---- vfork ---- */

/* A frame deeper than the parent's, for a vfork child to write */
static int recurse_depth_probe(void)
{
	volatile char pad[2048];

	pad[0] = 5;
	return pad[0] + (int)getppid() * 0;
}

static int vfork_cases(void)
{
	volatile int local = 17;
	int st;
	pid_t pid = vfork();

	if (pid == 0)
		_exit(3);
	waitpid(pid, &st, 0);
	printf("vfork+_exit: status %d, local %d\n", status_code(st), local);

	pid = vfork();
	if (pid == 0) {
		execl(self, self, "noop", (char *)NULL);
		_exit(99);
	}
	waitpid(pid, &st, 0);
	printf("vfork+execve: status %d, local %d\n", status_code(st), local);

	/* A child that calls deeper than its parent, then exits */
	pid = vfork();
	if (pid == 0) {
		char buf[64];

		snprintf(buf, sizeof(buf), "%d", recurse_depth_probe());
		_exit(buf[0] == '5' ? 4 : 5);
	}
	waitpid(pid, &st, 0);
	printf("vfork+calls: status %d, local %d\n", status_code(st), local);
	return 0;
}

/* ---- abuse by an unprivileged user ---- */

static void become_nobody(void)
{
	if (setgid(65534) || setuid(65534)) {
		perror("setuid");
		_exit(90);
	}
}

static const char *outcome(long ret)
{
	static char buf[64];

	if (ret >= 0)
		return "allowed";
	snprintf(buf, sizeof(buf), "refused (%s)", strerrorname_np(errno));
	return buf;
}

static int abuse(void)
{
	int ready[2], st;
	pid_t victim, attacker;
	char c;
	long *word = malloc(sizeof(*word));	/* same address in every child */

	/* exec of the application (or this program) as nobody */
	attacker = fork();
	if (attacker == 0) {
		become_nobody();
		execl(self, self, "noop", (char *)NULL);
		printf("exec as nobody: %s\n", outcome(-1));
		_exit(0);
	}
	waitpid(attacker, &st, 0);
	if (status_code(st) == 42)
		printf("exec as nobody: allowed\n");

	/* A UKL process that dropped to nobody and asked to be dumpable */
	if (pipe(ready))
		return 1;
	victim = fork();
	if (victim == 0) {
		become_nobody();
		prctl(PR_SET_DUMPABLE, 1);
		write(ready[1], "x", 1);
		for (;;)
			pause();
	}
	read(ready[0], &c, 1);
	attacker = fork();
	if (attacker == 0) {
		struct iovec local = { word, sizeof(*word) }, remote = { word, sizeof(*word) };
		char path[64];
		long r;
		int fd;

		become_nobody();
		r = ptrace(PTRACE_ATTACH, victim, 0, 0);
		printf("ptrace attach as nobody: %s\n", outcome(r));
		if (r == 0) {
			waitpid(victim, NULL, 0);
			ptrace(PTRACE_DETACH, victim, 0, 0);
		}
		r = process_vm_writev(victim, &local, 1, &remote, 1, 0);
		printf("process_vm_writev as nobody: %s\n", outcome(r));
		snprintf(path, sizeof(path), "/proc/%d/mem", victim);
		fd = open(path, O_RDWR);
		printf("/proc/PID/mem write as nobody: %s\n", outcome(fd));
		_exit(0);
	}
	waitpid(attacker, &st, 0);
	kill(victim, SIGKILL);
	waitpid(victim, &st, 0);
	return 0;
}

/* ---- faults, signals and interrupts while NMIs arrive ---- */

static volatile long storm_signals;
static double storm_end;

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void on_storm_signal(int sig) { (void)sig; storm_signals++; }

static void *storm_thread(void *arg)
{
	long faults = 0;

	(void)arg;
	while (now() < storm_end) {
		char *p = mmap(NULL, 64 << 10, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		for (int i = 0; i < (64 << 10); i += 4096, faults++)
			p[i] = 1;
		munmap(p, 64 << 10);
		raise(SIGUSR1);
	}
	return (void *)faults;
}

static int storm(double seconds)
{
	pthread_t t[2];
	long faults = 0;
	void *r;

	signal(SIGUSR1, on_storm_signal);
	storm_end = now() + seconds;
	for (int i = 0; i < 2; i++)
		pthread_create(&t[i], NULL, storm_thread, NULL);
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], &r);
		faults += (long)r;
	}
	printf("storm: %ld page faults, %ld signals\n", faults, (long)storm_signals);
	return faults > 0 && storm_signals > 0 ? 0 : 1;
}


static int lkdtm(const char *test)
{
	static const char direct[] = "/sys/kernel/debug/provoke-crash/DIRECT";
	struct pollfd pfd[8];
	int fd;

	for (unsigned i = 0; i < 8; i++)
		pfd[i] = (struct pollfd){ .fd = -1 };
	poll(pfd, 8, 1);
	fd = open(direct, O_WRONLY);
	if (fd < 0 || write(fd, test, strlen(test)) < 0) {
		perror(direct);
		return 1;
	}
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	static char exe[4096];
	const struct fault *f;
	ssize_t n;

	setvbuf(stdout, NULL, _IOLBF, 0);
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	self = n > 0 ? exe : argv[0];
	if (argc < 2 || !strcmp(argv[1], "matrix"))
		return matrix();
	if (!strcmp(argv[1], "noop"))
		return 42;
	if (!strcmp(argv[1], "vfork"))
		return vfork_cases();
	if (!strcmp(argv[1], "abuse"))
		return abuse();
	if (!strcmp(argv[1], "storm") && argc > 2)
		return storm(atof(argv[2]));
	if (!strcmp(argv[1], "lkdtm") && argc > 2)
		return lkdtm(argv[2]);
	f = find(argv[1]);
	if (!f) {
		fprintf(stderr, "faults: unknown class %s\n", argv[1]);
		return 2;
	}
	run_in(f, argc > 2 ? argv[2] : "main");
	return 0;
}
