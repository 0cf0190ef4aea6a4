/*
 * opts: the UKL options of a thread (runtime/ukl.h, ukl_opts()), as the
 * application sees them, and system calls that make work pending while
 * they bypass the entry code.
 *
 *   opts show        print the options this process started with
 *   opts calls       set, clear and refuse options; per thread; inherited
 *   opts work        a signal, made pending by a call, is handled before the
 *                    call returns; a blocked read is interrupted and
 *                    restarted; many calls from two threads
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ukl.h"

static void show(const char *who, long v)
{
	if (v < 0)
		printf("%s: %s\n", who, strerror((int)-v));
	else
		printf("%s: %ld\n", who, v);
}

static void *thread_opts(void *arg)
{
	(void)arg;
	show("thread inherits", ukl_opts(0, 0));
	ukl_opts(0, UKL_OPT_BYP);
	show("thread cleared", ukl_opts(0, 0));
	return NULL;
}

static int calls(void)
{
	pthread_t t;
	pid_t pid;
	int st;

	show("start", ukl_opts(0, 0));
	show("set returns old", ukl_opts(UKL_OPT_BYP, 0));
	show("after set", ukl_opts(0, 0));
	show("unknown bit", ukl_opts(0x80, 0));
	show("after unknown", ukl_opts(0, 0));
	pthread_create(&t, NULL, thread_opts, NULL);
	pthread_join(t, NULL);
	show("main keeps", ukl_opts(0, 0));
	pid = fork();
	if (pid == 0) {
		show("child inherits", ukl_opts(0, 0));
		_exit(0);
	}
	waitpid(pid, &st, 0);
	show("clear returns old", ukl_opts(0, UKL_OPT_BYP));
	show("after clear", ukl_opts(0, 0));
	return 0;
}

static volatile sig_atomic_t handled;

static void on_signal(int sig)
{
	(void)sig;
	handled++;
}

static void *caller(void *arg)
{
	long n = 0;

	for (int i = 0; i < 200000; i++)
		n += syscall(SYS_getppid) == getppid();
	*(long *)arg = n;
	return NULL;
}

static int work(void)
{
	struct sigaction sa = { .sa_handler = on_signal };
	struct itimerval it = { .it_value = { 0, 50000 } };
	long a = 0, b = 0;
	pthread_t t;
	int fds[2];
	char c = '?';
	ssize_t r;
	int seen;

	show("opts", ukl_opts(0, 0));
	sigaction(SIGUSR1, &sa, NULL);
	for (int i = 0; i < 1000; i++) {
		seen = handled;
		kill(getpid(), SIGUSR1);
		if (handled != seen + 1) {
			printf("signal %d not handled before kill() returned\n", i);
			return 1;
		}
	}
	printf("signals handled before the call returned: %d\n", (int)handled);

	/* A blocked read: without SA_RESTART EINTR, with it restarted */
	pipe(fds);
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	r = read(fds[0], &c, 1);
	printf("read without SA_RESTART: %zd %s\n", r, strerror(errno));
	sa.sa_flags = SA_RESTART;
	sigaction(SIGALRM, &sa, NULL);
	setitimer(ITIMER_REAL, &it, NULL);
	if (fork() == 0) {
		usleep(200000);
		write(fds[1], "x", 1);
		_exit(0);
	}
	r = read(fds[0], &c, 1);
	printf("read with SA_RESTART: %zd %c, handler ran %d times\n", r, c, (int)handled);
	wait(NULL);

	pthread_create(&t, NULL, caller, &a);
	caller(&b);
	pthread_join(t, NULL);
	printf("calls from two threads: %ld\n", a + b);
	return 0;
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "show";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(what, "show")) {
		show("opts", ukl_opts(0, 0));
		return 0;
	}
	if (!strcmp(what, "calls"))
		return calls();
	if (!strcmp(what, "work"))
		return work();
	fprintf(stderr, "usage: opts show|calls|work\n");
	return 2;
}
