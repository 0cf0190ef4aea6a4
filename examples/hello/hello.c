/* hello: prints its arguments and how it runs, and exits with status 0. */
#include <stdio.h>
#include <unistd.h>

static int privilege_level(void)
{
	unsigned short cs;

	__asm__ volatile("mov %%cs, %0" : "=r"(cs));
	return cs & 3;
}

int main(int argc, char **argv)
{
	printf("Hello from %s (pid %d, running in ring %d)\n", argv[0], (int)getpid(),
	       privilege_level());
	for (int i = 1; i < argc; i++)
		printf("argv[%d] = %s\n", i, argv[i]);
	return 0;
}
