// SPDX-License-Identifier: GPL-2.0
/*
 * ltp-dispatch: many LTP tests in one program, for `ukl conformance ltp`
 * (tools/ukltool/apps/ltp.py), which links it with the tests' objects and one
 * copy of LTP's library, as a UKL application or an ordinary static
 * program.
 *
 * usage: ltp [--timeout SECONDS] TEST...
 *
 * Each TEST runs as LTP's runner runs a test binary: as a process of its
 * own, forked from here before anything of LTP's library ran (so the
 * library starts from its pristine state, as after exec), with argv[0] its
 * name, in a process group and a directory (/tmp/ukl-ltp/TEST) of its own.
 * A test that has not ended after SECONDS (default 300) is killed. After
 * each test every process but init and this one is killed, so that nothing
 * one test left running reaches the next.
 *
 * On standard error, around each test's own output:
 *   ukl-ltp: begin TEST
 *   ukl-ltp: end TEST exit N in S.Ss   (N: LTP's status: TFAIL 1, TBROK 2, TWARN 4, TCONF 32, or'ed)
 *   ukl-ltp: end TEST signal N in S.Ss
 *   ukl-ltp: end TEST timeout S in S.Ss
 * and "ukl-ltp: done" after the last. The tests' table, ltp-tests.h, is
 * generated: one LTP_TEST(NAME, FUNCTION) line per test, FUNCTION being the
 * test's main() renamed.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LTP_TEST(name, fn) int fn(int argc, char **argv);
#include "ltp-tests.h"
#undef LTP_TEST

struct ltp_test {
	const char *name;
	int (*main)(int argc, char **argv);
};

#define LTP_TEST(name, fn) { name, fn },
static const struct ltp_test tests[] = {
#include "ltp-tests.h"
};
#undef LTP_TEST

#define N_TESTS (sizeof(tests) / sizeof(tests[0]))
#define WORK_DIR "/tmp/ukl-ltp"

static const struct ltp_test *find(const char *name)
{
	for (size_t i = 0; i < N_TESTS; i++)
		if (!strcmp(tests[i].name, name))
			return &tests[i];
	return NULL;
}

/* In the forked child: the test, never returning */
static void run_test(const struct ltp_test *t, const sigset_t *mask)
{
	char dir[512];
	char *argv[] = { (char *)t->name, NULL };

	sigprocmask(SIG_SETMASK, mask, NULL);
	setpgid(0, 0);
	snprintf(dir, sizeof(dir), "%s/%s", WORK_DIR, t->name);
	mkdir(dir, 0777);
	if (chdir(dir))
		dprintf(2, "ukl-ltp: cannot enter %s: %s\n", dir, strerror(errno));
	_exit(t->main(1, argv));
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Wait up to TIMEOUT seconds for PID (SIGCHLD blocked); 0 when it ended */
static int wait_for(pid_t pid, double timeout, int *status)
{
	double deadline = now() + timeout;
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		pid_t w = waitpid(pid, status, WNOHANG);
		double left = deadline - now();
		struct timespec ts;

		if (w == pid)
			return 0;
		if (w < 0 && errno != EINTR)
			return 0;
		if (left <= 0)
			return -1;
		ts.tv_sec = (time_t)left;
		ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
		sigtimedwait(&chld, NULL, &ts);
	}
}

/* Kill whatever the test left behind and reap our own children */
static void clean_up_after(pid_t pid)
{
	kill(-pid, SIGKILL);
	kill(-1, SIGKILL);	/* all but init and us */
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

static void run_one(const struct ltp_test *t, double timeout)
{
	sigset_t chld, old;
	int status = 0;
	double start = now();
	pid_t pid;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	sigprocmask(SIG_BLOCK, &chld, &old);
	dprintf(2, "ukl-ltp: begin %s\n", t->name);
	pid = fork();
	if (pid == 0)
		run_test(t, &old);
	if (pid < 0) {
		dprintf(2, "ukl-ltp: cannot fork for %s: %s\n", t->name, strerror(errno));
		dprintf(2, "ukl-ltp: end %s exit 2 in 0.0s\n", t->name);
	} else if (wait_for(pid, timeout, &status)) {
		clean_up_after(pid);
		waitpid(pid, &status, 0);
		dprintf(2, "\nukl-ltp: end %s timeout %.0f in %.1fs\n", t->name, timeout, now() - start);
	} else if (WIFSIGNALED(status)) {
		dprintf(2, "\nukl-ltp: end %s signal %d in %.1fs\n", t->name, WTERMSIG(status), now() - start);
	} else {
		dprintf(2, "\nukl-ltp: end %s exit %d in %.1fs\n", t->name, WEXITSTATUS(status), now() - start);
	}
	if (pid > 0)
		clean_up_after(pid);
	sigprocmask(SIG_SETMASK, &old, NULL);
}

int main(int argc, char **argv)
{
	double timeout = 300;
	int first = 1;

	if (argc > 2 && !strcmp(argv[1], "--timeout")) {
		timeout = atof(argv[2]);
		first = 3;
	}
	if (first >= argc || timeout <= 0) {
		fprintf(stderr, "usage: %s [--timeout SECONDS] TEST...\n", argv[0]);
		return 2;
	}
	for (int i = first; i < argc; i++) {
		if (!find(argv[i])) {
			fprintf(stderr, "%s: no test named %s in this program\n", argv[0], argv[i]);
			return 2;
		}
	}
	/* LTP's settings: plain output, temporary files under /tmp, and
	 * time limits for an emulated machine (see ltp.py) */
	setenv("LTP_COLORIZE_OUTPUT", "0", 0);
	setenv("TMPDIR", "/tmp", 0);
	setenv("LTP_TIMEOUT_MUL", "4", 0);
	setenv("LTP_RUNTIME_MUL", "0.25", 0);
	mkdir(WORK_DIR, 0777);
	for (int i = first; i < argc; i++)
		run_one(find(argv[i]), timeout);
	dprintf(2, "ukl-ltp: done\n");
	return 0;
}
