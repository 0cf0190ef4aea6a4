// SPDX-License-Identifier: GPL-2.0
/*
 * A token around a ring of `ukl cluster` nodes: node R listens on port
 * 7000, connects to node R+1 (its successor, from UKL_HOSTS), sends its
 * rank and receives its predecessor's, then prints both. The test of the
 * cluster's network and environment. With the argument "fail", node 1
 * exits with status 3 at once (the others then wait for it forever); with
 * "hang", every node waits forever after the exchange.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define PORT 7000

static int fail(const char *what)
{
	perror(what);
	return 1;
}

int main(int argc, char **argv)
{
	const char *r = getenv("UKL_RANK"), *h = getenv("UKL_HOSTS");
	char hosts[1024], *addr[64], *p;
	int n = 0, rank, one = 1, lfd, cfd, afd;
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons(PORT) };

	if (!r || !h || strlen(h) >= sizeof(hosts)) {
		fprintf(stderr, "ring: UKL_RANK and UKL_HOSTS are not set\n");
		return 2;
	}
	rank = atoi(r);
	if (argc > 1 && !strcmp(argv[1], "fail") && rank == 1)
		return 3;
	strcpy(hosts, h);
	for (p = strtok(hosts, ","); p && n < 64; p = strtok(NULL, ","))
		addr[n++] = p;
	if (rank < 0 || rank >= n)
		return 2;
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 4))
		return fail("bind");
	inet_pton(AF_INET, addr[(rank + 1) % n], &sa.sin_addr);
	for (int tries = 0;; tries++) {
		cfd = socket(AF_INET, SOCK_STREAM, 0);
		if (!connect(cfd, (struct sockaddr *)&sa, sizeof(sa)))
			break;
		close(cfd);
		if (tries == 600)
			return fail("connect");
		usleep(100000);
	}
	setsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	afd = accept(lfd, NULL, NULL);
	if (afd < 0)
		return fail("accept");
	int pred = -1;

	if (write(cfd, &rank, sizeof(rank)) != sizeof(rank) || read(afd, &pred, sizeof(pred)) != sizeof(pred))
		return fail("exchange");
	printf("node %d of %d at %s: token from node %d\n", rank, n, addr[rank], pred);
	if (argc > 1 && !strcmp(argv[1], "hang")) {
		fflush(stdout);
		for (;;)
			pause();
	}
	return pred == (rank + n - 1) % n ? 0 : 1;
}
