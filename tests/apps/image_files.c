// SPDX-License-Identifier: GPL-2.0
/*
 * What a server finds in an image: users, groups, hosts and services
 * from the minimal /etc, and files added with --file and --overlay.
 */
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <arpa/inet.h>

static void show_file(const char *path)
{
	char line[256];
	struct stat st;
	FILE *f = fopen(path, "r");

	if (!f || stat(path, &st)) {
		printf("%s: missing\n", path);
		return;
	}
	while (fgets(line, sizeof(line), f))
		printf("%s: %s", path, line);
	printf("%s: mode %o\n", path, (unsigned int)(st.st_mode & 07777));
	fclose(f);
}

int main(int argc, char **argv)
{
	struct passwd *pw = getpwnam("nobody");
	struct group *gr = getgrgid(65534);
	struct servent *se = getservbyname("http", "tcp");
	struct addrinfo hints = { .ai_family = AF_INET }, *ai = NULL;
	char addr[INET_ADDRSTRLEN] = "?";

	printf("nobody: %d %d\n", pw ? (int)pw->pw_uid : -1, pw ? (int)pw->pw_gid : -1);
	printf("group 65534: %s\n", gr ? gr->gr_name : "none");
	printf("http: %d\n", se ? ntohs(se->s_port) : -1);
	if (getaddrinfo("localhost", NULL, &hints, &ai) == 0) {
		inet_ntop(AF_INET, &((struct sockaddr_in *)ai->ai_addr)->sin_addr, addr, sizeof(addr));
		freeaddrinfo(ai);
	}
	printf("localhost: %s\n", addr);
	for (int i = 1; i < argc; i++)
		show_file(argv[i]);
	return 0;
}
