/*
 * coredump: a child killed by a core-dumping signal, and its core.
 *
 *   coredump CASE [PATTERN]
 *
 *   coredump all
 *
 * The child sets a global and a heap string, then dies in crash_here()
 * (SIGSEGV through a null pointer) or by abort(). The parent reports the
 * wait status (WCOREDUMP) and, where the kernel wrote a core, reads it:
 * an ELF core for x86-64 whose segments hold the global and the heap
 * string with the child's values, and no other segment in the kernel half
 * than the one holding the global (UKL: the data region) and the vsyscall
 * page. CASE:
 *   segv, abort    core_pattern PATTERN (default: leave it: the core is
 *                  kept), RLIMIT_CORE unlimited;
 *   rlimit0        RLIMIT_CORE 0: no core;
 *   nodump         the child calls prctl(PR_SET_DUMPABLE, 0): no core;
 *   nobody         the child becomes uid 65534, dumpable again, in /tmp.
 * "all" runs every case in turn (cores removed), then segv and nobody
 * with a pipe to this program as the kernel's helper ("coredump helper
 * %d %u", which reports what the kernel told it: "piped: dumpable D uid
 * U bytes N"). Each prints "case CASE
 * PATTERN: signal S, core dumped: yes|no, core: none|PATH uid U segments N
 * ok", and "coredump: N failed" comes last; the status is that N.
 */
#define _GNU_SOURCE
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MARKER 0x5eedc0deUL
#define HEAP_TEXT "the child's heap string"
#define VSYSCALL_PAGE 0xffffffffff600000UL

volatile unsigned long core_marker;	/* set by the child only */
static char *heap_text;
static int failed;

static void fail(const char *what)
{
	printf("FAIL %s\n", what);
	failed++;
}

__attribute__((noinline)) void crash_here(volatile int *where)
{
	*where = 1;	/* SIGSEGV */
}

static void child(const char *c)
{
	struct rlimit lim = { RLIM_INFINITY, RLIM_INFINITY };

	if (!strcmp(c, "rlimit0"))
		lim.rlim_cur = 0;
	if (setrlimit(RLIMIT_CORE, &lim))
		_exit(90);
	core_marker = MARKER;
	heap_text = strdup(HEAP_TEXT);
	if (!strcmp(c, "nodump") && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0))
		_exit(91);
	if (!strcmp(c, "nobody")) {
		struct stat st;

		/* Dropping root makes a process non-dumpable; it asks again */
		if (chdir("/tmp") || setgid(65534) || setuid(65534) ||
		    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0))
			_exit(92);
		/* whose its /proc files are now (a dumpable process's own) */
		if (stat("/proc/self/environ", &st))
			_exit(94);
		dprintf(1, "child: /proc/self/environ uid %u\n", (unsigned)st.st_uid);
	}
	if (!strcmp(c, "abort"))
		abort();
	crash_here(NULL);
	_exit(93);
}

/* The core's bytes at VADDR (LEN of them), or NULL */
static int core_read(int fd, const Elf64_Phdr *ph, int n, unsigned long vaddr, void *buf, size_t len)
{
	for (int i = 0; i < n; i++) {
		if (ph[i].p_type != PT_LOAD || vaddr < ph[i].p_vaddr ||
		    vaddr + len > ph[i].p_vaddr + ph[i].p_filesz)
			continue;
		return pread(fd, buf, len, (off_t)(ph[i].p_offset + vaddr - ph[i].p_vaddr)) == (ssize_t)len;
	}
	return 0;
}

static void check_core(const char *path)
{
	Elf64_Ehdr eh;
	Elf64_Phdr ph[512];
	unsigned long marker = 0;
	unsigned long data = (unsigned long)&core_marker;
	char text[sizeof(HEAP_TEXT)] = "";
	struct stat st;
	int fd = open(path, O_RDONLY), n, bad = 0, bad_before = failed;

	if (fd < 0 || fstat(fd, &st)) {
		fail("open the core");
		return;
	}
	if (pread(fd, &eh, sizeof(eh), 0) != sizeof(eh) || memcmp(eh.e_ident, ELFMAG, SELFMAG) ||
	    eh.e_type != ET_CORE || eh.e_machine != EM_X86_64 || eh.e_phnum > 512) {
		fail("the core is an x86-64 ELF core");
		close(fd);
		return;
	}
	n = eh.e_phnum;
	if (pread(fd, ph, n * sizeof(ph[0]), (off_t)eh.e_phoff) != (ssize_t)(n * sizeof(ph[0]))) {
		fail("read the program headers");
		close(fd);
		return;
	}
	for (int i = 0; i < n; i++) {
		unsigned long start = ph[i].p_vaddr, end = start + ph[i].p_memsz;

		if (ph[i].p_type != PT_LOAD || end <= 0x800000000000UL)
			continue;
		if (start == VSYSCALL_PAGE || (data >= start && data < end))
			continue;
		printf("kernel-half segment %#lx-%#lx\n", start, end);
		bad++;
	}
	if (bad)
		fail("no segment of kernel memory");
	if (!core_read(fd, ph, n, data, &marker, sizeof(marker)) || marker != MARKER)
		fail("the global has the child's value in the core");
	if (!heap_text || !core_read(fd, ph, n, (unsigned long)heap_text, text, sizeof(text)) ||
	    strcmp(text, HEAP_TEXT))
		fail("the heap string is in the core");
	printf("core: %s uid %u segments %d%s\n", path, (unsigned)st.st_uid, n, bad_before == failed ? " ok" : "");
	close(fd);
}

/*
 * core_pattern "|PROGRAM helper %d %u": the kernel runs this program (as
 * root) with the core on its standard input; it records what the kernel
 * told it in HELPER_OUT.
 */
#define HELPER_OUT "/tmp/coredump-helper.txt"

static int helper(const char *dumpable, const char *uid)
{
	char buf[65536], line[128];
	long total = 0;
	ssize_t n;
	int fd;

	while ((n = read(0, buf, sizeof(buf))) > 0)
		total += n;
	snprintf(line, sizeof(line), "piped: dumpable %s uid %s bytes %ld\n", dumpable, uid, total);
	fd = open(HELPER_OUT ".new", O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, line, strlen(line)) < 0 || close(fd) || rename(HELPER_OUT ".new", HELPER_OUT))
		return 1;
	return 0;
}

/* What the pipe's helper recorded (waits for it), or "" */
static void helper_said(char *out, size_t size)
{
	char buf[128] = "";

	for (int i = 0; i < 200 && access(HELPER_OUT, F_OK); i++)
		usleep(50000);
	int fd = open(HELPER_OUT, O_RDONLY);
	ssize_t n = fd < 0 ? 0 : read(fd, buf, sizeof(buf) - 1);

	if (fd >= 0)
		close(fd);
	buf[n > 0 ? n : 0] = 0;
	buf[strcspn(buf, "\n")] = 0;
	snprintf(out, size, "%s", buf);
	unlink(HELPER_OUT);
}

static void core_path(char *path, size_t size, pid_t pid, const char *cwd)
{
	char pattern[256] = "core";
	size_t len = 0;
	int fd = open("/proc/sys/kernel/core_pattern", O_RDONLY);
	ssize_t n = fd < 0 ? -1 : read(fd, pattern, sizeof(pattern) - 1);

	if (fd >= 0)
		close(fd);
	if (n > 0)
		pattern[n - (pattern[n - 1] == '\n')] = 0;
	if (pattern[0] != '/')
		len = (size_t)snprintf(path, size, "%s", cwd);
	for (const char *p = pattern; *p && len + 16 < size; p++) {
		if (p[0] == '%' && p[1] == 'p')
			len += (size_t)snprintf(path + len, size - len, "%d", (int)pid), p++;
		else if (p[0] == '%' && p[1] == 'e')
			len += (size_t)snprintf(path + len, size - len, "coredump"), p++;
		else
			path[len++] = *p;
	}
	path[len] = 0;
}

/* One case: a child dies, its status and core are reported, the core removed unless KEEP */
static void run_case(const char *c, const char *pattern, int keep)
{
	char path[256];
	pid_t pid;
	int status, fd;

	if (pattern) {
		fd = open("/proc/sys/kernel/core_pattern", O_WRONLY);
		if (fd < 0 || write(fd, pattern, strlen(pattern)) < 0)
			fail("set core_pattern");
		if (fd >= 0)
			close(fd);
	}
	/* The heap string's address, the same in the child (fork copies) */
	heap_text = malloc(sizeof(HEAP_TEXT));
	free(heap_text);
	pid = fork();
	if (pid < 0) {
		fail("fork");
		return;
	}
	if (pid == 0)
		child(c);
	heap_text = NULL;
	if (waitpid(pid, &status, 0) != pid) {
		fail("waitpid");
		return;
	}
	/* After the child: the kernel's messages about its core come first */
	printf("case %s %s: ", c, !pattern ? "(init's pattern)" : pattern[0] == '|' ? "pipe" : pattern);
	if (!WIFSIGNALED(status)) {
		printf("child: exit %d\n", WEXITSTATUS(status));
		fail("the child dies by a signal");
		return;
	}
	printf("signal %d, core dumped: %s, ", WTERMSIG(status), WCOREDUMP(status) ? "yes" : "no");
	if (pattern && pattern[0] == '|') {
		char said[128];

		helper_said(said, sizeof(said));
		printf("%s\n", said[0] ? said : "piped: nothing");
		return;
	}
	/* Where the core is: core_pattern with %e and %p expanded, in the child's cwd */
	core_path(path, sizeof(path), pid, !strcmp(c, "nobody") ? "/tmp/" : "/");
	if (access(path, F_OK)) {
		printf("core: none\n");
		return;
	}
	/* the heap string's address in the child: malloc gives it again */
	heap_text = malloc(sizeof(HEAP_TEXT));
	check_core(path);
	free(heap_text);
	if (!keep)
		unlink(path);
}

int main(int argc, char **argv)
{
	static const char *const all[][2] = {
		{ "segv", "core" }, { "abort", "/tmp/core.%p" }, { "rlimit0", "core" },
		{ "nodump", "core" }, { "nobody", "core" }, { "nobody", "/tmp/core.%p" },
	};

	char pipe_pattern[300], self[256];
	ssize_t n;

	if (argc > 3 && !strcmp(argv[1], "helper"))
		return helper(argv[2], argv[3]);
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc > 1 && !strcmp(argv[1], "all")) {
		for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
			run_case(all[i][0], all[i][1], 0);
		/* a pipe: this program, as the kernel's helper (root's, %d told) */
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		self[n > 0 ? n : 0] = 0;
		snprintf(pipe_pattern, sizeof(pipe_pattern), "|%s helper %%d %%u", self);
		run_case("segv", pipe_pattern, 0);
		run_case("nobody", pipe_pattern, 0);
		run_case("segv", "core", 0);	/* leave the default */
	} else {
		/* Without a pattern of its own the core stays, for `ukl run --core` */
		run_case(argc > 1 ? argv[1] : "segv", argc > 2 ? argv[2] : NULL, argc <= 2);
	}
	printf("coredump: %d failed\n", failed);
	return failed;
}
