// SPDX-License-Identifier: GPL-2.0
/*
 * enosys: for each argument NAME:NR, make system call NR with all
 * arguments zero and print "NAME ENOSYS" when the kernel lacks it, else
 * "NAME present". A specialized kernel (`ukl build --specialize`) lacks
 * the calls the application was not seen to make: they must fail as on
 * any Linux built without them. The test passes calls that are harmless
 * with zero arguments.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		char *colon = strchr(argv[i], ':');
		long ret;

		if (!colon) {
			fprintf(stderr, "enosys: %s is not NAME:NR\n", argv[i]);
			return 2;
		}
		*colon = 0;
		errno = 0;
		ret = syscall(strtol(colon + 1, NULL, 0), 0L, 0L, 0L, 0L, 0L, 0L);
		printf("%s %s\n", argv[i], ret < 0 && errno == ENOSYS ? "ENOSYS" : "present");
	}
	return 0;
}
