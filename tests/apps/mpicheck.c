/*
 * The MPI subset of guest/mpi (ukl-mpi) against the MPI standard: every
 * call and datatype Secrecy uses, in the patterns it uses them. Builds
 * against guest/mpi/mpi.h and libukl-mpi.a, and against any MPI (mpicc),
 * and prints the same lines on each rank under both; it checks the data
 * it receives itself, and exits 1 on any wrong byte (with a "FAIL" line
 * on stderr).
 *
 *	mpicheck           the cases below; "rank R: all ok" at the end
 *	mpicheck abort     a ring exchange, then rank 1 (rank 0 of a world of
 *	                   one) calls MPI_Abort(MPI_COMM_WORLD, 7) while the
 *	                   others wait for a message from it
 *	mpicheck sendall   every rank MPI_Sends 4 MiB to its successor before
 *	                   it receives from its predecessor: unsafe in MPI
 *	                   (MPICH deadlocks), fine with ukl-mpi, whose
 *	                   MPI_Send reads while it writes
 *
 * pred and succ are the neighbours on the ring of ranks; in a world of
 * one, both are the rank itself (sends to self). The blocking cases send
 * before they receive, as Secrecy does, which MPI allows to block until
 * the receive is posted: fine between ranks (small messages go eagerly),
 * but MPICH's world of one blocks in its MPI_Send to itself, so a world
 * of one is a check for ukl-mpi only (which copies such a send).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

#define BIG		(4 << 20)	/* bytes each way in the large case */
#define ORDER_MSGS	5

static int rank, size, pred, succ, failures;

#define CHECK(cond, ...)							\
	do {									\
		if (!(cond)) {							\
			fprintf(stderr, "mpicheck: rank %d: FAIL: ", rank);	\
			fprintf(stderr, __VA_ARGS__);				\
			fputc('\n', stderr);					\
			failures++;						\
		}								\
	} while (0)

static void say(const char *fmt, const char *what)
{
	printf("rank %d: ", rank);
	printf(fmt, what);
	putchar('\n');
	fflush(stdout);
}

/* The I-th value rank FROM sends to rank TO with TAG. */
static unsigned long long val(int from, int to, int tag, long i)
{
	unsigned long long x = ((unsigned long long)from << 48) ^ ((unsigned long long)to << 40) ^
			       ((unsigned long long)tag << 24) ^ (unsigned long long)i;

	x += 0x9e3779b97f4a7c15ull;
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static void fill(unsigned long long *a, long n, int from, int to, int tag)
{
	for (long i = 0; i < n; i++)
		a[i] = val(from, to, tag, i);
}

/* Whether A holds the N values FROM sent to this rank with TAG. */
static bool holds(const unsigned long long *a, long n, int from, int tag)
{
	for (long i = 0; i < n; i++)
		if (a[i] != val(from, rank, tag, i))
			return false;
	return true;
}

/* Secrecy's exchange_shares_array: receive from succ, send to pred. */
static void ring_wait(void)
{
	enum { N = 1000, TAG = 7 };
	long long mine[N], theirs[N];
	MPI_Request r1, r2;

	fill((unsigned long long *)mine, N, rank, pred, TAG);
	memset(theirs, 0, sizeof(theirs));
	MPI_Irecv(theirs, N, MPI_LONG_LONG, succ, TAG, MPI_COMM_WORLD, &r2);
	MPI_Isend(mine, N, MPI_LONG_LONG, pred, TAG, MPI_COMM_WORLD, &r1);
	MPI_Wait(&r1, MPI_STATUS_IGNORE);
	MPI_Wait(&r2, MPI_STATUS_IGNORE);
	CHECK(holds((unsigned long long *)theirs, N, succ, TAG), "ring: wrong data from rank %d", succ);
	say("ring %s: 1000 x MPI_LONG_LONG from succ, Isend/Irecv/Wait", "ok");
}

/* The other way round, with MPI_Waitall and real statuses. */
static void ring_waitall(void)
{
	enum { N = 333, TAG = 8 };
	unsigned long long mine[N], theirs[N];
	MPI_Request r[2];
	MPI_Status st[2];

	fill(mine, N, rank, succ, TAG);
	memset(theirs, 0, sizeof(theirs));
	MPI_Irecv(theirs, N, MPI_UNSIGNED_LONG_LONG, pred, TAG, MPI_COMM_WORLD, &r[0]);
	MPI_Isend(mine, N, MPI_UNSIGNED_LONG_LONG, succ, TAG, MPI_COMM_WORLD, &r[1]);
	MPI_Waitall(2, r, st);
	CHECK(holds(theirs, N, pred, TAG), "waitall: wrong data from rank %d", pred);
	CHECK(st[0].MPI_SOURCE == pred && st[0].MPI_TAG == TAG, "waitall: status source %d tag %d",
	      st[0].MPI_SOURCE, st[0].MPI_TAG);
	say("waitall %s: 333 x MPI_UNSIGNED_LONG_LONG from pred, status source and tag", "ok");
}

/* Secrecy's exchange_shares and exchange_bit_shares: blocking. */
static void blocking(void)
{
	long long s1 = (long long)val(rank, pred, 9, 0), s2 = 0;
	bool b1[5], b2[5] = { 0 };
	char c1[32], c2[32] = "";
	MPI_Status st;

	MPI_Send(&s1, 1, MPI_LONG_LONG, pred, 9, MPI_COMM_WORLD);
	MPI_Recv(&s2, 1, MPI_LONG_LONG, succ, 9, MPI_COMM_WORLD, &st);
	CHECK((unsigned long long)s2 == val(succ, rank, 9, 0), "blocking: wrong share from rank %d", succ);
	CHECK(st.MPI_SOURCE == succ && st.MPI_TAG == 9, "blocking: status source %d tag %d", st.MPI_SOURCE,
	      st.MPI_TAG);
	for (int i = 0; i < 5; i++)
		b1[i] = (rank + i) % 2;
	MPI_Send(b1, 5, MPI_C_BOOL, pred, 10, MPI_COMM_WORLD);
	MPI_Recv(b2, 5, MPI_C_BOOL, succ, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	for (int i = 0; i < 5; i++)
		CHECK(b2[i] == ((succ + i) % 2 == 1), "blocking: bool %d from rank %d", i, succ);
	snprintf(c1, sizeof(c1), "hello from rank %d", rank);
	MPI_Send(c1, (int)strlen(c1) + 1, MPI_CHAR, succ, 11, MPI_COMM_WORLD);
	MPI_Recv(c2, sizeof(c2), MPI_CHAR, pred, 11, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	snprintf(c1, sizeof(c1), "hello from rank %d", pred);
	CHECK(!strcmp(c1, c2), "blocking: '%s' from rank %d", c2, pred);
	say("blocking %s: MPI_LONG_LONG, MPI_C_BOOL, MPI_CHAR with Send/Recv", "ok");
}

/* Tags select the message: received in another order than sent, one
 * receive posted before its message arrives. */
static void tags(void)
{
	unsigned long long v[4] = { 0 }, mine;
	int order[3] = { 23, 21, 22 };
	MPI_Request early;

	MPI_Irecv(&v[3], 1, MPI_UNSIGNED_LONG_LONG, pred, 24, MPI_COMM_WORLD, &early);
	for (int tag = 21; tag <= 24; tag++) {
		mine = val(rank, succ, tag, 0);
		MPI_Send(&mine, 1, MPI_UNSIGNED_LONG_LONG, succ, tag, MPI_COMM_WORLD);
	}
	for (int i = 0; i < 3; i++)
		MPI_Recv(&v[order[i] - 21], 1, MPI_UNSIGNED_LONG_LONG, pred, order[i], MPI_COMM_WORLD,
			 MPI_STATUS_IGNORE);
	MPI_Wait(&early, MPI_STATUS_IGNORE);
	for (int tag = 21; tag <= 24; tag++)
		CHECK(v[tag - 21] == val(pred, rank, tag, 0), "tags: wrong value for tag %d", tag);
	say("tags %s: sent 21 22 23 24, received 23 21 22 and a posted 24", "ok");
}

/* The same tag: messages arrive in the order sent, a large first. */
static void order(void)
{
	static const long len[ORDER_MSGS] = { 65536, 3, 1, 40000, 2 };	/* in 8-byte words */
	static unsigned long long out[ORDER_MSGS][65536], in[65536];
	MPI_Request r[ORDER_MSGS];
	MPI_Status st;

	for (int m = 0; m < ORDER_MSGS; m++) {
		fill(out[m], len[m], rank, succ, 30 + m);
		MPI_Isend(out[m], (int)len[m], MPI_UNSIGNED_LONG_LONG, succ, 30, MPI_COMM_WORLD, &r[m]);
	}
	for (int m = 0; m < ORDER_MSGS; m++) {
		memset(in, 0, sizeof(in[0]) * (size_t)len[m]);
		MPI_Recv(in, 65536, MPI_UNSIGNED_LONG_LONG, pred, 30, MPI_COMM_WORLD, &st);
		CHECK(holds(in, len[m], pred, 30 + m), "order: message %d from rank %d is not the %d-th sent",
		      m, pred, m);
		CHECK(st.MPI_SOURCE == pred && st.MPI_TAG == 30, "order: status source %d tag %d",
		      st.MPI_SOURCE, st.MPI_TAG);
	}
	MPI_Waitall(ORDER_MSGS, r, MPI_STATUSES_IGNORE);
	say("order %s: 5 messages with one tag (512 KiB, 24 B, 8 B, 320000 B, 16 B) in sending order", "ok");
}

/* 4 MiB each way around the ring at once, both directions. */
static void large(void)
{
	long n = BIG / 8;
	unsigned long long *to_s = malloc(BIG), *to_p = malloc(BIG);
	unsigned long long *from_p = calloc(1, BIG), *from_s = calloc(1, BIG);
	MPI_Request r[4];

	if (!to_s || !to_p || !from_p || !from_s) {
		fprintf(stderr, "mpicheck: out of memory\n");
		exit(2);
	}
	fill(to_s, n, rank, succ, 40);
	fill(to_p, n, rank, pred, 41);
	MPI_Isend(to_s, (int)n, MPI_UNSIGNED_LONG_LONG, succ, 40, MPI_COMM_WORLD, &r[0]);
	MPI_Isend(to_p, (int)n, MPI_UNSIGNED_LONG_LONG, pred, 41, MPI_COMM_WORLD, &r[1]);
	MPI_Irecv(from_p, (int)n, MPI_UNSIGNED_LONG_LONG, pred, 40, MPI_COMM_WORLD, &r[2]);
	MPI_Irecv(from_s, (int)n, MPI_UNSIGNED_LONG_LONG, succ, 41, MPI_COMM_WORLD, &r[3]);
	MPI_Waitall(4, r, MPI_STATUSES_IGNORE);
	CHECK(holds(from_p, n, pred, 40), "large: wrong data from rank %d", pred);
	CHECK(holds(from_s, n, succ, 41), "large: wrong data from rank %d", succ);
	free(to_s);
	free(to_p);
	free(from_p);
	free(from_s);
	say("large %s: 4 MiB to succ and to pred at once, Isend before Irecv", "ok");
}

/* Zero-length messages, blocking and not. */
static void empty(void)
{
	char buf[16], none[1];
	MPI_Request r[2];
	MPI_Status st[2];

	memset(buf, 'x', sizeof(buf));
	MPI_Send(none, 0, MPI_CHAR, succ, 50, MPI_COMM_WORLD);
	MPI_Recv(buf, sizeof(buf), MPI_CHAR, pred, 50, MPI_COMM_WORLD, &st[0]);
	CHECK(st[0].MPI_SOURCE == pred && st[0].MPI_TAG == 50, "empty: status source %d tag %d",
	      st[0].MPI_SOURCE, st[0].MPI_TAG);
	MPI_Irecv(buf, 0, MPI_LONG_LONG, succ, 51, MPI_COMM_WORLD, &r[0]);
	MPI_Isend(none, 0, MPI_LONG_LONG, pred, 51, MPI_COMM_WORLD, &r[1]);
	MPI_Waitall(2, r, st);
	CHECK(st[0].MPI_SOURCE == succ && st[0].MPI_TAG == 51, "empty: waitall status source %d tag %d",
	      st[0].MPI_SOURCE, st[0].MPI_TAG);
	for (int i = 0; i < (int)sizeof(buf); i++)
		CHECK(buf[i] == 'x', "empty: byte %d of the buffer changed", i);
	say("empty %s: zero-length Send/Recv and Isend/Irecv/Waitall", "ok");
}

/* A rank sends to itself. */
static void self(void)
{
	long long out[3] = { rank, -rank, 42 }, in[3] = { 0 };
	MPI_Request r;
	MPI_Status st;

	MPI_Isend(out, 3, MPI_LONG_LONG, rank, 60, MPI_COMM_WORLD, &r);
	MPI_Recv(in, 3, MPI_LONG_LONG, rank, 60, MPI_COMM_WORLD, &st);
	MPI_Wait(&r, MPI_STATUS_IGNORE);
	CHECK(!memcmp(in, out, sizeof(in)), "self: wrong data");
	CHECK(st.MPI_SOURCE == rank && st.MPI_TAG == 60, "self: status source %d tag %d", st.MPI_SOURCE,
	      st.MPI_TAG);
	say("self %s: Isend to itself, Recv", "ok");
}

/* Unsafe in MPI: every rank's MPI_Send of 4 MiB before any receive. */
static void sendall(void)
{
	long n = BIG / 8;
	unsigned long long *out = malloc(BIG), *in = calloc(1, BIG);

	if (!out || !in) {
		fprintf(stderr, "mpicheck: out of memory\n");
		exit(2);
	}
	fill(out, n, rank, succ, 70);
	MPI_Send(out, (int)n, MPI_UNSIGNED_LONG_LONG, succ, 70, MPI_COMM_WORLD);
	MPI_Recv(in, (int)n, MPI_UNSIGNED_LONG_LONG, pred, 70, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	CHECK(holds(in, n, pred, 70), "sendall: wrong data from rank %d", pred);
	free(out);
	free(in);
	say("sendall %s: 4 MiB MPI_Send to succ before MPI_Recv from pred", "ok");
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "";

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	pred = (rank + size - 1) % size;
	succ = (rank + 1) % size;
	printf("rank %d: of %d\n", rank, size);
	fflush(stdout);
	if (!strcmp(mode, "abort")) {
		int victim = size > 1 ? 1 : 0;
		long long x;

		ring_wait();
		if (rank == victim) {
			say("%s with code 7", "MPI_Abort");
			MPI_Abort(MPI_COMM_WORLD, 7);
		}
		MPI_Recv(&x, 1, MPI_LONG_LONG, victim, 99, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		say("%s: a message from the aborted rank", "FAIL");
		return 1;
	}
	if (!strcmp(mode, "sendall")) {
		sendall();
	} else if (*mode) {
		fprintf(stderr, "usage: mpicheck [abort|sendall]\n");
		MPI_Abort(MPI_COMM_WORLD, 2);
	} else {
		ring_wait();
		ring_waitall();
		blocking();
		tags();
		order();
		large();
		empty();
		self();
	}
	say("%s", failures ? "FAILED" : "all ok");
	MPI_Finalize();
	return failures ? 1 : 0;
}
