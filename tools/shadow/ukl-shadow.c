// SPDX-License-Identifier: GPL-2.0
/*
 * ukl-shadow: the host side of UKL remote system calls.
 *
 * A UKL kernel in QEMU forwards some file system calls of an application
 * through a ring of slots (ukl_ring.h) in a memfd that QEMU exposes as BAR2
 * of an ivshmem-doorbell device, whose server we are: each side can sleep
 * until the other rings its eventfd. The guest's RAM is a memfd too, which this process maps
 * once: data buffers arrive as guest-physical runs and become iovecs into that
 * mapping, so reads and writes move bytes between the page cache and the
 * guest's own pages with no copy of ours.
 *
 * The shadow runs confined: as DIR's owner when started as root, with paths
 * resolved only beneath DIR (openat2 RESOLVE_BENEATH), Landlock when the
 * kernel has it, and a seccomp allowlist that kills the process on any other
 * system call. Nothing the guest writes is read before all of that is in
 * place, and each request is copied into private memory before it is checked.
 *
 * ukl-shadow --ram-fd N --ram-size BYTES --below-4g BYTES --ring-fd N
 *            --dir DIR --parent PID [--idle-us N] [--ivshmem-fd N]
 *            [--notify poll|irq]
 *
 * See docs/plans/remote-syscalls.md, section 6.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/openat2.h>
#include <linux/seccomp.h>

#include "ukl_ring.h"

#ifndef LANDLOCK_ACCESS_FS_REFER
#define LANDLOCK_ACCESS_FS_REFER	(1ULL << 13)
#endif
#ifndef LANDLOCK_ACCESS_FS_TRUNCATE
#define LANDLOCK_ACCESS_FS_TRUNCATE	(1ULL << 14)
#endif
#ifndef LANDLOCK_ACCESS_FS_IOCTL_DEV
#define LANDLOCK_ACCESS_FS_IOCTL_DEV	(1ULL << 15)
#endif
#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE		(1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE			(1 << 1)
#endif
#ifndef AT_STATX_SYNC_TYPE
#define AT_STATX_SYNC_TYPE		0x6000
#endif
#ifndef __X32_SYSCALL_BIT
#define __X32_SYSCALL_BIT		0x40000000
#endif

static_assert(sizeof(struct ukl_ring_hdr) <= 4096, "ring header");
static_assert(sizeof(struct ukl_slot) == UKL_SLOT_SIZE, "slot size");
static_assert(offsetof(struct ukl_slot, seg) == 128, "slot header");
static_assert(4096 + (size_t)UKL_RING_SLOTS * UKL_SLOT_SIZE <= UKL_RING_SIZE, "ring geometry");
static_assert(sizeof(struct stat) == 144, "x86-64 struct stat");
static_assert(UKL_SLOT_SEGS <= IOV_MAX, "segments per call");
static_assert(sizeof(struct statx) == 256, "struct statx");

#define PATH_IN_MAX	UKL_SLOT_INLINE

/* The open flags a guest may ask for; the rest are dropped. */
#define ALLOWED_O_FLAGS	(O_ACCMODE | O_CREAT | O_EXCL | O_TRUNC | O_APPEND | O_DIRECTORY | \
			 O_NOFOLLOW | O_DSYNC | O_SYNC | O_TMPFILE | O_NONBLOCK)

static const char *prog = "ukl-shadow";

/* From the command line */
static int ramfd = -1, ringfd = -1;
static uint64_t ram_size, below_4g;
static const char *dir;
static pid_t parent;
static long idle_us = 1000;
static int ivshmem_fd = -1;	/* QEMU's chardev: we are its ivshmem server */
static uint32_t notify = UKL_NOTIFY_POLL;

/* The doorbells: the guest rings host_efd, we ring guest_efd (its MSI-X) */
#define HOST_PEER	1	/* our ivshmem peer ID; QEMU is peer 0 */
static int host_efd = -1, guest_efd = -1;

/* Set up at startup */
static int rootfd = -1;
static unsigned char *ram;
static unsigned char *ring;
static struct ukl_ring_hdr *hdr;

/* The remote fd table: index -> host fd, -1 when free */
static int rfd[UKL_RFD_MAX];

/*
 * A read or write larger than one round trip holds its file between them,
 * as Linux holds a file for a call in progress: a close() by another thread
 * meanwhile, and an open() that reuses the index, leave the call on its
 * file. held[i] is the file of slot i's call, -1 when none; a host fd is
 * closed once neither rfd[] nor a slot refers to it (fd_refs).
 */
#define HOST_FDS	(UKL_RFD_MAX + 256)
static int held[UKL_RING_SLOTS];
static uint16_t fd_refs[HOST_FDS];

/* Guest memory that could not be pinned (UKL_SEG_FAULT): every access faults */
#define FAULT_SIZE	0x7ffff000UL	/* Linux's MAX_RW_COUNT */
static unsigned char *fault_area;

/* Per slot: the seq last answered, and whether there was one */
static uint32_t last_seq[UKL_RING_SLOTS];
static bool served[UKL_RING_SLOTS];

static uint64_t stat_calls, stat_zc_bytes, stat_inline_bytes;

static volatile sig_atomic_t stopping;

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", prog);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static void usage(void)
{
	fprintf(stderr, "usage: %s --ram-fd N --ram-size BYTES --below-4g BYTES --ring-fd N "
		"--dir DIR --parent PID [--idle-us N] [--ivshmem-fd N] [--notify poll|irq]\n", prog);
	exit(2);
}

static uint64_t parse_u64(const char *opt, const char *s)
{
	char *end;
	unsigned long long v;

	errno = 0;
	if (*s < '0' || *s > '9')
		die("%s: not a number: '%s'", opt, s);
	v = strtoull(s, &end, 0);
	if (errno || *end)
		die("%s: not a number: '%s'", opt, s);
	return v;
}

static void parse_args(int argc, char **argv)
{
	bool have_ram = false, have_below = false;

	for (int i = 1; i < argc; i++) {
		const char *opt = argv[i], *val;

		if (i + 1 >= argc)
			usage();
		val = argv[++i];
		if (!strcmp(opt, "--ram-fd")) {
			ramfd = (int)parse_u64(opt, val);
		} else if (!strcmp(opt, "--ram-size")) {
			ram_size = parse_u64(opt, val);
			have_ram = true;
		} else if (!strcmp(opt, "--below-4g")) {
			below_4g = parse_u64(opt, val);
			have_below = true;
		} else if (!strcmp(opt, "--ring-fd")) {
			ringfd = (int)parse_u64(opt, val);
		} else if (!strcmp(opt, "--dir")) {
			dir = val;
		} else if (!strcmp(opt, "--parent")) {
			parent = (pid_t)parse_u64(opt, val);
		} else if (!strcmp(opt, "--ivshmem-fd")) {
			ivshmem_fd = (int)parse_u64(opt, val);
		} else if (!strcmp(opt, "--notify")) {
			if (!strcmp(val, "poll"))
				notify = UKL_NOTIFY_POLL;
			else if (!strcmp(val, "irq"))
				notify = UKL_NOTIFY_IRQ;
			else
				die("--notify: poll or irq, not '%s'", val);
		} else if (!strcmp(opt, "--idle-us")) {
			if (!strcmp(val, "-1"))
				idle_us = -1;
			else if (parse_u64(opt, val) > 60 * 1000 * 1000)
				die("--idle-us: at most 60000000 (or -1: spin)");
			else
				idle_us = (long)parse_u64(opt, val);
		} else {
			usage();
		}
	}
	if (ramfd < 0 || ringfd < 0 || !dir || !parent || !have_ram || !have_below)
		usage();
	if (notify == UKL_NOTIFY_IRQ && ivshmem_fd < 0)
		die("--notify irq needs --ivshmem-fd: without a doorbell both sides poll");
	if (!ram_size || below_4g > ram_size || below_4g > (1ULL << 32) ||
	    ram_size - below_4g > (1ULL << 56))
		die("bad RAM geometry: --ram-size %llu --below-4g %llu",
		    (unsigned long long)ram_size, (unsigned long long)below_4g);
}

/* The file offset of guest-physical [gpa, gpa + len) in the RAM memfd, or
 * -1 when it is not all guest RAM (plan section 1: pc-i440fx). */
static int64_t gpa_to_off(uint64_t gpa, uint64_t len)
{
	const uint64_t four_g = 1ULL << 32;

	if (gpa < below_4g)
		return len <= below_4g - gpa ? (int64_t)gpa : -1;
	if (gpa >= four_g && gpa - four_g < ram_size - below_4g)
		return len <= ram_size - below_4g - (gpa - four_g) ?
		       (int64_t)(below_4g + (gpa - four_g)) : -1;
	return -1;
}

/* ---- Startup ---- */

static void drop_privileges(void)
{
	struct stat st;

	if (geteuid() != 0)
		return;
	if (fstat(rootfd, &st))
		die("fstat %s: %s", dir, strerror(errno));
	if (st.st_uid == 0)
		die("%s is owned by root; the shadow runs as DIR's owner: chown it to an unprivileged user", dir);
	if (setgroups(0, NULL))
		die("setgroups: %s", strerror(errno));
	if (setresgid(st.st_gid, st.st_gid, st.st_gid))
		die("setresgid %u: %s", (unsigned)st.st_gid, strerror(errno));
	if (setresuid(st.st_uid, st.st_uid, st.st_uid))
		die("setresuid %u: %s", (unsigned)st.st_uid, strerror(errno));

	uid_t r, e, s;
	gid_t rg, eg, sg;

	if (getresuid(&r, &e, &s) || r != st.st_uid || e != st.st_uid || s != st.st_uid ||
	    getresgid(&rg, &eg, &sg) || rg != st.st_gid || eg != st.st_gid || sg != st.st_gid ||
	    setuid(0) == 0)
		die("could not drop privileges to %u:%u", (unsigned)st.st_uid, (unsigned)st.st_gid);
}

static void landlock(void)
{
	long abi = syscall(SYS_landlock_create_ruleset, NULL, 0, LANDLOCK_CREATE_RULESET_VERSION);

	if (abi < 1) {
		fprintf(stderr, "%s: landlock: unavailable (%s)\n", prog, strerror(errno));
		return;
	}

	__u64 handled = (LANDLOCK_ACCESS_FS_MAKE_SYM << 1) - 1;	/* ABI 1: bits 0..12 */
	__u64 allowed = LANDLOCK_ACCESS_FS_READ_FILE | LANDLOCK_ACCESS_FS_WRITE_FILE |
			LANDLOCK_ACCESS_FS_READ_DIR | LANDLOCK_ACCESS_FS_REMOVE_DIR |
			LANDLOCK_ACCESS_FS_REMOVE_FILE | LANDLOCK_ACCESS_FS_MAKE_DIR |
			LANDLOCK_ACCESS_FS_MAKE_REG |
			/* renaming a symlink "makes" one; seccomp refuses symlinkat */
			LANDLOCK_ACCESS_FS_MAKE_SYM;

	/*
	 * mkdirat, unlinkat and renameat2 need MAKE_DIR, REMOVE_DIR and
	 * REMOVE_FILE, and REFER for a rename between directories (with ABI 1
	 * Landlock refuses those with EXDEV); ftruncate needs TRUNCATE (ABI 3).
	 * No MAKE_SYM, MAKE_FIFO, ...: renaming a symlink or a FIFO counts as
	 * making one, and is refused with EACCES.
	 */
	if (abi >= 2) {
		handled |= LANDLOCK_ACCESS_FS_REFER;
		allowed |= LANDLOCK_ACCESS_FS_REFER;
	}
	if (abi >= 3) {
		handled |= LANDLOCK_ACCESS_FS_TRUNCATE;
		allowed |= LANDLOCK_ACCESS_FS_TRUNCATE;
	}
	if (abi >= 5)
		handled |= LANDLOCK_ACCESS_FS_IOCTL_DEV;

	struct landlock_ruleset_attr attr = { .handled_access_fs = handled };
	struct landlock_path_beneath_attr beneath = { .allowed_access = allowed, .parent_fd = rootfd };
	int rs = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);

	if (rs < 0)
		die("landlock_create_ruleset (abi %ld): %s", abi, strerror(errno));
	if (syscall(SYS_landlock_add_rule, rs, LANDLOCK_RULE_PATH_BENEATH, &beneath, 0))
		die("landlock_add_rule %s: %s", dir, strerror(errno));
	if (syscall(SYS_landlock_restrict_self, rs, 0))
		die("landlock_restrict_self: %s", strerror(errno));
	close(rs);
	fprintf(stderr, "%s: landlock: abi %ld\n", prog, abi);
}

#define ARG_LO(n)	(offsetof(struct seccomp_data, args) + 8 * (n))

/*
 * The calls glibc 2.36 makes for what the shadow uses: fstat and fstatat are
 * newfstatat, ftruncate is ftruncate, mkdirat and unlinkat are themselves;
 * getdents64, renameat2 and statx go through syscall().
 */
static void seccomp(void)
{
	static const unsigned int allowed[] = {
		SYS_read, SYS_write, SYS_pread64, SYS_pwrite64, SYS_readv, SYS_writev, SYS_preadv, SYS_pwritev,
		SYS_preadv2, SYS_pwritev2, SYS_lseek, SYS_close, SYS_fstat, SYS_newfstatat,
		SYS_openat2, SYS_getdents64, SYS_mkdirat, SYS_unlinkat, SYS_renameat2,
		SYS_fsync, SYS_fdatasync, SYS_ftruncate, SYS_statx,
		SYS_clock_nanosleep, SYS_nanosleep, SYS_clock_gettime, SYS_ppoll, SYS_poll,
		SYS_getppid, SYS_brk, SYS_munmap, SYS_rt_sigreturn, SYS_restart_syscall,
		SYS_exit, SYS_exit_group,
	};
	struct sock_filter f[8 + 2 * sizeof(allowed) / sizeof(allowed[0]) + 11];
	unsigned int n = 0;

	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JGE | BPF_K, __X32_SYSCALL_BIT, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, allowed[i], 0, 1);
		f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	}
	/* fcntl: F_GETFL and F_SETFL only */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_fcntl, 0, 5);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_GETFL, 2, 0);
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, F_SETFL, 1, 0);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	/* mmap (malloc): never executable */
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_mmap, 0, 4);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(2));
	f[n++] = (struct sock_filter)BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, PROT_EXEC, 0, 1);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW);
	f[n++] = (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS);
	assert(n <= sizeof(f) / sizeof(f[0]));

	struct sock_fprog fp = { .len = (unsigned short)n, .filter = f };

	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fp))
		die("seccomp: %s", strerror(errno));
}

/* One message of QEMU's ivshmem server protocol: a 64-bit value and an fd */
static void ivshmem_send(int64_t value, int fd)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	struct iovec iov = { .iov_base = &value, .iov_len = sizeof(value) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (fd >= 0) {
		memset(&c, 0, sizeof(c));
		m.msg_control = c.buf;
		m.msg_controllen = sizeof(c.buf);
		c.h.cmsg_level = SOL_SOCKET;
		c.h.cmsg_type = SCM_RIGHTS;
		c.h.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&c.h), &fd, sizeof(int));
	}
	if (sendmsg(ivshmem_fd, &m, MSG_NOSIGNAL) != (ssize_t)sizeof(value))
		die("--ivshmem-fd %d: sending to QEMU: %s", ivshmem_fd, strerror(errno));
}

/*
 * Serve QEMU's ivshmem-doorbell (docs/specs/ivshmem-spec.rst in QEMU): the
 * protocol version, its peer ID (0), the ring, then one eventfd per peer and
 * vector: ours (HOST_PEER, rung by the guest's doorbell writes) and its own
 * (which raises the guest's MSI-X vector 0). QEMU reads these when it starts;
 * the socket buffers them until then.
 */
static void ivshmem_serve(void)
{
	struct stat st;

	if (ivshmem_fd < 0)
		return;
	if (fstat(ivshmem_fd, &st) || !S_ISSOCK(st.st_mode))
		die("--ivshmem-fd %d: not a socket", ivshmem_fd);
	host_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	guest_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (host_efd < 0 || guest_efd < 0)
		die("eventfd: %s", strerror(errno));
	ivshmem_send(0, -1);		/* IVSHMEM_PROTOCOL_VERSION */
	ivshmem_send(0, -1);		/* QEMU's peer ID */
	ivshmem_send(-1, ringfd);	/* the shared memory */
	ivshmem_send(HOST_PEER, host_efd);
	ivshmem_send(0, guest_efd);
}

static void on_term(int sig)
{
	(void)sig;
	stopping = 1;
}

static void startup(void)
{
	struct stat st;
	struct sigaction sa = { .sa_handler = on_term };	/* no SA_RESTART: sleeps end */
	struct rlimit rl;
	pid_t self = getpid();

	/* 1. The memory we were given */
	if (fstat(ramfd, &st))
		die("--ram-fd %d: %s", ramfd, strerror(errno));
	if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size < ram_size)
		die("--ram-fd %d: %lld bytes, less than --ram-size %llu", ramfd,
		    (long long)st.st_size, (unsigned long long)ram_size);
	if (fstat(ringfd, &st))
		die("--ring-fd %d: %s", ringfd, strerror(errno));
	if (!S_ISREG(st.st_mode) || st.st_size != UKL_RING_SIZE)
		die("--ring-fd %d: %lld bytes, not %u", ringfd, (long long)st.st_size, UKL_RING_SIZE);

	/* 2. The directory every path is resolved beneath */
	rootfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (rootfd < 0)
		die("%s: %s", dir, strerror(errno));

	/* 3. */
	drop_privileges();

	/* 4. After the uid change, which clears the parent-death signal */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL))
		die("PR_SET_PDEATHSIG: %s", strerror(errno));
	if (getppid() != parent)
		die("the parent process %d is gone", (int)parent);
	if (prctl(PR_SET_DUMPABLE, 0))
		die("PR_SET_DUMPABLE: %s", strerror(errno));

	/* 5. */
	ram = mmap(NULL, ram_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, ramfd, 0);
	if (ram == MAP_FAILED)
		die("mapping %llu bytes of guest RAM: %s", (unsigned long long)ram_size, strerror(errno));
	ring = mmap(NULL, UKL_RING_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, ringfd, 0);
	if (ring == MAP_FAILED)
		die("mapping the ring: %s", strerror(errno));
	hdr = (struct ukl_ring_hdr *)ring;
	umask(0);

	/* Odds and ends seccomp would refuse later */
	for (int i = 0; i < UKL_RFD_MAX; i++)
		rfd[i] = -1;
	for (int i = 0; i < UKL_RING_SLOTS; i++)
		held[i] = -1;
	fault_area = mmap(NULL, FAULT_SIZE, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (fault_area == MAP_FAILED)
		die("reserving %lu bytes that fault: %s", FAULT_SIZE, strerror(errno));
	if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < (rlim_t)UKL_RFD_MAX + 64) {
		rl.rlim_cur = rl.rlim_max < (rlim_t)UKL_RFD_MAX + 64 ? rl.rlim_max : (rlim_t)UKL_RFD_MAX + 64;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	prctl(PR_SET_TIMERSLACK, 1UL);
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) || sigaction(SIGINT, &sa, NULL))
		die("sigaction: %s", strerror(errno));
	/* A write past RLIMIT_FSIZE fails with EFBIG, as the guest's would */
	if (signal(SIGXFSZ, SIG_IGN) == SIG_ERR)
		die("SIGXFSZ: %s", strerror(errno));

	ivshmem_serve();

	/* 6. and 7.: Landlock needs no_new_privs as an unprivileged process */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1UL, 0UL, 0UL, 0UL))
		die("PR_SET_NO_NEW_PRIVS: %s", strerror(errno));
	landlock();
	seccomp();

	/* 8. The header; the magic last */
	__atomic_store_n(&hdr->magic, 0, __ATOMIC_RELAXED);
	hdr->version = UKL_RING_VERSION;
	hdr->nslots = UKL_RING_SLOTS;
	hdr->slot_size = UKL_SLOT_SIZE;
	hdr->slot_segs = UKL_SLOT_SEGS;
	hdr->notify = notify;
	hdr->host_asleep = 0;
	hdr->host_peer = host_efd >= 0 ? HOST_PEER : 0;
	hdr->host_pid = (__u32)self;
	hdr->ram_size = ram_size;
	hdr->below_4g = below_4g;
	hdr->heartbeat = 0;
	for (int i = 0; i < UKL_RING_SLOTS; i++) {
		struct ukl_slot *s = (struct ukl_slot *)(ring + 4096 + (size_t)i * UKL_SLOT_SIZE);

		__atomic_store_n(&s->state, UKL_SLOT_FREE, __ATOMIC_RELAXED);
	}
	__atomic_store_n(&hdr->magic, UKL_RING_MAGIC, __ATOMIC_RELEASE);

	static const char ready[] = "ready\n";

	if (write(STDOUT_FILENO, ready, sizeof(ready) - 1) != (ssize_t)sizeof(ready) - 1)
		die("writing 'ready': %s", strerror(errno));
}

/* ---- Serving ---- */

/* A request, copied out of its slot before anything in it is checked */
struct req {
	struct ukl_slot h;		/* only the 128-byte header is copied */
	int slot;			/* its index in the ring */
	uint32_t nsegs;			/* min(h.nsegs, UKL_SLOT_SEGS) */
	uint32_t inlen;			/* min(h.inline_len, UKL_SLOT_INLINE) */
	struct ukl_seg seg[UKL_SLOT_SEGS];
	unsigned char data[UKL_SLOT_INLINE];
};

/* What goes back besides ret */
struct resp {
	uint32_t outlen;
	unsigned char data[UKL_SLOT_INLINE];
};

static int host_fd(int64_t index)
{
	if (index < 0 || index >= UKL_RFD_MAX || rfd[index] < 0)
		return -1;
	return rfd[index];
}

/* Drop a reference to host fd @fd: the last one closes it */
static int fd_put(int fd)
{
	if (--fd_refs[fd])
		return 0;
	return close(fd) ? -errno : 0;
}

/* Slot @i's call is over: its file goes */
static void slot_release(int i)
{
	if (held[i] >= 0)
		fd_put(held[i]);
	held[i] = -1;
}

/* The file of a read or write: the slot's own for a further round trip */
static int rw_fd(const struct req *r)
{
	if (r->h.flags & UKL_SLOT_CONT)
		return held[r->slot];
	return host_fd(r->h.args[0]);
}

/* The error the guest found in its own memory (UKL_SLOT_ERR) */
static long guest_err(const struct req *r)
{
	int64_t err = r->h.args[5];

	return err < 0 && err >= -4095 ? err : -EINVAL;
}

/* The directory a path is resolved beneath: DIR for AT_FDCWD */
static int dir_fd(int64_t dirfd)
{
	return dirfd == AT_FDCWD ? rootfd : host_fd(dirfd);
}

/* The path in the request: NUL-terminated exactly at its end */
static long req_path(const struct req *r, const char **path)
{
	if (r->h.inline_len == 0)
		return -EFAULT;
	if (r->h.inline_len > PATH_IN_MAX)
		return -ENAMETOOLONG;
	if (r->data[r->inlen - 1] != 0 || memchr(r->data, 0, r->inlen - 1))
		return -EFAULT;
	stat_inline_bytes += r->inlen;
	*path = (const char *)r->data;
	return 0;
}

static long resolve_beneath(int dfd, const char *path, uint64_t flags, uint64_t mode)
{
	struct open_how how = {
		.flags = flags,
		.mode = mode,
		.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
	};
	long fd = syscall(SYS_openat2, dfd, path, &how, sizeof(how));

	return fd < 0 ? -errno : fd;
}

/*
 * The path beneath DIR of directory @dfd, ending in '/' (or "" for DIR), in
 * buf[*start..size): found by walking up through "..", naming each step by
 * the entry of its parent with its inode number.
 */
static long dir_path(int dfd, char *buf, size_t size, size_t *start)
{
	static unsigned char ents[8192];
	struct stat root, st;
	size_t pos = size - 1;
	int cur = dfd;
	long err = -EXDEV;

	buf[pos] = 0;
	if (fstat(rootfd, &root))
		return -errno;
	for (int depth = 0; depth < PATH_IN_MAX / 2; depth++) {
		struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
					.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS };
		bool found = false;
		int up;
		long n;

		if (fstat(cur, &st)) {
			err = -errno;
			break;
		}
		if (st.st_dev == root.st_dev && st.st_ino == root.st_ino) {
			*start = pos;
			err = 0;
			break;
		}
		up = (int)syscall(SYS_openat2, cur, "..", &how, sizeof(how));
		if (up < 0) {
			err = -errno;
			break;
		}
		if (cur != dfd)
			close(cur);
		cur = up;
		while (!found && (n = syscall(SYS_getdents64, cur, ents, sizeof(ents))) > 0) {
			for (long off = 0; off < n && !found; ) {
				const uint64_t *ino = (const uint64_t *)(ents + off);
				uint16_t reclen;
				const char *name = (const char *)ents + off + 19;
				size_t len = strlen(name);
				struct stat est;

				memcpy(&reclen, ents + off + 16, sizeof(reclen));
				off += reclen;
				if (*ino != st.st_ino || !strcmp(name, ".") || !strcmp(name, "..") ||
				    fstatat(cur, name, &est, AT_SYMLINK_NOFOLLOW) ||
				    est.st_dev != st.st_dev || est.st_ino != st.st_ino)
					continue;
				if (len + 1 > pos) {
					err = -ENAMETOOLONG;
					goto out;
				}
				buf[--pos] = '/';
				pos -= len;
				memcpy(buf + pos, name, len);
				found = true;
			}
		}
		if (!found) {
			err = -EXDEV;	/* moved away meanwhile */
			break;
		}
	}
out:
	if (cur != dfd)
		close(cur);
	return err;
}

/*
 * Open @path relative to @dfd, never outside DIR. RESOLVE_BENEATH judges
 * ".." against @dfd; Linux lets "sub/.." and "../x" relative to a
 * subdirectory reach anything in DIR, so a refusal from a subdirectory is
 * tried again from DIR with the subdirectory's path in front.
 */
static long resolve(int dfd, const char *path, uint64_t flags, uint64_t mode)
{
	static char buf[2 * PATH_IN_MAX];
	long fd = resolve_beneath(dfd, path, flags, mode), err;
	size_t start, len = strlen(path);

	if (fd != -EXDEV || dfd == rootfd || path[0] == '/')
		return fd;
	err = dir_path(dfd, buf, PATH_IN_MAX, &start);
	if (err)
		return err == -ENAMETOOLONG ? err : fd;
	if (PATH_IN_MAX - 1 - start + len >= PATH_IN_MAX)
		return -ENAMETOOLONG;
	memmove(buf, buf + start, PATH_IN_MAX - 1 - start);
	memcpy(buf + PATH_IN_MAX - 1 - start, path, len + 1);
	return resolve_beneath(rootfd, buf, flags, mode);
}

static long put_stat(int fd, struct resp *out)
{
	struct stat st;

	if (fstat(fd, &st))
		return -errno;
	memcpy(out->data, &st, sizeof(st));
	out->outlen = sizeof(st);
	stat_inline_bytes += sizeof(st);
	return 0;
}

static long do_openat(const struct req *r)
{
	const char *path;
	long err = req_path(r, &path);
	int dfd = dir_fd(r->h.args[0]);
	int64_t oflags = r->h.args[2];
	int index, fd;
	struct stat st;

	if (err)
		return err;
	if (dfd < 0)
		return -EBADF;
	for (index = 0; index < UKL_RFD_MAX && rfd[index] >= 0; index++)
		;
	if (index == UKL_RFD_MAX)
		return -EMFILE;

	uint64_t flags = ((uint64_t)oflags & ALLOWED_O_FLAGS) | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
	uint64_t mode = (oflags & O_CREAT) || (oflags & __O_TMPFILE) == __O_TMPFILE ?
			(uint64_t)r->h.args[3] & 07777 : 0;
	long res = resolve(dfd, path, flags, mode);

	if (res < 0)
		return res;
	fd = (int)res;
	if (fstat(fd, &st)) {
		err = -errno;
		close(fd);
		return err;
	}
	if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode)) {
		close(fd);
		return -ENXIO;	/* no FIFOs or devices: every call stays bounded */
	}
	if (fd >= HOST_FDS) {
		close(fd);
		return -EMFILE;
	}
	if (!(oflags & O_NONBLOCK)) {
		int fl = fcntl(fd, F_GETFL);

		if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK)) {
			err = -errno;
			close(fd);
			return err;
		}
	}
	rfd[index] = fd;
	fd_refs[fd] = 1;
	return index;
}

static long do_newfstatat(const struct req *r, struct resp *out)
{
	const char *path;
	long err = req_path(r, &path);
	int dfd = dir_fd(r->h.args[0]);
	int64_t flags = r->h.args[3];

	if (err)
		return err;
	if (flags & ~(int64_t)(AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE))
		return -EINVAL;
	if (dfd < 0)
		return -EBADF;
	if (!*path && (flags & AT_EMPTY_PATH))
		return put_stat(dfd, out);

	long fd = resolve(dfd, path, O_PATH | O_CLOEXEC | (flags & AT_SYMLINK_NOFOLLOW ? O_NOFOLLOW : 0), 0);

	if (fd < 0)
		return fd;
	err = put_stat((int)fd, out);
	close((int)fd);
	return err;
}

/*
 * read, write, pread64, pwrite64: the buffer is the request's segments. The
 * checks come in vfs_read()'s and vfs_write()'s order: the file, its mode,
 * then what the guest found wrong with its buffer (UKL_SLOT_ERR: what
 * access_ok() or rw_verify_area() refused), then our call of the same
 * system call, whose copy faults where the guest's would (UKL_SEG_FAULT). A
 * readv or writev comes here only without segments: with the error of an
 * iovec that the guest could not import, which Linux finds before the mode,
 * or to move no bytes at all.
 */
static long do_rw(const struct req *r, int op)
{
	bool to_guest = op == SYS_read || op == SYS_pread64 || op == SYS_readv;
	bool vec = op == SYS_readv || op == SYS_writev;
	uint64_t count = (uint64_t)r->h.args[2], sum = 0;
	off_t pos = (off_t)r->h.args[3];
	struct iovec iov[UKL_SLOT_SEGS];
	int fd = rw_fd(r), fl;
	ssize_t n;

	if (fd < 0)
		return -EBADF;
	if (r->h.flags & UKL_SLOT_ERR) {
		if (vec)
			return guest_err(r);
		fl = fcntl(fd, F_GETFL);
		if (fl < 0)
			return -errno;
		fl &= O_ACCMODE;
		if (fl != O_RDWR && fl != (to_guest ? O_RDONLY : O_WRONLY))
			return -EBADF;
		return guest_err(r);
	}
	if (r->h.nsegs > UKL_SLOT_SEGS)
		return -EINVAL;
	for (uint32_t i = 0; i < r->nsegs; i++) {
		if (r->seg[i].len == 0 || __builtin_add_overflow(sum, r->seg[i].len, &sum))
			return -EINVAL;
	}
	if (sum != count || count > SSIZE_MAX)
		return -EINVAL;
	if (!r->nsegs) {
		/* No bytes: the call alone answers (EBADF, EISDIR, 0...) */
		switch (op) {
		case SYS_read:
			n = read(fd, fault_area, 0);
			break;
		case SYS_write:
			n = write(fd, fault_area, 0);
			break;
		case SYS_pread64:
			n = pread(fd, fault_area, 0, pos);
			break;
		case SYS_pwrite64:
			n = pwrite(fd, fault_area, 0, pos);
			break;
		case SYS_readv:
			n = readv(fd, iov, 0);
			break;
		default:
			n = writev(fd, iov, 0);
			break;
		}
		return n < 0 ? -errno : n;
	}
	if (vec)
		return -EINVAL;
	for (uint32_t i = 0; i < r->nsegs; i++) {
		int64_t off;

		if (r->seg[i].gpa == UKL_SEG_FAULT) {
			if (r->seg[i].len > FAULT_SIZE)
				return -EINVAL;
			iov[i].iov_base = fault_area;
			iov[i].iov_len = r->seg[i].len;
			continue;
		}
		off = gpa_to_off(r->seg[i].gpa, r->seg[i].len);
		if (off < 0)
			return -EFAULT;
		iov[i].iov_base = ram + off;
		iov[i].iov_len = r->seg[i].len;
	}
	switch (op) {
	case SYS_read:
		n = readv(fd, iov, (int)r->nsegs);
		break;
	case SYS_write:
		n = writev(fd, iov, (int)r->nsegs);
		break;
	case SYS_pread64:
		n = preadv(fd, iov, (int)r->nsegs, pos);
		break;
	default:
		n = pwritev(fd, iov, (int)r->nsegs, pos);
		break;
	}
	if (n < 0)
		return -errno;
	stat_zc_bytes += (uint64_t)n;
	return n;
}

/*
 * A round trip of a read or write, and what the slot holds after it: the
 * file, when the guest may send another round trip of the same call
 * (UKL_SLOT_MORE) and this one moved every byte it asked for.
 */
static long do_rw_trip(const struct req *r, int op)
{
	int fd = rw_fd(r);
	long n = do_rw(r, op);

	if (!(r->h.flags & UKL_SLOT_MORE) || n <= 0 || (uint64_t)n != (uint64_t)r->h.args[2]) {
		slot_release(r->slot);
	} else if (held[r->slot] != fd) {
		held[r->slot] = fd;
		fd_refs[fd]++;
	}
	return n;
}

/* ---- Directories, and operations on a path's last component ---- */

/*
 * A path for mkdirat, unlinkat or renameat2: its parent, opened O_PATH beneath
 * the request's directory, and its last component, which the operation names
 * relative to that. The component never holds a '/', and "." and ".." are
 * flagged for the caller to refuse, so every such operation stays beneath DIR.
 */
struct split {
	int pfd;			/* the parent, O_PATH; -1 before it is open */
	const char *last;		/* in buf */
	bool slash;			/* the path ended in '/' */
	int dots;			/* last is "." (1) or ".." (2), else 0 */
	char buf[PATH_IN_MAX];
};

static long split_path(int dfd, const char *path, struct split *sp)
{
	size_t len = strlen(path);
	const char *parent = ".";
	char *slash;
	long fd;

	sp->pfd = -1;
	sp->slash = false;
	if (path[0] == '/')
		return -EXDEV;		/* as openat2 RESOLVE_BENEATH answers absolute paths */
	if (len == 0)
		return -ENOENT;
	memcpy(sp->buf, path, len + 1);
	/* "a/b/" names b; buf[0] is not '/', so something is left */
	while (sp->buf[len - 1] == '/') {
		sp->buf[--len] = 0;
		sp->slash = true;
	}
	slash = strrchr(sp->buf, '/');
	if (slash) {
		*slash = 0;		/* "a//b": the parent "a/" */
		parent = sp->buf;
		sp->last = slash + 1;
	} else {
		sp->last = sp->buf;
	}
	fd = resolve(dfd, parent, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return fd;
	sp->pfd = (int)fd;
	sp->dots = !strcmp(sp->last, ".") ? 1 : !strcmp(sp->last, "..") ? 2 : 0;
	return 0;
}

static void split_done(struct split *sp)
{
	if (sp->pfd >= 0)
		close(sp->pfd);
	sp->pfd = -1;
}

/* Whether the last component is a directory (not following a symlink): 1, 0 or -errno */
static long last_is_dir(const struct split *sp)
{
	struct stat st;

	if (fstatat(sp->pfd, sp->last, &st, AT_SYMLINK_NOFOLLOW))
		return -errno;
	return S_ISDIR(st.st_mode);
}

/* getdents64: the entries come back inline (directory listings are metadata) */
static long do_getdents64(const struct req *r, struct resp *out)
{
	int fd = host_fd(r->h.args[0]);
	uint64_t count = (uint64_t)r->h.args[2];
	long n;

	if (fd < 0)
		return -EBADF;
	if (count > UKL_SLOT_INLINE)
		return -EINVAL;
	n = syscall(SYS_getdents64, fd, out->data, (size_t)count);
	if (n < 0)
		return -errno;
	out->outlen = (uint32_t)n;
	stat_inline_bytes += (uint64_t)n;
	return n;
}

static long do_mkdirat(const struct req *r)
{
	struct split sp = { .pfd = -1 };
	const char *path;
	long err = req_path(r, &path);
	int dfd = dir_fd(r->h.args[0]);

	if (err)
		return err;
	if (dfd < 0)
		return -EBADF;
	err = split_path(dfd, path, &sp);
	if (!err)
		err = sp.dots ? -EEXIST :
		      mkdirat(sp.pfd, sp.last, (mode_t)(r->h.args[2] & 07777)) ? -errno : 0;
	split_done(&sp);
	return err;
}

static long do_unlinkat(const struct req *r)
{
	struct split sp = { .pfd = -1 };
	const char *path;
	long err = req_path(r, &path);
	int dfd = dir_fd(r->h.args[0]);
	int64_t flags = r->h.args[2];

	if (err)
		return err;
	if (flags & ~(int64_t)AT_REMOVEDIR)
		return -EINVAL;
	if (dfd < 0)
		return -EBADF;
	err = split_path(dfd, path, &sp);
	if (err)
		goto out;
	if (flags & AT_REMOVEDIR) {
		/* As Linux: rmdir "." is EINVAL, rmdir ".." ENOTEMPTY */
		if (sp.dots) {
			err = sp.dots == 1 ? -EINVAL : -ENOTEMPTY;
			goto out;
		}
	} else {
		if (sp.dots) {
			err = -EISDIR;
			goto out;
		}
		if (sp.slash) {
			/* unlink "f/": Linux refuses what is not a directory */
			err = last_is_dir(&sp);
			if (err >= 0)
				err = err ? -EISDIR : -ENOTDIR;
			goto out;
		}
	}
	err = unlinkat(sp.pfd, sp.last, (int)flags) ? -errno : 0;
out:
	split_done(&sp);
	return err;
}

/*
 * renameat2: data[] is oldpath NUL newpath NUL, args[1] the offset of newpath.
 * Both parents are resolved beneath DIR; the rename is of the last components.
 */
static long do_renameat2(const struct req *r)
{
	struct split from = { .pfd = -1 }, to = { .pfd = -1 };
	const unsigned int allowed = RENAME_NOREPLACE | RENAME_EXCHANGE;
	int64_t flags = r->h.args[4], off = r->h.args[1];
	uint32_t len = r->h.inline_len;	/* r->inlen, once it is <= PATH_IN_MAX */
	int odfd = dir_fd(r->h.args[0]), ndfd = dir_fd(r->h.args[2]);
	long err;

	if ((flags & ~(int64_t)allowed) || flags == allowed)
		return -EINVAL;
	if (len == 0)
		return -EFAULT;
	if (len > PATH_IN_MAX)
		return -ENAMETOOLONG;
	if (off <= 0 || off >= (int64_t)len || r->data[off - 1] != 0 || r->data[len - 1] != 0 ||
	    memchr(r->data, 0, (size_t)off - 1) || memchr(r->data + off, 0, len - 1 - (size_t)off))
		return -EFAULT;
	stat_inline_bytes += len;
	if (odfd < 0 || ndfd < 0)
		return -EBADF;

	err = split_path(odfd, (const char *)r->data, &from);
	if (!err)
		err = split_path(ndfd, (const char *)r->data + off, &to);
	if (err)
		goto out;
	/* As Linux: a last component "." or ".." is busy, or exists */
	if (from.dots || to.dots) {
		err = !from.dots && (flags & RENAME_NOREPLACE) ? -EEXIST : -EBUSY;
		goto out;
	}
	/* A trailing slash names a directory */
	if (from.slash || to.slash) {
		err = last_is_dir(&from);
		if (err < 0)
			goto out;
		if (!err && (from.slash || (!(flags & RENAME_EXCHANGE) && to.slash))) {
			err = -ENOTDIR;
			goto out;
		}
		if ((flags & RENAME_EXCHANGE) && to.slash) {
			err = last_is_dir(&to);
			if (err <= 0) {
				err = err ? err : -ENOTDIR;
				goto out;
			}
		}
	}
	err = syscall(SYS_renameat2, from.pfd, from.last, to.pfd, to.last, (unsigned int)flags) ? -errno : 0;
out:
	split_done(&from);
	split_done(&to);
	return err;
}

/* statx: as newfstatat, with the struct statx inline */
static long do_statx(const struct req *r, struct resp *out)
{
	const int64_t allowed = AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT | AT_STATX_SYNC_TYPE;
	const char *path;
	long err = req_path(r, &path);
	int dfd = dir_fd(r->h.args[0]), fd;
	int64_t flags = r->h.args[2];
	unsigned int mask = (unsigned int)r->h.args[3];	/* an unsigned int, as the kernel reads it */
	struct statx *stx = (struct statx *)out->data;

	if (err)
		return err;
	if (flags & ~allowed)
		return -EINVAL;
	if (dfd < 0)
		return -EBADF;
	if (!*path && (flags & AT_EMPTY_PATH)) {
		fd = dfd;
	} else {
		long res = resolve(dfd, path, O_PATH | O_CLOEXEC | (flags & AT_SYMLINK_NOFOLLOW ? O_NOFOLLOW : 0), 0);

		if (res < 0)
			return res;
		fd = (int)res;
	}
	err = syscall(SYS_statx, fd, "", AT_EMPTY_PATH | (int)(flags & AT_STATX_SYNC_TYPE), mask, stx) ? -errno : 0;
	if (fd != dfd)
		close(fd);
	if (err)
		return err;
	out->outlen = sizeof(*stx);
	stat_inline_bytes += sizeof(*stx);
	return 0;
}

static long execute(const struct req *r, struct resp *out)
{
	int fd;
	off_t off;

	switch (r->h.op) {
	case UKL_ROP_NULL:
		return -ENOSYS;
	case UKL_ROP_HELLO:
		for (int i = 0; i < UKL_RFD_MAX; i++) {
			if (rfd[i] >= 0) {
				fd_put(rfd[i]);
				rfd[i] = -1;
			}
		}
		for (int i = 0; i < UKL_RING_SLOTS; i++)
			slot_release(i);
		return 0;
	case SYS_openat:
		return do_openat(r);
	case SYS_close:
		fd = host_fd(r->h.args[0]);
		if (fd < 0)
			return -EBADF;
		rfd[r->h.args[0]] = -1;
		/* A call in progress on the file keeps it open (held[]) */
		return fd_put(fd);
	case SYS_lseek:
		fd = host_fd(r->h.args[0]);
		if (fd < 0)
			return -EBADF;
		/* whence is an unsigned int, as ksys_lseek() takes it */
		off = lseek(fd, (off_t)r->h.args[1], (int)(unsigned int)r->h.args[2]);
		return off < 0 ? -errno : off;
	case SYS_read:
	case SYS_write:
	case SYS_pread64:
	case SYS_pwrite64:
	case SYS_readv:
	case SYS_writev:
		return do_rw_trip(r, (int)r->h.op);
	case SYS_fstat:
		fd = host_fd(r->h.args[0]);
		if (fd < 0)
			return -EBADF;
		return put_stat(fd, out);
	case SYS_newfstatat:
		return do_newfstatat(r, out);
	case SYS_getdents64:
		return do_getdents64(r, out);
	case SYS_mkdirat:
		return do_mkdirat(r);
	case SYS_unlinkat:
		return do_unlinkat(r);
	case SYS_renameat2:
		return do_renameat2(r);
	case SYS_fsync:
	case SYS_fdatasync:
		fd = host_fd(r->h.args[0]);
		if (fd < 0)
			return -EBADF;
		return (r->h.op == SYS_fsync ? fsync(fd) : fdatasync(fd)) ? -errno : 0;
	case SYS_ftruncate:
		/* do_sys_ftruncate() checks the length before the file */
		if (r->h.args[1] < 0)
			return -EINVAL;
		fd = host_fd(r->h.args[0]);
		if (fd < 0)
			return -EBADF;
		return ftruncate(fd, (off_t)r->h.args[1]) ? -errno : 0;
	case SYS_statx:
		return do_statx(r, out);
	default:
		return -ENOSYS;
	}
}

/* Does slot i hold a request not answered yet? */
static bool slot_pending(const struct ukl_slot *s, int i)
{
	return __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == UKL_SLOT_REQ &&
	       !(served[i] && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == last_seq[i]);
}

/* What serve_slot() did */
enum served { NONE, POLLED, SLEPT };

/* Answer slot i if it holds a new request: for a thread that polls or sleeps */
static enum served serve_slot(int i)
{
	static struct req r;
	static struct resp out;
	struct ukl_slot *s = (struct ukl_slot *)(ring + 4096 + (size_t)i * UKL_SLOT_SIZE);
	uint32_t state = __atomic_load_n(&s->state, __ATOMIC_ACQUIRE);
	long ret;

	if (state != UKL_SLOT_REQ)
		return NONE;
	/* The snapshot: the guest may go on writing the slot; we look at this only */
	memcpy(&r.h, s, offsetof(struct ukl_slot, seg));
	if (served[i] && r.h.seq == last_seq[i])
		return NONE;
	/* Only the parts the op reads: segments for I/O, data for paths */
	r.nsegs = 0;
	r.inlen = 0;
	r.slot = i;
	/* A call's first round trip: what the slot's last call held goes */
	if (!(r.h.flags & UKL_SLOT_CONT))
		slot_release(i);
	if (r.h.op == SYS_read || r.h.op == SYS_write || r.h.op == SYS_pread64 || r.h.op == SYS_pwrite64)
		r.nsegs = r.h.nsegs < UKL_SLOT_SEGS ? r.h.nsegs : UKL_SLOT_SEGS;
	if (r.h.op == SYS_openat || r.h.op == SYS_newfstatat || r.h.op == SYS_mkdirat ||
	    r.h.op == SYS_unlinkat || r.h.op == SYS_renameat2 || r.h.op == SYS_statx)
		r.inlen = r.h.inline_len < UKL_SLOT_INLINE ? r.h.inline_len : UKL_SLOT_INLINE;
	memcpy(r.seg, s->seg, r.nsegs * sizeof(r.seg[0]));
	memcpy(r.data, s->data, r.inlen);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);

	out.outlen = 0;
	ret = execute(&r, &out);
	stat_calls++;

	if (out.outlen)
		memcpy(s->data, out.data, out.outlen);
	s->inline_len = out.outlen;
	s->ret = ret;
	s->ack = r.h.seq;
	served[i] = true;
	last_seq[i] = r.h.seq;
	__atomic_store_n(&s->state, UKL_SLOT_DONE, __ATOMIC_RELEASE);
	if (!(r.h.flags & UKL_SLOT_IRQ))
		return POLLED;
	/* The thread sleeps: its interrupt (a full counter just waits) */
	if (guest_efd >= 0 && write(guest_efd, &(uint64_t){ 1 }, 8) < 0 && errno != EAGAIN)
		die("the guest's doorbell: %s", strerror(errno));
	return SLEPT;
}

/*
 * Sleep until the guest rings (or 100 ms pass: the parent check). Saying so
 * first and then looking at the slots once more, with a full barrier between,
 * pairs with the guest's store of a request, barrier, load of host_asleep.
 */
static void sleep_for_doorbell(void)
{
	struct pollfd p = { .fd = host_efd, .events = POLLIN };
	struct timespec ts = { .tv_sec = 0, .tv_nsec = 100 * 1000 * 1000 };
	uint64_t v;
	bool pending = false;

	__atomic_store_n(&hdr->host_asleep, 1, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	for (int i = 0; i < UKL_RING_SLOTS && !pending; i++)
		pending = slot_pending((struct ukl_slot *)(ring + 4096 + (size_t)i * UKL_SLOT_SIZE), i);
	if (!pending && ppoll(&p, 1, &ts, NULL) > 0 && read(host_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
		die("the host's doorbell: %s", strerror(errno));
	__atomic_store_n(&hdr->host_asleep, 0, __ATOMIC_RELAXED);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static void serve(void)
{
	const uint64_t check_ns = 100 * 1000 * 1000;	/* the parent, while idle */
	uint64_t last_busy = now_ns(), last_check = last_busy;
	long sleep_ns = 0;
	uint64_t beats = 0;

	while (!stopping) {
		bool busy = false, polled = false;

		for (int i = 0; i < UKL_RING_SLOTS; i++) {
			enum served what = serve_slot(i);

			busy |= what != NONE;
			polled |= what == POLLED;
		}
		__atomic_store_n(&hdr->heartbeat, ++beats, __ATOMIC_RELAXED);

		uint64_t now = now_ns();

		/* Only a polling guest keeps us spinning: with sleepers we sleep too */
		if (polled)
			last_busy = now;
		if (busy) {
			sleep_ns = 0;
			continue;
		}
		if (now - last_check >= check_ns) {
			last_check = now;
			if (getppid() != parent)
				exit(0);
		}
		if (idle_us < 0 || now - last_busy < (uint64_t)idle_us * 1000) {
			__builtin_ia32_pause();
			continue;
		}
		if (host_efd >= 0) {
			sleep_for_doorbell();
			continue;
		}
		/* Back off: 10 us, doubling to 1 ms */
		sleep_ns = sleep_ns ? sleep_ns * 2 : 10000;
		if (sleep_ns > 1000000)
			sleep_ns = 1000000;

		struct timespec ts = { .tv_sec = 0, .tv_nsec = sleep_ns };

		clock_nanosleep(CLOCK_MONOTONIC, 0, &ts, NULL);
	}
}

int main(int argc, char **argv)
{
	parse_args(argc, argv);
	startup();
	serve();
	fprintf(stderr, "%s: calls=%llu zero-copy=%llu inline=%llu\n", prog,
		(unsigned long long)stat_calls, (unsigned long long)stat_zc_bytes,
		(unsigned long long)stat_inline_bytes);
	return 0;
}
