// SPDX-License-Identifier: GPL-2.0
/*
 * qemu-system-x86_64 for urunc on a host without usable KVM.
 *
 * urunc (pkg/unikontainers/hypervisors/qemu.go) starts QEMU with
 * "-cpu host -enable-kvm". Where KVM cannot run a guest, scripts/install-urunc
 * puts this program first on containerd's (and so urunc's) PATH. It maps
 * exactly two things and passes every other word unchanged:
 *   -enable-kvm  ->  -accel tcg
 *   -cpu host    ->  -cpu max
 * and executes REAL_QEMU, a copy of the host's QEMU under /usr/lib: urunc
 * starts QEMU inside the container's root file system, where of the host
 * only its monitor binary, /lib, /lib64, /usr/lib and QEMU's data are
 * mounted. Static, so that it needs nothing there.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef REAL_QEMU
#error "build with -DREAL_QEMU='\"/path/to/qemu-system-x86_64\"'"
#endif

int main(int argc, char **argv)
{
	/* each word becomes at most two */
	char **args = calloc((size_t)argc * 2 + 1, sizeof(*args));
	int n = 0;

	if (!args) {
		perror("qemu-tcg");
		return 127;
	}
	args[n++] = REAL_QEMU;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "-enable-kvm")) {
			args[n++] = "-accel";
			args[n++] = "tcg";
		} else if (!strcmp(argv[i], "-cpu") && i + 1 < argc && !strcmp(argv[i + 1], "host")) {
			args[n++] = "-cpu";
			args[n++] = "max";
			i++;
		} else {
			args[n++] = argv[i];
		}
	}
	args[n] = NULL;
	execv(REAL_QEMU, args);
	fprintf(stderr, "qemu-tcg: cannot execute %s: %s\n", REAL_QEMU, strerror(errno));
	return 127;
}
