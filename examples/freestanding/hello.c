/*
 * hello without a C library: the same source runs as an ordinary process
 * (--config linux, SYSCALL) and linked into the kernel (--config base,
 * a call to ukl_entry_SYSCALL_64 in ring 0).
 *
 *   ./ukl build examples/freestanding/hello.c --freestanding --config base -o out/fhello
 *   ./ukl run out/fhello -- x y
 */
#include <asm/unistd.h>

static long syscall3(long n, long a, long b, long c)
{
	long ret;
#ifdef __UKL__
	__asm__ volatile("call ukl_entry_SYSCALL_64" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
#else
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c)
			 : "rcx", "r11", "memory");
#endif
	return ret;
}

static void put(const char *s)
{
	long n = 0;

	while (s[n])
		n++;
	syscall3(__NR_write, 1, (long)s, n);
}

void cmain(long *sp)
{
	char **argv = (char **)(sp + 1);
	unsigned short cs;
	char ring[] = "ring 0\n";

	__asm__ volatile("mov %%cs, %0" : "=r"(cs));
	ring[5] = (char)('0' + (cs & 3));
	put("Hello from ");
	put(argv[0]);
	put(", running in ");
	put(ring);
	for (long i = 1; i < sp[0]; i++) {
		put("  argument: ");
		put(argv[i]);
		put("\n");
	}
	syscall3(__NR_exit_group, 0, 0, 0);
}

__asm__(".text\n.globl _start\n_start: mov %rsp, %rdi\n and $-16, %rsp\n call cmain\n ud2\n");
