/*
 * An ordinary C program exercising glibc: built unmodified for
 * --config linux (host static glibc, ring 3) and --config base (our glibc
 * port, linked into the kernel, ring 0). Every line it prints must be the
 * same under both; `./libc_suite SECTION...` runs some sections, no
 * argument runs all of them.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <spawn.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CHECK(c) do { if (!(c)) { printf("FAIL %s:%d: %s\n", __func__, __LINE__, #c); fflush(stdout); exit(1); } } while (0)

static int ctor_ran;
__attribute__((constructor)) static void ctor(void) { ctor_ran = 42; }
static void at_exit_handler(void) { printf("atexit handler ran\n"); }

static void t_startup(void)
{
	CHECK(ctor_ran == 42);
	printf("constructor ran\n");
}

static void t_stdio(void)
{
	char buf[256];
	int i; double d; char word[32]; unsigned x; long long ll;

	snprintf(buf, sizeof(buf), "%d %5.2f %e %g %s %x %lld %c %%", -42, 3.14159, 12345.678, 0.0001,
		 "str", 0xbeef, -123456789012LL, 'z');
	printf("printf: %s\n", buf);
	CHECK(sscanf("17 2.5e3 hello ff -99999999999", "%d %lf %31s %x %lld", &i, &d, word, &x, &ll) == 5);
	printf("scanf: %d %.1f %s %u %lld\n", i, d, word, x, ll);
	printf("strtod: %.6f sqrt2 %.10f pow %.3f\n", strtod("-1.5e-3", NULL), sqrt(2.0), pow(2.0, 0.5));
	printf("long double: %.10Lf\n", 1.0L / 3.0L);
}

static void t_malloc(void)
{
	size_t sizes[] = { 1, 24, 100, 4000, 128 * 1024, 1 << 20, 64 << 20 };
	for (size_t k = 0; k < sizeof(sizes) / sizeof(*sizes); k++) {
		unsigned char *p = malloc(sizes[k]);
		CHECK(p);
		memset(p, (int)k + 1, sizes[k]);
		CHECK(p[sizes[k] - 1] == k + 1);
		free(p);
	}
	int *a = calloc(1000, sizeof(int));
	for (int k = 0; k < 1000; k++)
		CHECK(a[k] == 0);
	for (int k = 0; k < 1000; k++)
		a[k] = k;
	a = realloc(a, 1000000 * sizeof(int));
	CHECK(a && a[999] == 999);
	free(a);
	void *many[2000];
	for (int k = 0; k < 2000; k++)
		many[k] = malloc(16 + k % 300);
	for (int k = 0; k < 2000; k += 2)
		free(many[k]);
	for (int k = 1; k < 2000; k += 2)
		free(many[k]);
	printf("malloc: small, large (mmap), calloc, realloc ok\n");
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

static void t_strings(void)
{
	int v[1000];
	for (int k = 0; k < 1000; k++)
		v[k] = (k * 7919) % 1000;
	qsort(v, 1000, sizeof(int), cmp_int);
	for (int k = 0; k < 1000; k++)
		CHECK(v[k] == k);
	char big[5000], dst[5000];
	for (int k = 0; k < 4999; k++)
		big[k] = 'a' + k % 26;
	big[4999] = 0;
	CHECK(strlen(big) == 4999);
	strcpy(dst, big);
	CHECK(memcmp(dst, big, 5000) == 0 && strcmp(dst, big) == 0);
	memmove(dst + 1, dst, 4000);
	CHECK(dst[1] == 'a' && dst[4000] == big[3999]);
	CHECK(strstr(big, "xyzab") == big + 23 && strchr(big, 'q') == big + 16 && strrchr(big, 'a') == big + 4992);
	char toks[] = "a,b,,c";
	int n = 0;
	for (char *t = strtok(toks, ","); t; t = strtok(NULL, ","))
		n++;
	CHECK(n == 3);
	CHECK(strncasecmp("HeLLo", "hello", 5) == 0 && memchr(big, 'z', 100) == big + 25);
	printf("strings: qsort, strlen, strcpy, memmove, strstr, strtok ok\n");
}

static double ts_diff(struct timespec a, struct timespec b)
{
	return (b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9;
}

static void t_time(void)
{
	struct timespec a, b, r;
	time_t now = time(NULL);
	CHECK(now > 1600000000);
	CHECK(clock_gettime(CLOCK_MONOTONIC, &a) == 0);
	struct timespec req = { 0, 20 * 1000 * 1000 };
	CHECK(nanosleep(&req, NULL) == 0);
	CHECK(clock_gettime(CLOCK_MONOTONIC, &b) == 0);
	CHECK(ts_diff(a, b) >= 0.02);
	CHECK(clock_gettime(CLOCK_REALTIME, &r) == 0 && r.tv_sec >= now);
	CHECK(clock_getres(CLOCK_MONOTONIC, &r) == 0);
	struct tm tm;
	time_t fixed = 86400 * 365;
	gmtime_r(&fixed, &tm);
	char s[64];
	strftime(s, sizeof(s), "%Y-%m-%d %H:%M:%S", &tm);
	printf("time: monotonic advances over nanosleep(20 ms); gmtime %s\n", s);
}

static void t_files(void)
{
	FILE *f = fopen("/tmp/libc_suite.txt", "w+");
	CHECK(f);
	for (int k = 0; k < 1000; k++)
		fprintf(f, "line %d\n", k);
	CHECK(fseek(f, 0, SEEK_SET) == 0);
	char line[64];
	int n = 0;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	struct stat st;
	CHECK(stat("/tmp/libc_suite.txt", &st) == 0);
	int fd = open("/tmp/libc_suite.txt", O_RDONLY);
	char b[9] = { 0 };
	CHECK(fd >= 0 && pread(fd, b, 6, 7) == 6);
	close(fd);
	CHECK(unlink("/tmp/libc_suite.txt") == 0);
	f = fopen("/proc/self/status", "r");
	CHECK(f);
	char name[64] = "";
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, "Name:", 5))
			sscanf(line, "Name: %63s", name);
	fclose(f);
	printf("files: %d lines, %lld bytes, pread '%s'; /proc/self/status Name %s\n", n, (long long)st.st_size,
	       b, name);
}

static void t_env(int argc, char **argv)
{
	printf("argc %d argv[0] %s\n", argc, strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0]);
	CHECK(setenv("UKL_TEST_VAR", "forty-two", 1) == 0);
	printf("env: PATH set %s, UKL_TEST_VAR=%s\n", getenv("PATH") ? "yes" : "no", getenv("UKL_TEST_VAR"));
}

/* ---- threads ---- */
static __thread int tls_var = 7;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_barrier_t bar;
static pthread_key_t key;
static long counter;
static int turn, destructed;

static void key_dtor(void *p) { __atomic_add_fetch(&destructed, 1, __ATOMIC_SEQ_CST); free(p); }

static void *worker(void *arg)
{
	long id = (long)arg;
	tls_var = (int)id * 100;
	pthread_setspecific(key, malloc(8));
	for (int k = 0; k < 10000; k++) {
		pthread_mutex_lock(&mu);
		counter++;
		pthread_mutex_unlock(&mu);
	}
	pthread_rwlock_rdlock(&rw);
	pthread_rwlock_unlock(&rw);
	pthread_barrier_wait(&bar);
	return (void *)(long)(tls_var == id * 100);
}

static void *pong(void *arg)
{
	(void)arg;
	for (int k = 0; k < 100; k++) {
		pthread_mutex_lock(&mu);
		while (turn != 1)
			pthread_cond_wait(&cv, &mu);
		turn = 0;
		pthread_cond_signal(&cv);
		pthread_mutex_unlock(&mu);
	}
	return NULL;
}

/* pthread_exit() from deep in a thread and pthread_cancel() unwind the stack */
static void count_cleanup(void *arg)
{
	++*(int *)arg;
}

static void exit_deep(int n);
static void (*volatile exit_next)(int) = exit_deep;	/* frames, not a loop */

static void exit_deep(int n)
{
	if (n == 0)
		pthread_exit((void *)42);
	exit_next(n - 1);
	__asm__ volatile("" ::: "memory");	/* not a tail call */
}

static void *exiting_thread(void *arg)
{
	pthread_cleanup_push(count_cleanup, arg);
	exit_deep(5);
	pthread_cleanup_pop(0);
	return NULL;
}

static void *cancelled_thread(void *arg)
{
	pthread_cleanup_push(count_cleanup, arg);
	for (;;)
		pause();
	pthread_cleanup_pop(0);
	return NULL;
}

static void t_unwind(void)
{
	int cleanups = 0;
	void *exited, *cancelled;
	pthread_t t;

	pthread_create(&t, NULL, exiting_thread, &cleanups);
	pthread_join(t, &exited);
	pthread_create(&t, NULL, cancelled_thread, &cleanups);
	usleep(20000);
	pthread_cancel(t);
	pthread_join(t, &cancelled);
	printf("unwind: pthread_exit value %ld, cancelled %s, cleanup handlers %d\n", (long)exited,
	       cancelled == PTHREAD_CANCELED ? "yes" : "no", cleanups);
}

static void t_threads(void)
{
	pthread_t t[4];
	CHECK(pthread_key_create(&key, key_dtor) == 0);
	CHECK(pthread_barrier_init(&bar, NULL, 5) == 0);
	for (long k = 0; k < 4; k++)
		CHECK(pthread_create(&t[k], NULL, worker, (void *)(k + 1)) == 0);
	pthread_rwlock_wrlock(&rw);
	pthread_rwlock_unlock(&rw);
	pthread_barrier_wait(&bar);
	int tls_ok = 1;
	for (int k = 0; k < 4; k++) {
		void *r;
		CHECK(pthread_join(t[k], &r) == 0);
		tls_ok &= (long)r == 1;
	}
	CHECK(tls_var == 7);
	pthread_t p;
	CHECK(pthread_create(&p, NULL, pong, NULL) == 0);
	for (int k = 0; k < 100; k++) {
		pthread_mutex_lock(&mu);
		turn = 1;
		pthread_cond_signal(&cv);
		while (turn != 0)
			pthread_cond_wait(&cv, &mu);
		pthread_mutex_unlock(&mu);
	}
	pthread_join(p, NULL);
	printf("threads: counter %ld, __thread distinct %s, main tls %d, key destructors %d, condvar 100 rounds\n",
	       counter, tls_ok ? "yes" : "no", tls_var, destructed);
}

/* ---- signals ---- */
static volatile sig_atomic_t got_usr1, got_alrm;
static sigjmp_buf jb;

static void on_usr1(int s) { got_usr1 = s; }
static void on_alrm(int s) { got_alrm = s; }
static void on_segv(int s) { siglongjmp(jb, s); }

static void t_signals(void)
{
	struct sigaction sa = { 0 };
	sa.sa_handler = on_usr1;
	CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
	CHECK(raise(SIGUSR1) == 0 && got_usr1 == SIGUSR1);
	sa.sa_handler = on_alrm;
	sigaction(SIGALRM, &sa, NULL);
	alarm(1);
	while (!got_alrm)
		pause();
	sa.sa_handler = on_segv;
	sigaction(SIGSEGV, &sa, NULL);
	int r = sigsetjmp(jb, 1);
	if (r == 0) {
		int *volatile bad = (int *)16;
		*bad = 1;
		CHECK(0);
	}
	sigset_t cur;
	sigprocmask(SIG_SETMASK, NULL, &cur);
	printf("signals: raise SIGUSR1 handled, alarm+pause, SIGSEGV handler siglongjmp'd (%d), mask restored %s\n",
	       r, sigismember(&cur, SIGSEGV) ? "no" : "yes");
}

/* ---- sockets ---- */
#define STREAM_BYTES (1 << 20)

static void *tcp_server(void *arg)
{
	int ls = *(int *)arg, c = accept(ls, NULL, NULL);
	unsigned sum = 0;
	char buf[8192];
	ssize_t n;
	long total = 0;
	while ((n = read(c, buf, sizeof(buf))) > 0) {
		for (ssize_t k = 0; k < n; k++)
			sum = sum * 31 + (unsigned char)buf[k];
		total += n;
	}
	dprintf(c, "%ld %u", total, sum);
	close(c);
	return NULL;
}

static void t_sockets(void)
{
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t al = sizeof(a);
	CHECK(bind(ls, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(ls, 4) == 0);
	getsockname(ls, (struct sockaddr *)&a, &al);
	pthread_t t;
	pthread_create(&t, NULL, tcp_server, &ls);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(connect(c, (struct sockaddr *)&a, sizeof(a)) == 0);
	char *data = malloc(STREAM_BYTES);
	unsigned sum = 0;
	for (int k = 0; k < STREAM_BYTES; k++) {
		data[k] = (char)(k * 131 + k / 7);
		sum = sum * 31 + (unsigned char)data[k];
	}
	for (long off = 0; off < STREAM_BYTES;) {
		ssize_t n = write(c, data + off, STREAM_BYTES - off);
		CHECK(n > 0);
		off += n;
	}
	shutdown(c, SHUT_WR);
	char reply[64] = { 0 };
	ssize_t got = 0, n;
	while ((n = read(c, reply + got, sizeof(reply) - 1 - got)) > 0)
		got += n;
	long rtotal;
	unsigned rsum;
	CHECK(sscanf(reply, "%ld %u", &rtotal, &rsum) == 2);
	pthread_join(t, NULL);
	printf("tcp: %ld bytes over loopback, intact %s\n", rtotal, rsum == sum ? "yes" : "no");
	close(c);
	close(ls);
	free(data);

	int u1 = socket(AF_INET, SOCK_DGRAM, 0), u2 = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in ua = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t ul = sizeof(ua);
	CHECK(bind(u2, (struct sockaddr *)&ua, sizeof(ua)) == 0);
	getsockname(u2, (struct sockaddr *)&ua, &ul);
	CHECK(sendto(u1, "datagram", 8, 0, (struct sockaddr *)&ua, sizeof(ua)) == 8);

	struct pollfd pfd = { .fd = u2, .events = POLLIN };
	CHECK(poll(&pfd, 1, 1000) == 1 && (pfd.revents & POLLIN));
	fd_set rs;
	FD_ZERO(&rs);
	FD_SET(u2, &rs);
	struct timeval tv = { 1, 0 };
	CHECK(select(u2 + 1, &rs, NULL, NULL, &tv) == 1);
	int ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = u2 }, out;
	CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, u2, &ev) == 0);
	CHECK(epoll_wait(ep, &out, 1, 1000) == 1 && out.data.fd == u2);
	char ubuf[16] = { 0 };
	CHECK(recvfrom(u2, ubuf, sizeof(ubuf), 0, NULL, NULL) == 8);
	printf("udp: '%s'; poll, select and epoll saw it\n", ubuf);
	close(ep);
	close(u1);
	close(u2);
}

static void t_errno(void)
{
	errno = 0;
	CHECK(open("/nonexistent/file", O_RDONLY) == -1);
	int e1 = errno;
	CHECK(close(-1) == -1);
	int e2 = errno;
	void *volatile badp = (void *)8;
	CHECK(write(1, badp, 5) == -1);
	int e3 = errno;
	CHECK(mmap(NULL, 0, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0) == MAP_FAILED);
	int e4 = errno;
	printf("errno: open %s (%d), close %s (%d), write %s (%d), mmap %s (%d)\n", strerrorname_np(e1), e1,
	       strerrorname_np(e2), e2, strerrorname_np(e3), e3, strerrorname_np(e4), e4);
}

static void smash(const char *s)
{
	char small[8];
	strcpy(small, s);
	printf("%s\n", small);
}

/* Each run must start from the program's initial data, also in ring 0 */
static int data_counter = 10;
static int bss_counter;

static int reexec(char **argv, int n)
{
	data_counter++;
	bss_counter++;
	printf("run %d: data %d bss %d\n", n, data_counter, bss_counter);
	fflush(stdout);
	if (n < 3) {
		char next[12];

		snprintf(next, sizeof(next), "%d", n + 1);
		execl("/proc/self/exe", argv[0], "reexec", next, (char *)NULL);
		perror("execl");
		return 1;
	}
	return 0;
}

static void *idle_thread(void *arg)
{
	(void)arg;
	for (;;)
		sleep(1);
	return NULL;
}

/* Runs until a signal ends it: two idle threads and a main thread in pause() */
static int serve(void)
{
	pthread_t t;

	for (int i = 0; i < 2; i++)
		pthread_create(&t, NULL, idle_thread, NULL);
	printf("serving\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* fork+exec of ordinary programs: system(), posix_spawn(); a forked child's exit */
static int spawn(void)
{
	extern char **environ;
	char *echo[] = { "echo", "spawned", "child", NULL };
	pid_t pid;
	int st, rc;

	fflush(stdout);
	rc = system("/bin/echo hi from system; exit 5");
	printf("system: %d\n", WIFEXITED(rc) ? WEXITSTATUS(rc) : -1);
	fflush(stdout);
	rc = posix_spawn(&pid, "/bin/echo", NULL, NULL, echo, environ);
	if (rc == 0 && waitpid(pid, &st, 0) == pid)
		printf("posix_spawn: exited %d\n", WEXITSTATUS(st));
	else
		printf("posix_spawn: error %d\n", rc);
	pid = fork();
	if (pid == 0)
		_exit(9);
	if (pid > 0 && waitpid(pid, &st, 0) == pid)
		printf("fork: child exited %d\n", WEXITSTATUS(st));
	else
		printf("fork: %s\n", strerrorname_np(errno));
	return 0;
}

/*
 * fork(): parent and child run at the same time, each with its own data
 * (.data, .bss, the C library's malloc and stdio state), then the child
 * becomes /bin/echo. Many short children, and a child that starts the
 * application again while its parent runs it.
 */
static int fork_counter = 100;
static char *fork_msg;

static int forks(char *self)
{
	int to_child[2], to_parent[2], st, ok = 0;
	char c;
	pid_t pid;

	fork_msg = strdup("parent's");
	if (pipe(to_child) || pipe(to_parent))
		return 1;
	fflush(stdout);
	pid = fork();
	if (pid < 0) {
		printf("fork: %s\n", strerrorname_np(errno));
		return 1;
	}
	if (pid == 0) {
		fork_counter = 1;
		free(fork_msg);
		fork_msg = strdup("child's");
		if (write(to_parent[1], "c", 1) != 1 || read(to_child[0], &c, 1) != 1)
			_exit(100);
		printf("child: counter %d, %s heap\n", fork_counter, fork_msg);
		fflush(stdout);
		execl("/bin/echo", "echo", "child became echo", (char *)NULL);
		_exit(127);
	}
	if (read(to_parent[0], &c, 1) != 1)
		return 1;
	printf("parent: counter %d, %s heap\n", fork_counter, fork_msg);
	fork_counter = 2;
	if (write(to_child[1], "p", 1) != 1 || waitpid(pid, &st, 0) != pid)
		return 1;
	printf("parent: child exited %d, counter %d\n", WEXITSTATUS(st), fork_counter);

	for (int i = 0; i < 20; i++) {
		fflush(stdout);
		pid = fork();
		if (pid == 0) {
			char *p = malloc(4096 * (i + 1));

			memset(p, i, 4096 * (i + 1));
			fork_counter += i;
			_exit(p[4096 * i] == i && fork_counter == 2 + i ? i : 200);
		}
		ok += pid > 0 && waitpid(pid, &st, 0) == pid && WEXITSTATUS(st) == i;
	}
	printf("fork: %d of 20 children saw their own data, counter %d\n", ok, fork_counter);

	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		execl(self, self, "return", "7", (char *)NULL);
		_exit(127);
	}
	if (pid > 0 && waitpid(pid, &st, 0) == pid)
		printf("fork: the application started again in the child, exited %d\n", WEXITSTATUS(st));
	return 0;
}

/* For profiling: a named hot function and system calls, for SECS seconds */
__attribute__((noinline)) static unsigned long burn_cpu(unsigned long n)
{
	unsigned long x = n;

	for (unsigned long i = 0; i < n; i++)
		x = x * 6364136223846793005UL + 1442695040888963407UL;
	return x;
}

static int burn(int secs)
{
	time_t end = time(NULL) + secs;
	unsigned long sum = 0;

	while (time(NULL) < end) {
		sum += burn_cpu(200000);
		for (int k = 0; k < 50; k++)
			sum += (unsigned long)getppid();
	}
	printf("burned %d s (%lu)\n", secs, sum & 1);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 2 && !strcmp(argv[1], "burn"))
		return burn(atoi(argv[2]));
	if (argc > 1 && !strcmp(argv[1], "spawn"))
		return spawn();
	if (argc > 1 && !strcmp(argv[1], "fork"))
		return forks("/proc/self/exe");
	if (argc > 1 && !strcmp(argv[1], "serve"))
		return serve();
	if (argc > 2 && !strcmp(argv[1], "reexec"))
		return reexec(argv, atoi(argv[2]));
	atexit(at_exit_handler);
	if (argc > 1 && !strcmp(argv[1], "exit")) {
		printf("exiting with %d (unflushed)", atoi(argv[2]));
		exit(atoi(argv[2]));
	}
	if (argc > 1 && !strcmp(argv[1], "abort"))
		abort();
	if (argc > 1 && !strcmp(argv[1], "smash")) {
		smash(argv[2]);
		return 0;
	}
	if (argc > 1 && !strcmp(argv[1], "return"))
		return atoi(argv[2]);
	struct { const char *name; void (*fn)(void); } tests[] = {
		{ "startup", t_startup }, { "stdio", t_stdio }, { "malloc", t_malloc }, { "strings", t_strings },
		{ "time", t_time }, { "files", t_files }, { "threads", t_threads }, { "signals", t_signals },
		{ "sockets", t_sockets }, { "errno", t_errno }, { "unwind", t_unwind },
	};
	t_env(argc, argv);
	for (size_t k = 0; k < sizeof(tests) / sizeof(*tests); k++) {
		int run = argc == 1;
		for (int j = 1; j < argc; j++)
			run |= !strcmp(argv[j], tests[k].name);
		if (run)
			tests[k].fn();
	}
	printf("done\n");
	return 0;
}
