// SPDX-License-Identifier: GPL-2.0
/*
 * The hello of the stock-Linux peer (`ukl bench boot --peers
 * firecracker-linux`): a static program that the kernel starts as init
 * (rdinit=/init), as Firecracker's "Linux microVM" runs an application.
 * It prints what examples/hello prints first, then powers the machine
 * off: init must not exit (the kernel panics when it does).
 */
#include <stdio.h>
#include <sys/reboot.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	printf("Hello from %s (pid %d)\n", argc > 0 ? argv[0] : "?", (int)getpid());
	fflush(stdout);
	reboot(RB_POWER_OFF);
	perror("reboot");
	for (;;)
		pause();
}
