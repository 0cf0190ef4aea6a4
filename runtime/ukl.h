/*
 * ukl.h: calling a kernel function directly from a UKL application, and
 * the thread's UKL options.
 *
 *	long ukl_call(fn, a1, a2, a3, a4, a5)
 *
 * enters the kernel as every system call does (system call UKL_NR_CALL:
 * kernel stack, context tracking, RCU, lockdep and SMAP as for any other),
 * calls the kernel function @fn with up to five integer or pointer
 * arguments, and returns to the application as a system call returns
 * (pending signals are delivered, the scheduler may run). The result is
 * @fn's return value as a long (a function returning int or void leaves
 * the upper bits or all of it undefined), or:
 *   -EFAULT  @fn is not in the kernel's text (NULL, the application's own
 *            code, data, a user-half address);
 *   -ENOSYS  the caller is an ordinary process (ring 3), or the kernel is
 *            not a UKL kernel.
 *
 * @fn runs in the calling task's system call context and may sleep. Its
 * arguments are passed as they are: a pointer to the application's memory
 * is a user pointer, which only functions that use the kernel's uaccess
 * functions on it (copy_from_user(): ksys_write(), for example) may be
 * given; one that dereferences it directly faults on SMAP in kernel
 * context, a kernel oops. The result is a system call's: with a signal
 * pending, -ERESTARTSYS and its kin run @fn again or become -EINTR.
 * Declare the
 * kernel function as the kernel declares it, with UKL_KERNEL_SYMBOL:
 *
 *	void msleep(unsigned int msecs) UKL_KERNEL_SYMBOL(msleep);
 *	...
 *	ukl_call(msleep, 30);
 *
 * (the application's own names are kept apart from the kernel's; the final
 * link of the kernel resolves this one, and fails naming it if the kernel
 * has no such symbol). `ukl build` and ukl-cc put this directory on the
 * include path.
 */
#ifndef UKL_CALL_H
#define UKL_CALL_H

#include <errno.h>

/* The system call number of a direct call (the kernel's asm/ukl.h) */
#define UKL_NR_CALL 0x10000

/* The kernel's symbol NAME, for a declaration in the application */
#define UKL_KERNEL_SYMBOL(name) __asm__("ukl_kernel." #name)

/*
 * A SYSCALL instruction: ukl-cc and `ukl build` turn it into a call of the
 * UKL system call entry in the application, and it stays one elsewhere.
 */
static inline long ukl_call6(const void *fn, long a1, long a2, long a3, long a4, long a5)
{
	register long r10 __asm__("r10") = a3;
	register long r8 __asm__("r8") = a4;
	register long r9 __asm__("r9") = a5;
	long ret;

	__asm__ volatile ("syscall"
			  : "=a"(ret)
			  : "0"((long)UKL_NR_CALL), "D"(fn), "S"(a1), "d"(a2), "r"(r10), "r"(r8), "r"(r9)
			  : "rcx", "r11", "memory");
	return ret;
}

#define UKL_CALL_ARGS_(fn, a1, a2, a3, a4, a5, ...) \
	ukl_call6((const void *)(fn), (long)(a1), (long)(a2), (long)(a3), (long)(a4), (long)(a5))
#define UKL_CALL_COUNT_(_1, _2, _3, _4, _5, _6, _7, n, ...) n
/*
 * ukl_call(fn, args...): up to five arguments, missing ones are 0 (a sixth
 * is a compile error: "size of unnamed array is negative")
 */
#define ukl_call(...) \
	((void)sizeof(char[UKL_CALL_COUNT_(__VA_ARGS__, 7, 6, 5, 4, 3, 2, 1, 0) <= 6 ? 1 : -1]), \
	 UKL_CALL_ARGS_(__VA_ARGS__, 0, 0, 0, 0, 0, 0))

/*
 * Options of the calling thread (the kernel's asm/ukl.h;
 * Documentation/x86/ukl.rst, "Options"; `ukl run --opts` and profiles such
 * as base+byp set those the application starts with):
 *
 *	long ukl_opts(unsigned long set, unsigned long clear)
 *
 * turns the options in @set on and those in @clear off for the calling
 * thread (threads and children it creates later inherit them) and returns
 * the previous ones: ukl_opts(0, 0) only reads them. -EINVAL: an unknown
 * option bit. In an ordinary process (a program built for `linux`) it does
 * nothing and returns -ENOSYS.
 */
#define UKL_NR_OPTS 0x10001
#define UKL_OPT_BYP 0x01	/* system calls without pending work skip entry/exit work */
#define UKL_OPT_RET 0x02	/* returns from interruptions jump back, no IRET */
#define UKL_OPT_SHORTCUT 0x08	/* read/write/send/recv on TCP take the shortcuts below */

static inline long ukl_opts(unsigned long set, unsigned long clear)
{
	long ret;

	__asm__ volatile ("syscall"
			  : "=a"(ret)
			  : "0"((long)UKL_NR_OPTS), "D"(set), "S"(clear)
			  : "rcx", "r11", "memory");
	return ret;
}

/*
 * Run to completion (Documentation/x86/ukl.rst, "Run to completion"):
 *
 *	long ukl_rtc_begin(long max_us)
 *	long ukl_rtc_end(void)
 *
 * Between them the calling thread is not preempted when it is interrupted
 * (interrupts are still handled), and signals that arrive wait for the end
 * or for the thread's next system call, except SIGKILL and a fault's
 * signal (SIGSEGV, SIGBUS, SIGILL, SIGTRAP, SIGFPE, SIGSYS); raise() still
 * delivers before it returns. The thread's own system calls and page faults
 * may reschedule as the kernel would: prefault what a run touches.
 * The run ends anyway after @max_us microseconds (at most the kernel's
 * limit, ukl.opts=rtc-max-us=N, default 10000), so a thread cannot hold a
 * CPU for ever.
 *
 * ukl_rtc_begin() returns the bound granted in microseconds, -EBUSY if the
 * thread already runs to completion, -EINVAL for @max_us <= 0.
 * ukl_rtc_end() returns 0, or -ETIME if the bound had passed (the thread
 * was preemptible from then on), or -EINVAL if no run was begun; deferred
 * rescheduling and signals happen before it returns. New threads and
 * children do not inherit a run. In an ordinary process both do nothing
 * and return -ENOSYS.
 */
#define UKL_NR_RTC 0x10002

static inline long ukl_rtc_(long max_us)
{
	long ret;

	__asm__ volatile ("syscall"
			  : "=a"(ret)
			  : "0"((long)UKL_NR_RTC), "D"(max_us)
			  : "rcx", "r11", "memory");
	return ret;
}

static inline long ukl_rtc_begin(long max_us)
{
	return max_us > 0 ? ukl_rtc_(max_us) : -EINVAL;
}

static inline long ukl_rtc_end(void)
{
	return ukl_rtc_(0);
}

/*
 * Remote system calls (Documentation/x86/ukl-remote.rst; `ukl run --remote DIR`
 * starts the host's side, a shadow process confined to DIR):
 *
 *	int ukl_remote_enable(void)	the calling thread may use remote files
 *	int ukl_remote_on(void)		its paths name files in DIR on the host
 *	int ukl_remote_off(void)	its paths name local files again
 *	int ukl_remote_disable(void)	remote files are unreachable (EBADF)
 *	int ukl_remote_null(void)	one round trip to the host (benchmarks)
 *	int ukl_remote_poll(void)	wait for the host's answers spinning
 *	int ukl_remote_irq(void)	wait for them asleep, until its interrupt
 *
 * Each returns 0, or -1 with errno set. Once enabled, read, write, pread,
 * pwrite, readv, writev, lseek, fstat, ftruncate, fsync, fdatasync,
 * getdents64 (readdir) and close of a remote file descriptor (one that
 * ukl_remote_fd() accepts) run on the host, and so do openat, fstatat,
 * statx, mkdirat, unlinkat and renameat relative to a remote directory;
 * while on, so do open, mkdir, unlink, rmdir, rename and the *at calls
 * relative to the working directory, relative to DIR there, which they
 * cannot leave (EXDEV). Descriptors of local files always stay local, so
 * the console works while on. Everything else (mmap, fork, exec, signals,
 * dup, fcntl, poll...) stays local; on a remote descriptor it fails with
 * EBADF.
 * A thread waits as `ukl run --remote-notify` says (default: it polls)
 * until it calls ukl_remote_poll() or ukl_remote_irq(); the latter fails
 * with EPERM before enable and ENODEV without the host's interrupt.
 * Threads inherit the setting; children with a file table of their own,
 * and exec, start without remote files. Errors of enable: ENODEV (no
 * --remote), EBUSY (another process that is still alive has the host's
 * files), EMFILE (fs.nr_open is above UKL_REMOTE_FD_BASE). A thread with
 * remote calls enabled has no UKL_OPT_BYP. In an ordinary process (a
 * program built for `linux`) each fails with ENOSYS.
 */
#define UKL_NR_REMOTE 0x10003
#define UKL_REMOTE_FD_BASE 0x40000000

static inline long ukl_remote_(long op)
{
	long ret;

	__asm__ volatile ("syscall"
			  : "=a"(ret)
			  : "0"((long)UKL_NR_REMOTE), "D"(op)
			  : "rcx", "r11", "memory");
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return 0;
}

static inline int ukl_remote_enable(void) { return (int)ukl_remote_(0); }
static inline int ukl_remote_disable(void) { return (int)ukl_remote_(1); }
static inline int ukl_remote_on(void) { return (int)ukl_remote_(2); }
static inline int ukl_remote_off(void) { return (int)ukl_remote_(3); }
static inline int ukl_remote_null(void) { return (int)ukl_remote_(4); }
static inline int ukl_remote_poll(void) { return (int)ukl_remote_(5); }
static inline int ukl_remote_irq(void) { return (int)ukl_remote_(6); }
static inline int ukl_remote_fd(int fd) { return fd >= UKL_REMOTE_FD_BASE; }

/*
 * TCP shortcuts (Documentation/x86/ukl.rst, "TCP shortcuts"):
 *
 *	ssize_t ukl_tcp_read(int fd, void *buf, size_t count)
 *	ssize_t ukl_tcp_write(int fd, const void *buf, size_t count)
 *	ssize_t ukl_tcp_recv(int fd, void *buf, size_t len, int flags)
 *	ssize_t ukl_tcp_send(int fd, const void *buf, size_t len, int flags)
 *
 * are read(), write(), recv() and send(), with their results and errno,
 * that go straight to the kernel's TCP functions when @fd is a TCP socket
 * (past the VFS and the socket layer) and take the ordinary path for any
 * other descriptor. They are not pthread cancellation points. In a
 * program built for `linux` they are the ordinary system calls, made
 * directly (without the C library's cancellation-point wrapper). Where
 * the kernel answers ENOSYS (a kernel without UKL's shortcuts), they
 * fall back to the ordinary system calls too. UKL_OPT_SHORTCUT (ukl.opts=shortcut, `--opts shortcut`)
 * gives unmodified read(), write(), recv() and send() the same paths.
 */
#define UKL_NR_TCP_READ 0x10004
#define UKL_NR_TCP_WRITE 0x10005
#define UKL_NR_TCP_RECV 0x10006
#define UKL_NR_TCP_SEND 0x10007

static inline long ukl_tcp_(long nr, long linux_nr, long fd, const void *buf, unsigned long n, long flags)
{
	register long r10 __asm__("r10") = flags;
	register long r8 __asm__("r8") = 0;
	register long r9 __asm__("r9") = 0;
	long ret = -ENOSYS;

#ifdef __UKL__		/* built for a UKL kernel (ukl-cc -D__UKL__) */
	__asm__ volatile ("syscall"
			  : "=a"(ret), "+r"(r10), "+r"(r8), "+r"(r9)
			  : "0"(nr), "D"(fd), "S"(buf), "d"(n)
			  : "rcx", "r11", "memory");
#else
	(void)nr;	/* built for linux: straight to the system call */
#endif
	if (ret == -ENOSYS) {	/* not a UKL application: the system call */
		r10 = flags;
		r8 = 0;
		r9 = 0;
		__asm__ volatile ("syscall"
				  : "=a"(ret), "+r"(r10), "+r"(r8), "+r"(r9)
				  : "0"(linux_nr), "D"(fd), "S"(buf), "d"(n)
				  : "rcx", "r11", "memory");
	}
	if (ret < 0 && ret > -4096) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

/* x86-64 numbers of read, write, recvfrom and sendto */
static inline long ukl_tcp_read(int fd, void *buf, unsigned long count)
{
	return ukl_tcp_(UKL_NR_TCP_READ, 0, fd, buf, count, 0);
}

static inline long ukl_tcp_write(int fd, const void *buf, unsigned long count)
{
	return ukl_tcp_(UKL_NR_TCP_WRITE, 1, fd, buf, count, 0);
}

static inline long ukl_tcp_recv(int fd, void *buf, unsigned long len, int flags)
{
	return ukl_tcp_(UKL_NR_TCP_RECV, 45, fd, buf, len, flags);
}

static inline long ukl_tcp_send(int fd, const void *buf, unsigned long len, int flags)
{
	return ukl_tcp_(UKL_NR_TCP_SEND, 44, fd, buf, len, flags);
}

#endif /* UKL_CALL_H */
