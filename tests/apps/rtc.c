/*
 * rtc: run to completion (runtime/ukl.h, ukl_rtc_begin()/ukl_rtc_end()),
 * as the application sees it. Every mode prints lines the test compares.
 *
 *   rtc calls     begin, end, refusals; a new thread or child does not run
 *                 to completion
 *   rtc preempt   a thread and a competitor pinned to one CPU: the competitor
 *                 makes progress while the thread spins normally, none while
 *                 it runs to completion; timer interrupts still arrive
 *   rtc bound     a run that spins past its bound is preempted and its end
 *                 says -ETIME
 *   rtc signal    a timer signal waits for the end; a SIGSEGV does not; a
 *                 blocking read delivers a waiting signal at once, raise()
 *                 before it returns; a signal that a handler left pending
 *                 (raised again in it, held by its sa_mask) runs when the
 *                 handler returns, one sigprocmask() unblocks before it
 *                 returns, in a run as outside one
 *   rtc nohz      a handled SIGTERM sent to a run spinning alone on CPU 1
 *                 (nohz_full in the debug profile's test) waits for the
 *                 run's bound, not longer; CPU 1's timer interrupts
 *                 meanwhile show whether its tick stopped
 *   rtc kill      SIGKILL ends a child that runs to completion at once, not
 *                 at its bound
 *   rtc all       all of them, calls to nohz, then kill (one boot)
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "ukl.h"

static void show(const char *what, long v)
{
	if (v < 0)
		printf("%s: %s\n", what, strerror((int)-v));
	else
		printf("%s: %ld\n", what, v);
}

static long long now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

/* The longest time the last spin() went without running: preemptions */
static long long longest_gap;

/* Spin for @us without a system call (clocks are read in the application) */
static void spin(long long us)
{
	long long t = now_us(), end = t + us, last = t;

	longest_gap = 0;
	while (t < end) {
		t = now_us();
		if (t - last > longest_gap)
			longest_gap = t - last;
		last = t;
	}
}

static void pin(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set)) {
		perror("sched_setaffinity");
		exit(1);
	}
}

static void *thread_end(void *arg)
{
	(void)arg;
	show("new thread ends", ukl_rtc_end());
	return NULL;
}

static int calls(void)
{
	pthread_t t;
	pid_t pid;
	long r;
	int st;

	show("end before begin", ukl_rtc_end());
	show("begin 0", ukl_rtc_begin(0));
	show("begin -5", ukl_rtc_begin(-5));
	show("begin 500000", ukl_rtc_begin(500000));
	show("begin again", ukl_rtc_begin(500000));
	show("end", ukl_rtc_end());
	show("end again", ukl_rtc_end());
	show("begin 3000000", ukl_rtc_begin(3000000));
	pthread_create(&t, NULL, thread_end, NULL);
	pthread_join(t, NULL);
	pid = fork();
	if (pid == 0) {
		show("child ends", ukl_rtc_end());
		_exit(0);
	}
	waitpid(pid, &st, 0);
	/* In time or not (fork is slow on a debug kernel): it was running */
	r = ukl_rtc_end();
	show("end of a run", r == -ETIME ? 0 : r);
	show("begin 2000", ukl_rtc_begin(2000));
	spin(20000);
	show("end after the bound", ukl_rtc_end());
	return 0;
}

static volatile unsigned long progress;
static volatile int competing;

static void *competitor(void *arg)
{
	(void)arg;
	pin(0);
	while (competing)
		progress++;
	return NULL;
}

/* Local timer interrupts on @cpu so far (/proc/interrupts, "LOC:") */
static long cpu_timer_interrupts(int cpu)
{
	char line[4096], *p, *q;
	long n = -1;
	FILE *f = fopen("/proc/interrupts", "r");

	while (f && fgets(line, sizeof(line), f)) {
		p = strstr(line, "LOC:");
		if (!p || strspn(line, " ") != (size_t)(p - line))
			continue;
		for (p += 4; cpu >= 0; cpu--, p = q) {
			n = strtol(p, &q, 10);
			if (q == p) {
				n = -1;
				break;
			}
		}
		break;
	}
	if (f)
		fclose(f);
	return n;
}

static long timer_interrupts(void)
{
	return cpu_timer_interrupts(0);
}

/* How far the competitor got while this thread spun @us, in rtc or not */
static unsigned long contend(long long us, long rtc_us, long *end)
{
	unsigned long before, after;

	if (rtc_us)
		ukl_rtc_begin(rtc_us);
	before = progress;
	spin(us);
	after = progress;
	if (rtc_us)
		*end = ukl_rtc_end();
	return after - before;
}

static int preempt(int bound)
{
	pthread_t t;
	long end = 0, irqs;
	long long gap;
	unsigned long p;

	pin(0);
	competing = 1;
	pthread_create(&t, NULL, competitor, NULL);
	while (!progress)
		sched_yield();
	if (bound) {
		p = contend(300000, 50000, &end);
		printf("competitor ran during a run past its bound: %s\n", p ? "yes" : "no");
		show("end", end);
	} else {
		p = contend(300000, 0, &end);
		gap = longest_gap;
		printf("competitor ran while spinning normally: %s\n", p ? "yes" : "no");
		irqs = timer_interrupts();
		p = contend(300000, 1000000, &end);
		irqs = timer_interrupts() - irqs;
		printf("competitor ran during the run: %s\n", p ? "yes" : "no");
		printf("timer interrupts during the run: %s\n", irqs > 10 ? "yes" : "no");
		show("end", end);
		printf("GAP longest pause while spinning normally %lld us, during the run %lld us\n",
		       gap, longest_gap);
	}
	competing = 0;
	pthread_join(t, NULL);
	return 0;
}

static volatile sig_atomic_t alarms;
static sigjmp_buf segv_jmp;

static void on_alarm(int sig)
{
	(void)sig;
	alarms++;
}

static void on_segv(int sig)
{
	(void)sig;
	siglongjmp(segv_jmp, 1);
}

static void alarm_in(long us)
{
	struct itimerval it = { .it_value = { .tv_sec = 0, .tv_usec = us } };

	setitimer(ITIMER_REAL, &it, NULL);
}

static void tgkill_self(int sig)
{
	syscall(SYS_tgkill, getpid(), gettid(), sig);
}

static volatile sig_atomic_t usr1s, usr2s;

/*
 * The first SIGUSR1 raises SIGUSR1 again (blocked while its handler runs)
 * and SIGUSR2 (held by the handler's sa_mask): both stay pending until
 * rt_sigreturn restores the mask, whose exit delivers them.
 */
static void on_usr1(int sig)
{
	(void)sig;
	if (!usr1s++) {
		tgkill_self(SIGUSR1);
		tgkill_self(SIGUSR2);
	}
}

static void on_usr2(int sig)
{
	(void)sig;
	usr2s++;
}

/* SIGUSR1's and SIGUSR2's handlers that ran before tgkill(SIGUSR1) returned */
static void left_pending(int rtc, int *u1, int *u2)
{
	usr1s = usr2s = 0;
	if (rtc)
		ukl_rtc_begin(1000000);
	tgkill_self(SIGUSR1);
	*u1 = usr1s;
	*u2 = usr2s;
	if (rtc)
		ukl_rtc_end();
}

/* SIGUSR2's handlers that ran while it was blocked, and by its unblocking */
static void unblocked(int rtc, int *blocked, int *after)
{
	sigset_t set;

	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	usr2s = 0;
	if (rtc)
		ukl_rtc_begin(1000000);
	sigprocmask(SIG_BLOCK, &set, NULL);
	tgkill_self(SIGUSR2);
	*blocked = usr2s;
	sigprocmask(SIG_UNBLOCK, &set, NULL);
	*after = usr2s;
	if (rtc)
		ukl_rtc_end();
}

static int signals(void)
{
	struct sigaction sa = { .sa_handler = on_alarm };
	int fds[2], during;
	volatile int segv = 0;
	char c;
	long end;
	ssize_t n;

	sigaction(SIGALRM, &sa, NULL);	/* no SA_RESTART */
	sa.sa_handler = on_segv;
	sigaction(SIGSEGV, &sa, NULL);

	/* A timer signal waits for the end */
	ukl_rtc_begin(1000000);
	alarm_in(20000);
	spin(200000);
	during = alarms;
	end = ukl_rtc_end();
	printf("timer signal handled during the run: %d, by the end's return: %d\n", during, alarms);
	show("end", end);

	/* A fault's signal cannot wait */
	ukl_rtc_begin(1000000);
	if (!sigsetjmp(segv_jmp, 1))
		*(volatile int *)0 = 1;
	else
		segv = 1;
	show("SIGSEGV handled during the run", segv);
	show("end", ukl_rtc_end());

	/* A waiting signal interrupts a blocking read, and is delivered */
	if (pipe(fds))
		return 1;
	alarms = 0;
	ukl_rtc_begin(1000000);
	alarm_in(20000);
	spin(100000);
	during = alarms;
	n = read(fds[0], &c, 1);
	printf("read during the run: %zd %s, handled before: %d, after: %d\n", n,
	       n < 0 ? strerror(errno) : "", during, alarms);
	show("end", ukl_rtc_end());

	/* A system call's exit delivers: raise() before it returns */
	alarms = 0;
	ukl_rtc_begin(1000000);
	raise(SIGALRM);
	during = alarms;
	show("end", ukl_rtc_end());
	printf("raise during the run handled before it returned: %d\n", during);

	/* rt_sigreturn's exit delivers what the handler left pending */
	sa.sa_handler = on_usr2;
	sigaction(SIGUSR2, &sa, NULL);
	sa.sa_handler = on_usr1;
	sigaddset(&sa.sa_mask, SIGUSR2);
	sigaction(SIGUSR1, &sa, NULL);
	{
		int out1, out2, in1, in2;

		left_pending(0, &out1, &out2);
		left_pending(1, &in1, &in2);
		printf("SIGUSR1 and SIGUSR2 left pending by the handler, handled before tgkill returned: "
		       "outside a run %d %d, during the run %d %d\n", out1, out2, in1, in2);
		unblocked(0, &out1, &out2);
		unblocked(1, &in1, &in2);
		printf("SIGUSR2 handled while blocked, by sigprocmask's return: "
		       "outside a run %d %d, during the run %d %d\n", out1, out2, in1, in2);
	}
	return 0;
}

static int kill_child(void)
{
	long long start;
	pid_t pid;
	int st;

	pin(0);
	pid = fork();
	if (pid == 0) {
		pin(1);
		ukl_rtc_begin(1000000);
		for (;;)
			;
	}
	usleep(100000);
	start = now_us();
	kill(pid, SIGKILL);
	waitpid(pid, &st, 0);
	printf("child killed: %s, within 300 ms: %s\n",
	       WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL ? "yes" : "no",
	       now_us() - start < 300000 ? "yes" : "no");
	return 0;
}

static volatile long long term_at;
static volatile int nohz_ready;
static long long nohz_begin;
static int nohz_full;

/* The run's bound, its spin and the slack of the SIGTERM's handling, in us */
#define NOHZ_BOUND 200000
#define NOHZ_SPIN 1000000
#define NOHZ_SLACK 400000

static void on_term(int sig)
{
	(void)sig;
	term_at = now_us();
}

/* Spin alone on CPU 1 in a run; arg: its timer interrupts meanwhile */
static void *nohz_spinner(void *arg)
{
	long *irqs = arg;
	int i;

	pin(1);
	/* Where nohz_full, wait (at most 2 s) until the tick has stopped */
	for (i = 0; i < 40; i++) {
		*irqs = cpu_timer_interrupts(1);
		spin(50000);
		if (!nohz_full || cpu_timer_interrupts(1) - *irqs <= 1)
			break;
	}
	*irqs = cpu_timer_interrupts(1);
	nohz_begin = now_us();
	ukl_rtc_begin(NOHZ_BOUND);
	nohz_ready = 1;
	spin(NOHZ_SPIN);
	ukl_rtc_end();
	*irqs = cpu_timer_interrupts(1) - *irqs;
	return NULL;
}

/*
 * A handled SIGTERM to a run alone on CPU 1 waits for the bound, and is
 * handled within NOHZ_SLACK of the bound (or of its sending, if later:
 * then the main thread ran late and the case proves nothing, so it is
 * tried again, at most 3 times). Without the bound's timer it would wait
 * for the end of the spin where the tick stops (nohz_full).
 */
static int nohz(void)
{
	struct sigaction sa = { .sa_handler = on_term };
	char cpus[64] = "none";
	long long sent_at, bound, late = 0;
	int tries;
	pthread_t t;
	long irqs;
	FILE *f;

	f = fopen("/sys/devices/system/cpu/nohz_full", "r");
	if (f) {
		if (fscanf(f, "%63s", cpus) != 1)
			strcpy(cpus, "?");
		fclose(f);
	}
	nohz_full = strcmp(cpus, "none") && strcmp(cpus, "(null)") && strcmp(cpus, "?");
	pin(0);
	sigaction(SIGTERM, &sa, NULL);
	for (tries = 1; ; tries++) {
		term_at = 0;
		nohz_ready = 0;
		pthread_create(&t, NULL, nohz_spinner, &irqs);
		while (!nohz_ready)
			usleep(1000);
		usleep(10000);
		sent_at = now_us();
		pthread_kill(t, SIGTERM);
		pthread_join(t, NULL);
		bound = nohz_begin + NOHZ_BOUND;
		if (sent_at < bound || tries == 3)
			break;
	}
	if (term_at)
		late = term_at - (sent_at > bound ? sent_at : bound);
	printf("SIGTERM to a run alone on CPU 1 waited for its bound: %s, handled within %d ms of it: %s\n",
	       term_at >= bound ? "yes" : "no", NOHZ_SLACK / 1000,
	       term_at && late < NOHZ_SLACK ? "yes" : "no");
	printf("NOHZ full CPUs %s, CPU 1 timer interrupts during the run %ld, SIGTERM sent after %lld us, handled %lld us after the bound, tries %d%s\n",
	       cpus, irqs, sent_at - nohz_begin, term_at - bound, tries,
	       sent_at < bound ? "" : " (all sent after the bound: inconclusive)");
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "calls";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(mode, "calls"))
		return calls();
	if (!strcmp(mode, "preempt"))
		return preempt(0);
	if (!strcmp(mode, "bound"))
		return preempt(1);
	if (!strcmp(mode, "signal"))
		return signals();
	if (!strcmp(mode, "kill"))
		return kill_child();
	if (!strcmp(mode, "nohz"))
		return nohz();
	if (!strcmp(mode, "all"))
		return calls() || preempt(0) || preempt(1) || signals() || nohz() || kill_child();
	fprintf(stderr, "rtc: unknown mode %s\n", mode);
	return 2;
}
