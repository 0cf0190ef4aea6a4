/*
 * What a process costs: fork()+_exit()+waitpid(), and exec of this
 * program itself (which exits at once) from a forked child, against one
 * getppid() system call. Under `ukl run --icount` one nanosecond is one
 * guest instruction, so the numbers of two configurations compare exactly.
 *
 *   ./ukl build guest/bench/fork.c --config base -o out/fb && ./ukl run out/fb --icount
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	enum { N = 100 };
	double t0, fork_ns, exec_ns, call_ns;
	int st;

	if (argc > 1 && !strcmp(argv[1], "child"))
		return 0;
	t0 = now();
	for (int i = 0; i < 10 * N; i++)
		getppid();
	call_ns = (now() - t0) / (10 * N);
	t0 = now();
	for (int i = 0; i < N; i++) {
		pid_t pid = fork();

		if (pid == 0)
			_exit(0);
		waitpid(pid, &st, 0);
	}
	fork_ns = (now() - t0) / N;
	t0 = now();
	for (int i = 0; i < N; i++) {
		pid_t pid = fork();

		if (pid == 0) {
			execl("/proc/self/exe", argv[0], "child", (char *)NULL);
			_exit(127);
		}
		waitpid(pid, &st, 0);
		if (!WIFEXITED(st) || WEXITSTATUS(st))
			return 1;
	}
	exec_ns = (now() - t0) / N - fork_ns;
	printf("getppid: %.0f ns\n", call_ns);
	printf("fork+exit+wait: %.0f ns (%.0f system calls)\n", fork_ns, fork_ns / call_ns);
	printf("exec of the program, to its exit: %.0f ns (%.0f system calls)\n", exec_ns, exec_ns / call_ns);
	return 0;
}
