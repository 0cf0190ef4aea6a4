/*
 * remote: remote system calls (runtime/ukl.h, `ukl run --remote DIR`) as an
 * application sees them. The test prepares DIR on the host and checks it
 * afterwards; every line printed is compared.
 *
 *   remote files   enable/on/off/disable; create, write and read back a
 *                  host file from buffers on the stack, the heap, the
 *                  application's data and constants; stdio on a host file;
 *                  stat; symlinks, escapes and a FIFO; routing while off
 *                  and after disable
 *   remote tree    list, make, rename and delete host files and directories;
 *                  readv/writev, ftruncate, fsync, statx; a thread created
 *                  before enabling stays local while its creator is remote
 *   remote big     one read() of big.bin (64 MiB) into a malloc'd buffer
 *   remote spin    read big.bin in a loop until killed
 *   remote enosys  enable in an ordinary process (--config linux)
 *   remote time    median cycles of ukl_remote_null(), polling and asleep,
 *                  and of getppid()
 *
 * With REMOTE_IRQ=1 in the environment, every enable is followed by
 * ukl_remote_irq(): the thread sleeps until the host's interrupt.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>
#include <x86intrin.h>

#include "ukl.h"

#define BIG (64u << 20)
#define MIB (1u << 20)

static unsigned char bss_buf[MIB];

/* ukl_remote_enable(), and ukl_remote_irq() with REMOTE_IRQ=1 */
static int enable(void)
{
	int r = ukl_remote_enable();

	if (!r && getenv("REMOTE_IRQ") && ukl_remote_irq()) {
		perror("ukl_remote_irq");
		exit(3);
	}
	return r;
}
static void *volatile nothing;
static const char rodata_msg[] = "constant bytes from the image\n";

static void say(const char *what, long r)
{
	if (r < 0)
		printf("%s: -1 %s\n", what, strerror(errno));
	else
		printf("%s: %ld\n", what, r);
	fflush(stdout);
}

/* Say only whether the result is a remote descriptor */
static void say_fd(const char *what, int fd)
{
	if (fd < 0)
		printf("%s: -1 %s\n", what, strerror(errno));
	else
		printf("%s: %s\n", what, ukl_remote_fd(fd) ? "remote fd" : "local fd");
	fflush(stdout);
}

static void fill(unsigned char *p, size_t n, unsigned char seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)(seed + i * 7 + (i >> 12));
}

static int same(const unsigned char *p, size_t n, unsigned char seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (unsigned char)(seed + i * 7 + (i >> 12)))
			return 0;
	return 1;
}

static int files(void)
{
	unsigned char stack_buf[4096];
	unsigned char *heap = malloc(MIB);
	char line[128];
	struct stat st;
	FILE *f;
	int fd, dfd;

	say("on before enable", ukl_remote_on());
	say("enable", enable());
	say("enable again", enable());
	say("on", ukl_remote_on());
	printf("printf while on reaches the console\n");

	/* w.bin: bss (1 MiB), heap (1 MiB), stack (4 KiB), constants */
	fd = open("w.bin", O_CREAT | O_TRUNC | O_WRONLY, 0640);
	say_fd("open w.bin", fd);
	fill(bss_buf, MIB, 1);
	fill(heap, MIB, 2);
	fill(stack_buf, sizeof(stack_buf), 3);
	say("write bss", write(fd, bss_buf, MIB));
	say("write heap", write(fd, heap, MIB));
	say("write stack", write(fd, stack_buf, sizeof(stack_buf)));
	say("write rodata", write(fd, rodata_msg, strlen(rodata_msg)));
	say("pwrite at 0", pwrite(fd, "HEAD", 4, 0));
	say("read a write-only fd", read(fd, stack_buf, 1));
	say("write from a kernel address", write(fd, (void *)0xffff888000001000ul, 16));
	say("write from NULL", write(fd, nothing, 16));
	say("close", close(fd));
	say("close again", close(fd));

	fd = open("w.bin", O_RDONLY);
	say_fd("open w.bin again", fd);
	say("fstat", fstat(fd, &st));
	printf("size: %lld mode: %o\n", (long long)st.st_size, st.st_mode & 0777);
	say("lseek end", lseek(fd, 0, SEEK_END));
	say("lseek 4", lseek(fd, 4, SEEK_SET));
	memset(bss_buf, 0, MIB);
	memset(heap, 0, MIB);
	say("read into bss", read(fd, bss_buf + 4, MIB - 4));
	say("read into heap", read(fd, heap, MIB));
	say("pread into stack", pread(fd, stack_buf, sizeof(stack_buf), 2 * MIB));
	memcpy(bss_buf, "\x01\x08\x0f\x16", 4);	/* what pwrite overwrote */
	printf("bss same: %d heap same: %d stack same: %d\n",
	       same(bss_buf, MIB, 1), same(heap, MIB, 2), same(stack_buf, sizeof(stack_buf), 3));
	say("lseek past the stack's bytes", lseek(fd, 2 * MIB + sizeof(stack_buf), SEEK_SET));
	memset(line, 0, sizeof(line));
	/* <ukl.h>'s TCP shortcut: a remote file's descriptor still reaches the host */
	say("read the rest", ukl_tcp_read(fd, line, sizeof(line) - 1));
	printf("the rest is the constant: %d\n", !strcmp(line, rodata_msg));
	say("read at the end", read(fd, line, sizeof(line)));
	say("read into rodata", pread(fd, (void *)rodata_msg, 1, 0));
	say("close", close(fd));

	/* stdio: openat, newfstatat(AT_EMPTY_PATH), read, close */
	f = fopen("in.txt", "r");
	printf("fopen in.txt: %s\n", f ? "ok" : strerror(errno));
	if (f) {
		while (fgets(line, sizeof(line), f))
			printf("in.txt: %s", line);
		fclose(f);
	}
	say("stat in.txt", stat("in.txt", &st));
	printf("in.txt size: %lld\n", (long long)st.st_size);
	say("lstat inside-link", lstat("inside-link", &st));
	printf("inside-link is a symlink: %d\n", S_ISLNK(st.st_mode));
	fd = open("inside-link", O_RDONLY);
	say_fd("open inside-link", fd);
	close(fd);
	dfd = open("sub", O_RDONLY | O_DIRECTORY);
	say_fd("open sub", dfd);
	fd = openat(dfd, "deep.txt", O_RDONLY);
	say_fd("openat sub deep.txt", fd);
	say("read deep.txt", read(fd, line, sizeof(line)));
	close(fd);
	say("fstatat sub deep.txt", fstatat(dfd, "deep.txt", &st, 0));
	say_fd("openat sub ../in.txt", openat(dfd, "../in.txt", O_RDONLY));
	say_fd("openat sub ../../outside.txt", openat(dfd, "../../outside.txt", O_RDONLY));
	close(dfd);
	say_fd("open ../outside.txt", open("../outside.txt", O_RDONLY));
	say_fd("open /etc/passwd", open("/etc/passwd", O_RDONLY));
	say_fd("open escape-link/passwd", open("escape-link/passwd", O_RDONLY));
	say("stat escape-link/passwd", stat("escape-link/passwd", &st));
	say_fd("open fifo", open("fifo", O_RDONLY | O_NONBLOCK));
	say_fd("open missing", open("missing", O_RDONLY));

	/* off: paths are local again, remote descriptors still work */
	fd = open("in.txt", O_RDONLY);
	say("off", ukl_remote_off());
	say_fd("open w.bin while off", open("w.bin", O_RDONLY));
	say_fd("open /proc/self/stat while off", open("/proc/self/stat", O_RDONLY));
	say("read a remote fd while off", read(fd, line, 5));
	say("dup a remote fd", dup(fd));
	say("disable", ukl_remote_disable());
	say("read a remote fd after disable", read(fd, line, 5));
	say("enable again", enable());
	say("read a remote fd after enable", read(fd, line, 5));
	say("close", close(fd));
	say("byp while enabled", ukl_opts(UKL_OPT_BYP, 0) == -EBUSY ? 0 : -1);
	free(heap);
	return 0;
}


/* The names in directory @path, sorted, on one line */
static void list(const char *what, const char *path)
{
	char names[16][256];
	int n = 0;
	struct dirent *e;
	DIR *d = opendir(path);

	if (!d) {
		printf("%s: -1 %s\n", what, strerror(errno));
		return;
	}
	while ((e = readdir(d)) && n < 16)
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			snprintf(names[n++], sizeof(names[0]), "%s", e->d_name);
	closedir(d);
	qsort(names, n, sizeof(names[0]), (int (*)(const void *, const void *))strcmp);
	printf("%s:", what);
	for (int i = 0; i < n; i++)
		printf(" %s", names[i]);
	printf("\n");
	fflush(stdout);
}

static pthread_mutex_t step_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t step_cond = PTHREAD_COND_INITIALIZER;
static int step;

static void wait_step(int n)
{
	pthread_mutex_lock(&step_lock);
	while (step < n)
		pthread_cond_wait(&step_cond, &step_lock);
	pthread_mutex_unlock(&step_lock);
}

static void next_step(void)
{
	pthread_mutex_lock(&step_lock);
	step++;
	pthread_cond_broadcast(&step_cond);
	pthread_mutex_unlock(&step_lock);
}

/* Created before its creator enabled remote calls: stays local */
static void *local_thread(void *arg)
{
	(void)arg;
	wait_step(1);
	say_fd("local thread: open in.txt", open("in.txt", O_RDONLY));
	say_fd("local thread: open /proc/self/status", open("/proc/self/status", O_RDONLY));
	say("local thread: null", ukl_remote_null());
	next_step();
	return NULL;
}

static int tree(void)
{
	char a[6] = "", b[6] = "";
	struct iovec iov[3] = { { "ab", 2 }, { "", 0 }, { "cdef", 4 } };
	struct iovec rio[2] = { { a, 3 }, { b, 5 } };
	struct statx stx;
	struct stat st;
	pthread_t t;
	int fd, dfd, tmpfd = open("/tmp", O_RDONLY | O_DIRECTORY);

	pthread_create(&t, NULL, local_thread, NULL);
	say("enable", enable());
	say("on", ukl_remote_on());
	next_step();
	wait_step(2);
	pthread_join(t, NULL);
	say_fd("main thread: open in.txt", open("in.txt", O_RDONLY));

	list("list .", ".");
	say("mkdir made", mkdir("made", 0755));
	say("mkdir made again", mkdir("made", 0755));
	dfd = open("made", O_RDONLY | O_DIRECTORY);
	fd = openat(dfd, "v.txt", O_CREAT | O_RDWR | O_TRUNC, 0644);
	say_fd("openat made v.txt", fd);
	say("writev", writev(fd, iov, 3));
	say("lseek 0", lseek(fd, 0, SEEK_SET));
	say("readv", readv(fd, rio, 2));
	printf("readv got: %s|%s\n", a, b);
	say("ftruncate 3", ftruncate(fd, 3));
	say("fsync", fsync(fd));
	say("fdatasync", fdatasync(fd));
	say("fstat", fstat(fd, &st));
	printf("size after ftruncate: %lld\n", (long long)st.st_size);
	say("close", close(fd));
	say("statx made/v.txt", statx(AT_FDCWD, "made/v.txt", 0, STATX_SIZE | STATX_MODE, &stx));
	printf("statx size: %llu mode: %o\n", (unsigned long long)stx.stx_size, stx.stx_mode & 0777);
	say("statx through dirfd", statx(dfd, "v.txt", 0, STATX_SIZE, &stx));
	say("mkdirat made/sub", mkdirat(dfd, "sub", 0700));
	list("list made", "made");
	say("rename made/v.txt made/w.txt", rename("made/v.txt", "made/w.txt"));
	say("renameat2 noreplace onto in.txt",
	    renameat2(dfd, "w.txt", AT_FDCWD, "in.txt", RENAME_NOREPLACE));
	say("renameat2 exchange", renameat2(dfd, "w.txt", dfd, "sub", RENAME_EXCHANGE));
	say("renameat2 exchange back", renameat2(dfd, "w.txt", dfd, "sub", RENAME_EXCHANGE));
	say("rename to ../escaped", rename("made/w.txt", "../escaped"));
	say("rename to a local directory", renameat2(dfd, "w.txt", tmpfd, "x", 0));
	list("list made", "made");
	say("rmdir made (not empty)", rmdir("made"));
	say("unlink made/w.txt", unlink("made/w.txt"));
	say("unlinkat made/sub", unlinkat(dfd, "sub", AT_REMOVEDIR));
	say("close made", close(dfd));
	say("rmdir made", rmdir("made"));
	say("unlink ../outside.txt", unlink("../outside.txt"));
	say("unlink escape-link/passwd", unlink("escape-link/passwd"));
	say("mkdir /tmp/x", mkdir("/tmp/x", 0755));
	list("list .", ".");
	say("off", ukl_remote_off());
	say("mkdir local-dir while off", mkdir("/tmp/local-dir", 0755));
	say("rmdir local-dir while off", rmdir("/tmp/local-dir"));
	return 0;
}

static int big(void)
{
	unsigned char *p = malloc(BIG);
	uint64_t bad = 0;
	long r;
	int fd;

	if (!p || enable() || ukl_remote_on())
		return 1;
	fd = open("big.bin", O_RDONLY);
	say_fd("open big.bin", fd);
	r = read(fd, p, BIG);
	say("read big.bin", r);
	for (uint64_t i = 0; i < BIG / 8; i++)
		if (((uint64_t *)p)[i] != i)
			bad++;
	printf("big.bin words wrong: %llu\n", (unsigned long long)bad);
	close(fd);
	return r == BIG && !bad ? 0 : 1;
}

static int spin(void)
{
	static unsigned char buf[4 * MIB];
	int fd;

	if (enable() || ukl_remote_on())
		return 1;
	fd = open("big.bin", O_RDONLY);
	printf("spinning\n");
	fflush(stdout);
	for (;;)
		if (pread(fd, buf, sizeof(buf), 0) != sizeof(buf))
			return 1;
}

static int cmp_ull(const void *a, const void *b)
{
	unsigned long long x = *(const unsigned long long *)a, y = *(const unsigned long long *)b;

	return x < y ? -1 : x > y;
}

static unsigned long long median(unsigned long long *v, int n)
{
	qsort(v, n, sizeof(*v), cmp_ull);
	return v[n / 2];
}

static int timing(void)
{
	enum { N = 2000 };
	static unsigned long long t_null[N], t_irq[N], t_ppid[N];

	/* In blocks: the host spins while polling threads call, else sleeps */
	if (ukl_remote_enable() || ukl_remote_poll())
		return 1;
	for (int i = 0; i < N; i++) {
		unsigned long long t0 = __rdtsc();

		ukl_remote_null();
		t_null[i] = __rdtsc() - t0;
	}
	if (ukl_remote_irq())
		return 1;
	for (int i = 0; i < N; i++) {
		unsigned long long t0 = __rdtsc();

		ukl_remote_null();
		t_irq[i] = __rdtsc() - t0;
	}
	for (int i = 0; i < N; i++) {
		unsigned long long t0 = __rdtsc();

		syscall(SYS_getppid);
		t_ppid[i] = __rdtsc() - t0;
	}
	printf("TIME null remote call %llu cycles, asleep %llu cycles, getppid %llu cycles (median of %d)\n",
	       median(t_null, N), median(t_irq, N), median(t_ppid, N), N);
	return 0;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "files";

	if (!strcmp(mode, "files"))
		return files();
	if (!strcmp(mode, "tree"))
		return tree();
	if (!strcmp(mode, "big"))
		return big();
	if (!strcmp(mode, "spin"))
		return spin();
	if (!strcmp(mode, "time"))
		return timing();
	if (!strcmp(mode, "enosys")) {
		say("enable", ukl_remote_enable());
		say("on", ukl_remote_on());
		say("null", ukl_remote_null());
		return 0;
	}
	fprintf(stderr, "remote: unknown mode '%s' (files, tree, big, spin, time, enosys)\n", mode);
	return 2;
}
