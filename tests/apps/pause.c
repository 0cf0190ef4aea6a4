/*
 * pause: the process of a CRI pod sandbox, as registry.k8s.io/pause runs
 * one, for the CRI test (tests/vm/test_cri_urunc.py) on hosts that cannot
 * pull that image. It holds the pod's namespaces: it waits for signals,
 * ends on SIGINT or SIGTERM, and reaps children (it may be the pod's PID 1).
 */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig)
{
	(void)sig;
	_exit(0);
}

static void reap(int sig)
{
	(void)sig;
	while (waitpid(-1, NULL, WNOHANG) > 0)
		;
}

int main(void)
{
	signal(SIGINT, stop);
	signal(SIGTERM, stop);
	signal(SIGCHLD, reap);
	for (;;)
		pause();
}
