/*
 * basics: one program, many test cases, so that one image serves a whole
 * test module. argv[1] selects the case; the rest are its arguments.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

static int case_all(int argc, char **argv)
{
	char buf[64] = { 0 };
	struct dirent *de;
	DIR *d;
	FILE *f;

	/* argv */
	for (int i = 0; i < argc; i++)
		printf("arg %d: %s\n", i, argv[i]);
	/* a file in /tmp, written and read back */
	f = fopen("/tmp/basics.txt", "w");
	if (!f || fputs("written in the guest\n", f) < 0 || fclose(f))
		return perror("write /tmp/basics.txt"), 10;
	f = fopen("/tmp/basics.txt", "r");
	if (!f || !fgets(buf, sizeof(buf), f))
		return perror("read /tmp/basics.txt"), 11;
	fclose(f);
	printf("file: %s", buf);
	/* /proc/self/fd */
	d = opendir("/proc/self/fd");
	if (!d)
		return perror("opendir /proc/self/fd"), 12;
	while ((de = readdir(d)))
		if (de->d_name[0] != '.')
			printf("fd: %s\n", de->d_name);
	closedir(d);
	return argc > 2 ? atoi(argv[argc - 1]) : 0;
}

/*
 * Guest-measured time of N getppid calls (instructions under -icount): the
 * fastest of 5 rounds, so that an interrupt landing in one round (whose
 * timing QEMU does not make exactly repeatable) does not show.
 */
static int case_loop(long n)
{
	long long best = -1;

	/* Let console output drain first: its interrupts depend on the host. */
	tcdrain(1);
	usleep(20000);
	for (int round = 0; round < 5; round++) {
		struct timespec a, b;
		long long ns;

		clock_gettime(CLOCK_MONOTONIC, &a);
		for (long i = 0; i < n; i++)
			syscall(SYS_getppid);
		clock_gettime(CLOCK_MONOTONIC, &b);
		ns = (long long)(b.tv_sec - a.tv_sec) * 1000000000LL + (b.tv_nsec - a.tv_nsec);
		if (best < 0 || ns < best)
			best = ns;
	}
	printf("loop: %ld calls took %lld ns\n", n, best);
	return 0;
}

int main(int argc, char **argv)
{
	const char *c = argc > 1 ? argv[1] : "all";

	setvbuf(stdout, NULL, _IOLBF, 0);
	if (!strcmp(c, "all"))
		return case_all(argc, argv);
	if (!strcmp(c, "exit"))
		return argc > 2 ? atoi(argv[2]) : 0;
	if (!strcmp(c, "say") && argc > 3) {
		/* TEXT as a line of its own, then exit with STATUS */
		printf("%s\n", argv[2]);
		return atoi(argv[3]);
	}
	if (!strcmp(c, "segv")) {
		printf("dereferencing NULL\n");
		return *(volatile int *)0;
	}
	if (!strcmp(c, "abort")) {
		printf("calling abort()\n");
		abort();
	}
	if (!strcmp(c, "loop"))
		return case_loop(argc > 2 ? atol(argv[2]) : 100000);
	if (!strcmp(c, "panic")) {
		int fd = open("/proc/sysrq-trigger", O_WRONLY);

		printf("crashing the kernel on purpose\n");
		if (fd < 0 || write(fd, "c", 1) != 1)
			return perror("sysrq-trigger"), 20;
		return 21;
	}
	if (!strcmp(c, "cloneparent")) {
		/* init may not make siblings (nobody would reap them) */
		long r = syscall(SYS_clone, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0);

		if (r == 0)
			_exit(0);
		printf("clone(CLONE_PARENT): %s\n", r < 0 ? strerror(errno) : "created");
		return 0;
	}
	if (!strcmp(c, "ls")) {
		/* a directory's entries, but . and .. */
		DIR *d = opendir(argc > 2 ? argv[2] : "/");
		struct dirent *de;

		if (!d)
			return perror("opendir"), 30;
		while ((de = readdir(d)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				printf("entry: %s\n", de->d_name);
		closedir(d);
		return 0;
	}
	if (!strcmp(c, "sleep")) {
		sleep(argc > 2 ? atoi(argv[2]) : 1000);
		return 0;
	}
	if (!strcmp(c, "env")) {
		/* the environment, one "env: NAME=VALUE" line each */
		extern char **environ;

		for (char **e = environ; *e; e++)
			printf("env: %s\n", *e);
		return 0;
	}
	fprintf(stderr, "basics: unknown case %s\n", c);
	return 2;
}
