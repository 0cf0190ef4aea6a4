// SPDX-License-Identifier: GPL-2.0
/*
 * Remote system calls against Linux (issue 34): the same cases on remote
 * files (`remote_linux remote`, under `ukl run --remote DIR`) and on local
 * files in the same layout (`remote_linux local`, under the linux
 * configuration); tests/vm/test_remote.py compares the two outputs line by
 * line, so every case is checked against what Linux itself answers.
 *
 * - Errors and their order: bad buffers (NULL, SIZE_MAX), files opened for
 *   the other direction, directories, bad vectors, offsets, whence, flags.
 * - A read or write of several round trips while another thread closes
 *   the descriptor and opens another file under the same number: the call
 *   goes on with its file, as on Linux.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ukl.h"

#define BIG	(4 << 20)	/* several round trips (a slot pins ~1 MiB) */
#define ROUNDS	20

static char buf[8192];
static char *volatile nil;	/* NULL, which the compiler cannot see */
static unsigned char *a_data, *rbuf;	/* on the heap */

/* A result, and the file offset of @fd afterwards when @fd >= 0 */
static void say(const char *what, long r, int fd)
{
	if (r < 0)
		printf("%s: -1 %s", what, strerror(errno));
	else
		printf("%s: %ld", what, r);
	if (fd >= 0)
		printf(" (offset %ld)", (long)lseek(fd, 0, SEEK_CUR));
	printf("\n");
}

static int make(const char *name, const void *data, size_t len)
{
	int fd = open(name, O_CREAT | O_TRUNC | O_WRONLY, 0644);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len || close(fd)) {
		printf("make %s: %s\n", name, strerror(errno));
		exit(1);
	}
	return 0;
}

static void errors(void)
{
	int ro, wo, d, sub, fd;
	struct iovec iov[3];
	struct stat st;

	ro = open("ten.txt", O_RDONLY);
	wo = open("ten.txt", O_WRONLY);
	d = open(".", O_RDONLY | O_DIRECTORY);
	sub = open("sub", O_RDONLY | O_DIRECTORY);
	printf("opened: %d\n", ro >= 0 && wo >= 0 && d >= 0 && sub >= 0);

	say("read O_WRONLY into NULL", read(wo, nil, 10), wo);
	say("read into NULL", read(ro, nil, 10), ro);
	lseek(ro, 0, SEEK_END);
	say("read at the end into NULL", read(ro, nil, 10), ro);
	say("pread at the end into NULL", pread(ro, nil, 10, 10), ro);
	say("pread past the end into NULL", pread(ro, nil, 10, 100), ro);
	lseek(ro, 0, SEEK_SET);
	say("read count SIZE_MAX", syscall(SYS_read, ro, buf, SIZE_MAX), ro);
	say("read O_WRONLY count SIZE_MAX", syscall(SYS_read, wo, buf, SIZE_MAX), wo);
	say("read count SSIZE_MAX+1", syscall(SYS_read, ro, buf, (size_t)SSIZE_MAX + 1), ro);
	say("read 0 of a directory", read(d, buf, 0), -1);
	say("read a directory", read(d, buf, 10), -1);
	say("pread 0 of a directory", pread(d, buf, 0, 0), -1);
	say("read 0 of O_WRONLY", read(wo, buf, 0), wo);
	say("write 0 to O_RDONLY", write(ro, buf, 0), ro);
	say("write O_RDONLY from NULL", write(ro, nil, 10), ro);
	say("write from NULL", write(wo, nil, 10), wo);
	say("write count SIZE_MAX", syscall(SYS_write, wo, buf, SIZE_MAX), wo);
	say("pread at -1", pread(ro, buf, 10, -1), ro);
	say("pread of a closed fd at -1", syscall(SYS_pread64, 0x40000fff, buf, 10, -1L), -1);
	say("pread at LLONG_MAX-5", pread(ro, buf, 10, LLONG_MAX - 5), ro);
	say("pread into NULL at LLONG_MAX-5", pread(ro, nil, 10, LLONG_MAX - 5), ro);
	say("pwrite at -1", pwrite(wo, buf, 10, -1), wo);

	/* readv and writev */
	iov[0] = (struct iovec){ buf, 4 };
	iov[1] = (struct iovec){ buf + 4, (size_t)-1 };
	iov[2] = (struct iovec){ buf + 8, 2 };
	lseek(ro, 0, SEEK_SET);
	say("readv with a negative second length", readv(ro, iov, 3), ro);
	say("readv O_WRONLY with a negative length", readv(wo, iov, 3), wo);
	iov[1] = (struct iovec){ NULL, 4 };
	say("readv with NULL second", readv(ro, iov, 3), ro);
	lseek(ro, 0, SEEK_SET);
	iov[0] = (struct iovec){ NULL, 4 };
	iov[1] = (struct iovec){ buf, 4 };
	say("readv with NULL first", readv(ro, iov, 2), ro);
	lseek(ro, 0, SEEK_SET);
	iov[0] = (struct iovec){ (void *)-4096L, 4 };
	say("readv with a kernel address", readv(ro, iov, 2), ro);
	say("readv O_WRONLY with a kernel address", readv(wo, iov, 2), wo);
	say("readv of 1025", syscall(SYS_readv, ro, iov, 1025), ro);
	say("readv of 0", readv(ro, iov, 0), ro);
	say("readv of 0 O_WRONLY", readv(wo, iov, 0), wo);
	say("readv NULL vector", syscall(SYS_readv, ro, NULL, 2), ro);
	iov[0] = (struct iovec){ buf, 0 };
	say("readv of no bytes from a directory", readv(d, iov, 1), -1);
	iov[0] = (struct iovec){ buf, 4 };
	say("readv a directory", readv(d, iov, 1), -1);
	say("writev O_RDONLY", writev(ro, iov, 1), ro);
	/* On the heap: UKL's access_ok() bounds the image's own buffers by the image */
	/* (and a 2 GiB range from the heap, which Linux accepts: not remote's to fix) */
	iov[0] = (struct iovec){ rbuf, 4 };
	iov[1] = (struct iovec){ rbuf + 4, 1 << 20 };
	lseek(ro, 0, SEEK_SET);
	say("readv into the heap", readv(ro, iov, 2), ro);
	lseek(ro, 0, SEEK_SET);
	iov[1] = (struct iovec){ rbuf, BIG };
	lseek(ro, 0, SEEK_SET);
	say("readv of several round trips", readv(ro, iov, 2), ro);
	lseek(ro, 0, SEEK_SET);
	say("read of several round trips", read(ro, rbuf, BIG), ro);
	/* The count as given: access_ok() of all of it fails before any is cut */
	lseek(ro, 0, SEEK_SET);
	say("read into the heap count SIZE_MAX", syscall(SYS_read, ro, rbuf, SIZE_MAX), ro);
	say("pread into the heap count SIZE_MAX", syscall(SYS_pread64, ro, rbuf, SIZE_MAX, 0L), ro);
	say("write from the heap count SIZE_MAX", syscall(SYS_write, wo, rbuf, SIZE_MAX), wo);

	/* lseek */
	say("lseek whence 1<<32 | SEEK_SET", syscall(SYS_lseek, ro, 3L, (1UL << 32) | SEEK_SET), ro);
	say("lseek whence 5", lseek(ro, 0, 5), ro);
	say("lseek whence -1", syscall(SYS_lseek, ro, 0L, -1L), ro);
	say("lseek to -1", lseek(ro, -1, SEEK_SET), ro);

	/* paths */
	fd = openat(sub, "../ten.txt", O_RDONLY);
	say("openat sub ../ten.txt", fd >= 0 ? 0 : -1, -1);
	if (fd >= 0) {
		say("read it", read(fd, buf, 100), fd);
		close(fd);
	}
	say("fstatat sub ../sub/deep.txt", fstatat(sub, "../sub/deep.txt", &st, 0), -1);
	say("fstatat AT_STATX_FORCE_SYNC", fstatat(d, "ten.txt", &st, 0x2000), -1);
	say("fstatat bad flags, NULL path", syscall(SYS_newfstatat, d, NULL, &st, 0x8000), -1);
	say("fstatat NULL path", syscall(SYS_newfstatat, d, NULL, &st, 0), -1);
	say("fstatat NULL stat", syscall(SYS_newfstatat, d, "ten.txt", NULL, 0), -1);
	say("fstat NULL", syscall(SYS_fstat, ro, NULL), -1);
	say("getdents64 count 1<<32 | 16", syscall(SYS_getdents64, d, buf, (1UL << 32) | 16), -1);
	say("getdents64 a file", syscall(SYS_getdents64, ro, buf, sizeof(buf)), -1);
	say("unlinkat bad flags, NULL path", syscall(SYS_unlinkat, d, NULL, 0x8000), -1);
	say("renameat2 bad flags, NULL paths", syscall(SYS_renameat2, d, NULL, d, NULL, 3), -1);
	say("ftruncate a closed fd to -1", syscall(SYS_ftruncate, 0x40000fff, -1L), -1);
	say("ftruncate O_RDONLY", ftruncate(ro, 0), -1);
	close(ro);
	close(wo);
	close(d);
	close(sub);
}

/* ---- A close() and an open() during a read or write of several round trips ---- */

static int race_fd;
static long race_ret;
static int race_errno;
static volatile int started;

static void *reader(void *arg)
{
	started = 1;
	race_ret = arg ? write(race_fd, a_data, BIG) : read(race_fd, rbuf, BIG);
	race_errno = race_ret < 0 ? errno : 0;
	return NULL;
}

/*
 * A round is right when the call moved its BIG bytes wholly from or to a.bin
 * (it began before the close), or wholly from or to b.txt (it began after
 * the open), or failed with EBADF and moved nothing (it began between the
 * two): never a mixture, never a short count of a regular file. Which of
 * the three it was depends on the scheduling, so only the wrong rounds are
 * compared with Linux's; the mix goes to stderr on a line the comparison
 * leaves out (it begins with '[').
 */
static void race(int writing)
{
	int wrong = 0, reused = 0, first = 0, second = 0, between = 0;
	struct stat sa, sb;
	char line[128];
	int len;

	for (int round = 0; round < ROUNDS; round++) {
		pthread_t t;
		int fd2, ok;

		make("b.txt", "bbb", 3);
		race_fd = open(writing ? "w-a.bin" : "a.bin", writing ? O_WRONLY | O_CREAT | O_TRUNC : O_RDONLY,
			       0644);
		memset(rbuf, 0, BIG);
		started = 0;
		pthread_create(&t, NULL, reader, writing ? (void *)1 : NULL);
		/* Once the call has begun: somewhere in its first round trips */
		while (!started)
			;
		for (volatile int spin = 0; spin < 5000 + (round % 5) * 20000; spin++)
			;
		close(race_fd);
		fd2 = open("b.txt", O_RDWR);
		reused += fd2 == race_fd;
		pthread_join(t, NULL);
		close(fd2);
		if (stat(writing ? "w-a.bin" : "a.bin", &sa) || stat("b.txt", &sb)) {
			wrong++;
			continue;
		}
		if (race_ret == -1 && race_errno == EBADF) {
			/* Between the close and the open: nothing moved */
			ok = writing ? sa.st_size == 0 && sb.st_size == 3 : !rbuf[1] && !rbuf[BIG - 1];
			between += ok;
		} else if (writing) {
			ok = race_ret == BIG && ((sa.st_size == BIG && sb.st_size == 3) ||
						 (sa.st_size == 0 && sb.st_size == BIG));
			first += ok && sa.st_size == BIG;
			second += ok && sa.st_size == 0;
		} else {
			ok = (race_ret == BIG && !memcmp(rbuf, a_data, BIG)) ||
			     (race_ret == 3 && !memcmp(rbuf, "bbb", 3));
			first += ok && race_ret == BIG;
			second += ok && race_ret == 3;
		}
		wrong += !ok;
	}
	printf("%s race: %d rounds wrong, fd reused: %d\n", writing ? "write" : "read", wrong, reused > 0);
	len = snprintf(line, sizeof(line), "[%s race: %d on the first file, %d on the second, %d EBADF]\n",
		       writing ? "write" : "read", first, second, between);
	if (write(STDERR_FILENO, line, len) != len)
		perror("stderr");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "local";

	if (!strcmp(mode, "remote")) {
		if (ukl_remote_enable() || ukl_remote_on()) {
			perror("remote");
			return 1;
		}
	} else if ((mkdir("/remote-linux", 0755) && errno != EEXIST) || chdir("/remote-linux")) {
		perror("/remote-linux");
		return 1;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	a_data = malloc(BIG);
	rbuf = malloc(BIG);
	for (int i = 0; i < BIG; i++)
		a_data[i] = (unsigned char)(i * 7 + (i >> 12));
	if (mkdir("sub", 0755) && errno != EEXIST)
		perror("mkdir sub");
	make("ten.txt", "0123456789", 10);
	make("sub/deep.txt", "deep\n", 5);
	make("a.bin", a_data, BIG);
	make("b.txt", "bbb", 3);
	printf("remote-linux %s\n", "begin");
	errors();
	race(0);
	race(1);
	printf("remote-linux end\n");
	return 0;
}
