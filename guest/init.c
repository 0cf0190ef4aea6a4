// SPDX-License-Identifier: GPL-2.0
/*
 * ukl-init: PID 1 of every UKL image.
 *
 * Mounts /proc, /sys, /dev and /tmp, brings up loopback and eth0 (QEMU user
 * networking's 10.0.2.15, so that `ukl run --forward` works), sets the hostname,
 * starts the application named in /etc/ukl/app as a child with the
 * arguments in /etc/ukl/args (NUL-separated, supplied by `ukl run`) -- or,
 * when `ukl run --sh/--shell` supplied /etc/ukl/sh, /bin/sh with that
 * command line (interactive when it is empty) and $UKL_APP set --, reaps
 * every child until the application exits, and reports its status:
 *   - as "status N" on /dev/ttyS1, the host's status channel;
 *   - by writing to QEMU's isa-debug-exit port, which ends the VM.
 * N is the exit status, or 128+signal when the application was killed.
 * The application is never PID 1, so its crash is a status, not a panic.
 *
 * Without /etc/ukl/args (images run by urunc, docs/deploy.md), the arguments
 * are init's own: the kernel command line's words after "--"; urunc wraps an
 * argument with spaces in single quotes, which the kernel splits, so such
 * words are joined again. The kernel passes unknown "NAME=VALUE" words to
 * init as its environment: the application gets them (a container's
 * environment), over the defaults, except ukl_* and ip=; and
 * ip=ADDR::GATEWAY:NETMASK:HOST:eth0:off (what urunc passes for the
 * container's network) gives eth0 that address instead of 10.0.2.15: the
 * kernel applies it where it has IP_PNP (then ip= never reaches init, and
 * init leaves the configured eth0 alone), init where it has not.
 *
 * With ukl_core=1 on the kernel command line (`ukl run --core DIR`), the
 * application may dump core, and its cores go to a disk for the host
 * (cores_setup(), cores_save()).
 *
 * For `ukl bench boot` (kernel command line; the kernel passes such words
 * to init as environment variables):
 *   - ukl_stamp=1: right before exec'ing the application, read the time
 *     stamp counter (under -icount: the guest's clock, in ns since power-on)
 *     at the instruction labelled ukl_init_stamp, and print it as
 *     "ukl-init: stamp tsc N" (the tool's QEMU plugin records the same
 *     instruction);
 *   - ukl_probe=PORT:HEX: a prober connects to 127.0.0.1:PORT until it
 *     can, sends the bytes HEX, waits for the first byte of the answer,
 *     reads the time stamp counter at ukl_probe_stamp, prints
 *     "ukl-init: reply tsc N", and stops the application (SIGTERM);
 *   - ukl_meminfo=1: print /proc/meminfo, each line as "ukl-init: meminfo
 *     LINE", where the memory the application uses is at its height: after
 *     a server's first answer (before the prober stops it), else when the
 *     application has ended; and then its peak resident set (wait4()'s
 *     ru_maxrss) as "ukl-init: meminfo AppPeakRSS: N kB".
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/io.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#define DEBUG_EXIT_PORT 0xf4
#define MAX_ARGS 1024

static void say(const char *fmt, const char *arg)
{
	fprintf(stderr, "ukl-init: ");
	fprintf(stderr, fmt, arg);
	fputc('\n', stderr);
}

static void mount_or_warn(const char *src, const char *dst, const char *type,
			  const char *opts)
{
	mkdir(dst, 0755);
	if (mount(src, dst, type, 0, opts) && errno != EBUSY)
		say("cannot mount %s", dst);
}

static void set_addr(int s, struct ifreq *ifr, unsigned long req, const char *addr)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)&ifr->ifr_addr;

	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	inet_pton(AF_INET, addr, &sin->sin_addr);
	if (ioctl(s, req, ifr))
		say("cannot configure %s", ifr->ifr_name);
}

/* Bring up NAME; with ADDR, give it ADDR/MASK and a default route via GW */
static void iface_up(const char *name, const char *addr, const char *mask, const char *gw)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);

	if (s < 0)
		return;
	strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
	if (ioctl(s, SIOCGIFFLAGS, &ifr)) {
		close(s);
		return;		/* no such device */
	}
	if (addr) {
		set_addr(s, &ifr, SIOCSIFADDR, addr);
		set_addr(s, &ifr, SIOCSIFNETMASK, mask);
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr))
		say("cannot bring up %s", name);
	if (addr && gw && *gw) {
		struct rtentry rt = { .rt_flags = RTF_UP | RTF_GATEWAY };
		struct sockaddr_in *gw_sin = (struct sockaddr_in *)&rt.rt_gateway;

		((struct sockaddr_in *)&rt.rt_dst)->sin_family = AF_INET;
		((struct sockaddr_in *)&rt.rt_genmask)->sin_family = AF_INET;
		gw_sin->sin_family = AF_INET;
		inet_pton(AF_INET, gw, &gw_sin->sin_addr);
		if (ioctl(s, SIOCADDRT, &rt))
			say("cannot add the default route via %s", name);
	}
	close(s);
}

/* Read a whole small file; returns its length or -1. */
static ssize_t slurp(const char *path, char *buf, size_t size)
{
	ssize_t n, len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -1;
	while ((n = read(fd, buf + len, size - 1 - len)) > 0)
		len += n;
	close(fd);
	buf[len] = 0;
	return len;
}

/* In the child: the console as controlling terminal, the shell below us */
static void lead_session(void)
{
	int status = 0;
	pid_t pid;

	ioctl(0, TIOCSCTTY, 0);
	pid = fork();
	if (pid <= 0)
		return;	/* the shell (or, without a fork, the shell itself) */
	/* ^C and ^\ are the shell's business until it has its own group */
	signal(SIGINT, SIG_IGN);
	signal(SIGQUIT, SIG_IGN);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	tcdrain(STDOUT_FILENO);
	_exit(WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status));
}

/*
 * ukl_core=1 (`ukl run --core DIR`): the application may dump core
 * (RLIMIT_CORE unlimited) into /ukl-core; once it has exited, every file
 * there is copied to the disk whose serial is "ukl-core", as records
 * that the host reads back (guest/PROTOCOL.md).
 */
static int save_cores;

static void cores_setup(void)
{
	static const char pattern[] = "/ukl-core/core.%e.%p";
	struct rlimit unlimited = { RLIM_INFINITY, RLIM_INFINITY };
	int fd;

	save_cores = 1;
	if (mkdir("/ukl-core", 0755) && errno != EEXIST)
		say("cannot make %s", "/ukl-core");
	/* A UKL core is root's in any case; an ordinary process's is its own */
	if (chmod("/ukl-core", 01777))
		say("cannot open %s to every user", "/ukl-core");
	fd = open("/proc/sys/kernel/core_pattern", O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, pattern, strlen(pattern)) < 0)
		say("cannot set %s", "/proc/sys/kernel/core_pattern");
	if (fd >= 0)
		close(fd);
	if (setrlimit(RLIMIT_CORE, &unlimited))
		say("cannot raise %s", "RLIMIT_CORE");
}

/* The disk whose serial is ukl-core, open for writing, or -1 */
static int core_disk(void)
{
	char path[300], serial[64];
	DIR *d = opendir("/sys/block");
	struct dirent *de;
	int fd = -1;

	while (d && fd < 0 && (de = readdir(d))) {
		snprintf(path, sizeof(path), "/sys/block/%s/serial", de->d_name);
		if (de->d_name[0] == '.' || slurp(path, serial, sizeof(serial)) < 0)
			continue;
		serial[strcspn(serial, "\n")] = 0;
		if (strcmp(serial, "ukl-core"))
			continue;
		snprintf(path, sizeof(path), "/dev/%s", de->d_name);
		fd = open(path, O_WRONLY | O_CLOEXEC);
	}
	if (d)
		closedir(d);
	return fd;
}

static int put(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = write(fd, p, len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

/* One record: the header, the name, SIZE bytes of FD (zeros past its end) */
static int put_core(int disk, int fd, const char *name, uint64_t size)
{
	static char buf[65536];
	uint32_t len[2] = { (uint32_t)strlen(name), 0 };

	if (put(disk, "UKLCORE1", 8) || put(disk, len, sizeof(len)) ||
	    put(disk, &size, sizeof(size)) || put(disk, name, len[0]))
		return -1;
	while (size) {
		size_t want = size < sizeof(buf) ? (size_t)size : sizeof(buf);
		ssize_t got = read(fd, buf, want);

		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0) {
			memset(buf, 0, want);	/* the file shrank: keep the size */
			got = (ssize_t)want;
		}
		if (put(disk, buf, (size_t)got))
			return -1;
		size -= (uint64_t)got;
	}
	return 0;
}

static void cores_save(void)
{
	int disk = core_disk(), saved = 0;
	struct dirent *de;
	off_t room;
	DIR *d;

	if (disk < 0) {
		say("no disk with serial %s: the cores stay in the guest", "ukl-core");
		return;
	}
	room = lseek(disk, 0, SEEK_END) - 8;	/* the end marker's 8 bytes */
	lseek(disk, 0, SEEK_SET);
	d = opendir("/ukl-core");
	while (d && (de = readdir(d))) {
		char path[300];
		struct stat st;
		off_t need;
		int fd;

		snprintf(path, sizeof(path), "/ukl-core/%s", de->d_name);
		fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) || !S_ISREG(st.st_mode)) {
			close(fd);
			continue;
		}
		need = 24 + (off_t)strlen(de->d_name) + st.st_size;
		if (need > room) {
			say("no room on the core disk for %s", de->d_name);
		} else if (put_core(disk, fd, de->d_name, (uint64_t)st.st_size)) {
			say("cannot write %s to the core disk", de->d_name);
			close(fd);
			break;
		} else {
			room -= need;
			saved++;
		}
		close(fd);
	}
	if (d)
		closedir(d);
	if (put(disk, "UKLCEND1", 8) || fsync(disk))
		say("cannot finish the core disk%s", "");
	close(disk);
	fprintf(stderr, "ukl-init: %d core file%s saved\n", saved, saved == 1 ? "" : "s");
}

static void report_and_exit(int code)
{
	char line[32];
	int fd;

	if (save_cores)
		cores_save();
	fd = open("/dev/ttyS1", O_WRONLY | O_NOCTTY | O_CLOEXEC);
	fprintf(stderr, "ukl-init: application exited with status %d\n", code);
	/* QEMU exits with the status: first let the console send what is queued */
	tcdrain(STDERR_FILENO);
	if (fd >= 0) {
		snprintf(line, sizeof(line), "status %d\n", code);
		if (write(fd, line, strlen(line)) < 0)
			say("cannot write the status to %s", "/dev/ttyS1");
		close(fd);
	}
	sync();
	if (ioperm(DEBUG_EXIT_PORT, 1, 1) == 0)
		outb(code & 0x7f, DEBUG_EXIT_PORT);
	/* No debug-exit device: reboot, which ends QEMU under -no-reboot. */
	reboot(RB_AUTOBOOT);
	for (;;)
		pause();
}

/*
 * The time stamp counter, read at a global label that the host finds in
 * this program's symbols: rdtsc_at(label) names one instruction.
 */
#define RDTSC_AT(label)							\
	({								\
		unsigned int lo_, hi_;					\
		__asm__ volatile(".globl " #label "\n" #label ":\n\trdtsc"	\
				 : "=a"(lo_), "=d"(hi_) : : "memory");	\
		(unsigned long long)hi_ << 32 | lo_;			\
	})

static void print_tsc(const char *what, unsigned long long tsc)
{
	char line[64];
	int n = snprintf(line, sizeof(line), "ukl-init: %s tsc %llu\n", what, tsc);

	if (write(STDERR_FILENO, line, (size_t)n) < 0)
		return;
}

/* ukl_meminfo=1: the kernel's memory accounting, for `ukl bench boot` */
static void print_meminfo(void)
{
	char buf[4096], line[160];
	ssize_t len;

	if (!getenv("ukl_meminfo"))
		return;
	len = slurp("/proc/meminfo", buf, sizeof(buf));
	for (char *p = buf, *nl; len > 0 && *p; p = nl + 1) {
		int n;

		nl = strchr(p, '\n');
		if (!nl)
			break;
		*nl = 0;
		n = snprintf(line, sizeof(line), "ukl-init: meminfo %s\n", p);
		if (n > 0 && n < (int)sizeof(line) && write(STDERR_FILENO, line, (size_t)n) < 0)
			return;
	}
}

/* ukl_probe=PORT:HEX: the bytes to send, decoded into BUF; their count or -1 */
static int probe_spec(const char *spec, int *port, char *buf, int size)
{
	const char *hex = strchr(spec, ':');
	int n = 0;

	*port = atoi(spec);
	if (!hex || *port <= 0 || *port > 65535)
		return -1;
	for (hex++; hex[0] && hex[1] && n < size; hex += 2) {
		unsigned int byte;

		if (sscanf(hex, "%2x", &byte) != 1)
			return -1;
		buf[n++] = (char)byte;
	}
	return n > 0 ? n : -1;
}

/* Connect to 127.0.0.1:PORT, retrying every millisecond (of guest time)
 * for up to a minute; the socket or -1. */
static int connect_retrying(int port)
{
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				   .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	struct timespec pause_ = { 0, 1000000 };

	for (int i = 0; i < 60000; i++) {
		int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

		if (s < 0)
			return -1;
		if (connect(s, (struct sockaddr *)&sin, sizeof(sin)) == 0)
			return s;
		close(s);
		nanosleep(&pause_, NULL);
	}
	return -1;
}

/* The prober (a child of init): the first answer's time stamp, then SIGTERM to APP */
static void probe(const char *spec, pid_t app)
{
	char msg[256], answer[1];
	int port, len = probe_spec(spec, &port, msg, sizeof(msg));
	int s = len < 0 ? -1 : connect_retrying(port);

	if (len < 0)
		say("ukl_probe=%s: not PORT:HEXBYTES", spec);
	else if (s < 0)
		say("the prober could not connect (%s)", spec);
	else if (write(s, msg, (size_t)len) != len || read(s, answer, 1) != 1)
		say("the server gave no answer to the probe (%s)", spec);
	else {
		print_tsc("reply", RDTSC_AT(ukl_probe_stamp));
		print_meminfo();
	}
	kill(app, SIGTERM);
	_exit(0);
}

/* Does interface NAME have an IPv4 address already? */
static int has_address(const char *name)
{
	struct ifreq ifr = { 0 };
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0), ret;

	if (s < 0)
		return 0;
	strncpy(ifr.ifr_name, name, IFNAMSIZ - 1);
	ret = ioctl(s, SIOCGIFADDR, &ifr) == 0;
	close(s);
	return ret;
}

/*
 * ip=ADDR:SERVER:GATEWAY:NETMASK:HOST:DEVICE:AUTOCONF (the kernel's nfsroot
 * syntax, as urunc writes it): eth0's address, netmask and gateway, or the
 * QEMU user network's 10.0.2.15/24 via 10.0.2.2 (`ukl run --forward`).
 * A kernel with IP_PNP takes ip= itself (init never sees it) and has
 * configured eth0 before init runs: an eth0 with an address is left as
 * it is.
 */
static void eth0_up(void)
{
	static char ip[256], cmdline[4096];
	const char *env = getenv("ip");
	char *f[7] = { 0 }, *p = ip;

	if (has_address("eth0"))
		return;
	if (!env && slurp("/proc/cmdline", cmdline, sizeof(cmdline)) > 0) {
		/* an IP_PNP kernel took ip= and did not apply it: say so, apply it
		 * here (the kernel's words only: not the application's, after --) */
		char *w = strstr(cmdline, " -- ");

		if (w)
			*w = 0;
		w = strstr(cmdline, " ip=");
		if (w || !strncmp(cmdline, "ip=", 3)) {
			w = w ? w + 4 : cmdline + 3;
			w[strcspn(w, " \n")] = 0;
			env = w;
			say("the kernel did not configure eth0 from ip=%s: init does", env);
		}
	}
	if (!env) {
		iface_up("eth0", "10.0.2.15", "255.255.255.0", "10.0.2.2");
		return;
	}
	snprintf(ip, sizeof(ip), "%.255s", env);
	for (int i = 0; i < 7 && p; i++) {
		f[i] = p;
		p = strchr(p, ':');
		if (p)
			*p++ = 0;
	}
	if (!f[0] || !*f[0] || !f[3] || !*f[3]) {
		say("ip=%s: not ADDR::GATEWAY:NETMASK:...", env);
		return;
	}
	iface_up("eth0", f[0], f[3], f[2]);
}

/*
 * The application's arguments from init's (the words after "--"): a word
 * that starts with a single quote begins an argument that ends with the
 * word that ends with one (urunc's convention for arguments with spaces).
 */
static int cmdline_args(int kargc, char **kargv, char **argv, int argc)
{
	static char joined[65536];
	size_t used = 0;

	for (int i = 1; i < kargc && argc <= MAX_ARGS; i++) {
		char *w = kargv[i], *start = joined + used;

		if (w[0] != '\'') {
			argv[argc++] = w;
			continue;
		}
		for (w++;; w = kargv[++i]) {
			size_t len = strlen(w);
			int last = len && w[len - 1] == '\'';

			len -= last;
			if (used + len + 2 > sizeof(joined))
				len = sizeof(joined) - used - 2;
			memcpy(joined + used, w, len);
			used += len;
			if (last || i + 1 >= kargc)
				break;
			joined[used++] = ' ';
		}
		joined[used++] = 0;
		argv[argc++] = start;
	}
	argv[argc] = NULL;
	return argc;
}

/* The application's environment: DEFAULTS, and over them init's (the kernel's unknown NAME=VALUE words) */
static void app_env(char **envp, int *n, int max)
{
	extern char **environ;

	for (char **e = environ; e && *e && *n < max; e++) {
		size_t name = strcspn(*e, "=");
		int i;

		if (!strncmp(*e, "ukl_", 4) || !strncmp(*e, "ip=", 3) || !(*e)[name])
			continue;
		for (i = 0; i < *n && strncmp(envp[i], *e, name + 1); i++)
			;
		envp[i] = *e;
		if (i == *n)
			(*n)++;
	}
	envp[*n] = NULL;
}

int main(int kargc, char **kargv)
{
	static char app[4096], args[65536];
	static char *argv[MAX_ARGS + 2];
	static char app_env_var[4200];
	static char *envp[64 + 2] = { "PATH=/bin:/sbin:/usr/bin:/usr/sbin", "HOME=/",
				      "TERM=linux", "LANG=C" };
	int envc = 4;
	ssize_t alen;
	pid_t pid, w;
	int status, argc = 0, fd, interactive;

	mount_or_warn("devtmpfs", "/dev", "devtmpfs", NULL);
	fd = open("/dev/console", O_RDWR | O_NOCTTY);
	if (fd >= 0) {
		dup2(fd, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		if (fd > 2)
			close(fd);
	}
	mount_or_warn("proc", "/proc", "proc", NULL);
	mount_or_warn("sysfs", "/sys", "sysfs", NULL);
	mount_or_warn("tmpfs", "/tmp", "tmpfs", "mode=1777");
	iface_up("lo", NULL, NULL, NULL);
	eth0_up();
	if (sethostname("ukl", 3))
		say("cannot set the hostname%s", "");
	if (getenv("ukl_core"))
		cores_setup();

	if (slurp("/etc/ukl/app", app, sizeof(app)) <= 0) {
		say("no application named in %s", "/etc/ukl/app");
		report_and_exit(127);
	}
	app[strcspn(app, "\n")] = 0;
	alen = slurp("/etc/ukl/sh", args, sizeof(args));
	interactive = alen == 0;
	if (alen >= 0) {
		/* `ukl run --sh CMDS` (or --shell when empty): a shell instead */
		snprintf(app_env_var, sizeof(app_env_var), "UKL_APP=%s", app);
		envp[envc++] = app_env_var;
		strcpy(app, "/bin/sh");
		argv[argc++] = "sh";
		if (alen > 0) {
			argv[argc++] = "-c";
			argv[argc++] = args;
		}
		argv[argc] = NULL;
	} else {
		argv[argc++] = strrchr(app, '/') ? strrchr(app, '/') + 1 : app;
		alen = slurp("/etc/ukl/args", args, sizeof(args));
		for (char *p = args; alen > 0 && p < args + alen && argc <= MAX_ARGS;
		     p += strlen(p) + 1)
			argv[argc++] = p;
		argv[argc] = NULL;
		if (alen < 0)	/* not `ukl run`: the kernel command line's */
			argc = cmdline_args(kargc, kargv, argv, argc);
	}
	app_env(envp, &envc, 64);

	fprintf(stderr, "ukl-init: starting %s\n", app);
	pid = fork();
	if (pid < 0) {
		say("fork failed: %s", strerror(errno));
		report_and_exit(127);
	}
	if (pid == 0) {
		setsid();
		/*
		 * When a session leader with a controlling terminal exits, the
		 * terminal is hung up and output not yet sent is thrown away,
		 * the last lines of a program or script. So only an interactive
		 * shell gets the console as its controlling terminal (job
		 * control, ^C), and its session is led by a process that drains
		 * the output before it exits.
		 */
		if (interactive)
			lead_session();
		if (getenv("ukl_stamp"))
			print_tsc("stamp", RDTSC_AT(ukl_init_stamp));
		execve(app, argv, envp);
		fprintf(stderr, "ukl-init: cannot execute %s: %s\n", app,
			strerror(errno));
		_exit(errno == ENOENT ? 127 : 126);
	}
	if (getenv("ukl_probe") && fork() == 0)
		probe(getenv("ukl_probe"), pid);
	for (;;) {
		struct rusage ru;

		w = wait4(-1, &status, 0, &ru);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			say("lost the application: %s", strerror(errno));
			report_and_exit(127);
		}
		if (w != pid)
			continue;	/* an orphan re-parented to us */
		if (!getenv("ukl_probe"))
			print_meminfo();
		if (getenv("ukl_meminfo"))
			fprintf(stderr, "ukl-init: meminfo AppPeakRSS: %ld kB\n", ru.ru_maxrss);
		if (WIFEXITED(status))
			report_and_exit(WEXITSTATUS(status));
		if (WIFSIGNALED(status))
			report_and_exit(128 + WTERMSIG(status));
	}
}
