/*
 * tcp-echo: a small TCP echo server (epoll, one thread). Every byte a
 * client sends comes back. Arguments: [PORT [MAX_CLIENTS]]; with
 * MAX_CLIENTS it exits with status 0 after that many connections closed,
 * so that a test or a script ends cleanly.
 *
 *   ./ukl build examples/tcp-echo/tcp-echo.c --config base -o out/echo
 *   ./ukl run out/echo --forward 5555:5555 -- 5555
 *   (on the host) nc 127.0.0.1 5555
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 5555;
	long max_clients = argc > 2 ? atol(argv[2]) : -1, closed = 0;
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
				 .sin_addr.s_addr = htonl(INADDR_ANY) };
	int one = 1, ls = socket(AF_INET, SOCK_STREAM, 0), ep = epoll_create1(0);
	struct epoll_event ev = { .events = EPOLLIN, .data.fd = ls };

	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (ls < 0 || bind(ls, (struct sockaddr *)&a, sizeof(a)) || listen(ls, 64) ||
	    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev)) {
		perror("tcp-echo: listen");
		return 1;
	}
	printf("tcp-echo: listening on port %d\n", port);
	fflush(stdout);
	while (max_clients < 0 || closed < max_clients) {
		struct epoll_event evs[64];
		int n = epoll_wait(ep, evs, 64, -1);

		if (n < 0 && errno == EINTR)
			continue;
		for (int i = 0; i < n; i++) {
			int fd = evs[i].data.fd;

			if (fd == ls) {
				int c = accept(ls, NULL, NULL);
				struct epoll_event cev = { .events = EPOLLIN, .data.fd = c };

				if (c >= 0)
					epoll_ctl(ep, EPOLL_CTL_ADD, c, &cev);
				continue;
			}
			char buf[16384];
			ssize_t got = read(fd, buf, sizeof(buf));

			if (got <= 0) {
				if (got < 0)
					perror("tcp-echo: read");
				close(fd);
				closed++;
				continue;
			}
			for (ssize_t off = 0; off < got;) {
				ssize_t w = write(fd, buf + off, got - off);

				if (w <= 0) {
					perror("tcp-echo: write");
					break;
				}
				off += w;
			}
		}
	}
	printf("tcp-echo: served %ld clients\n", closed);
	return 0;
}
