/*
 * freestanding.h: what a program without a C library needs to run both as
 * an ordinary process (--config linux: the SYSCALL instruction) and linked
 * into the kernel (--config base: a call to ukl_entry_SYSCALL_64, selected
 * by __UKL__, which `ukl build` defines). Include it in exactly one file.
 *
 * Provides sys(nr, args...), memset, memcpy, slen, seq, say() (a printf with
 * %d %ld %u %lu %x %lx %s %p %c), flush() and exit_(); the program defines
 * int main(int argc, char **argv, char **envp).
 */
#ifndef UKL_FREESTANDING_H
#define UKL_FREESTANDING_H
#include <asm/unistd.h>
#include <stddef.h>

#ifdef __UKL__
#define SYSCALL_INSN "call ukl_entry_SYSCALL_64\n"
#else
#define SYSCALL_INSN "syscall\n"
#endif

/* ---- system calls ---- */
static __attribute__((unused)) long sys6(long n, long a, long b, long c, long d, long e, long f)
{
	register long r10 __asm__("r10") = d, r8 __asm__("r8") = e, r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile(SYSCALL_INSN : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define sys(n, ...) sys_(n, __VA_ARGS__, 0, 0, 0, 0, 0, 0)
#define sys_(n, a, b, c, d, e, f, ...) sys6(n, (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define sys0(n) sys6(n, 0, 0, 0, 0, 0, 0)

void *memset(void *d, int c, size_t n)
{
	unsigned char *p = d;

	while (n--)
		*p++ = (unsigned char)c;
	return d;
}

void *memcpy(void *d, const void *s, size_t n)
{
	unsigned char *p = d;
	const unsigned char *q = s;

	while (n--)
		*p++ = *q++;
	return d;
}

static __attribute__((unused)) size_t slen(const char *s)
{
	size_t n = 0;

	while (s[n])
		n++;
	return n;
}

static __attribute__((unused)) int seq(const char *a, const char *b)
{
	while (*a && *a == *b)
		a++, b++;
	return *a == *b;
}

/* ---- output: a tiny printf (%d %ld %u %x %lx %s %p %c) ---- */
/* Set hold_output to keep output until exit (or 16 KiB): no console I/O
 * while measuring. */
static __attribute__((unused)) char outbuf[16384];
static __attribute__((unused)) size_t outlen;
static __attribute__((unused)) int hold_output;

static __attribute__((unused)) void flush(void)
{
	if (outlen)
		sys(__NR_write, 1, outbuf, outlen);
	outlen = 0;
}

static __attribute__((unused)) void putc_(char c)
{
	outbuf[outlen++] = c;
	if ((c == '\n' && !hold_output) || outlen == sizeof(outbuf))
		flush();
}

static __attribute__((unused)) void putnum(unsigned long v, int base, int neg)
{
	char tmp[32];
	int i = 0;

	if (neg)
		putc_('-');
	do {
		tmp[i++] = "0123456789abcdef"[v % base];
		v /= base;
	} while (v);
	while (i)
		putc_(tmp[--i]);
}

static __attribute__((unused)) void say(const char *fmt, ...)
{
	__builtin_va_list ap;

	__builtin_va_start(ap, fmt);
	for (; *fmt; fmt++) {
		int lng = 0;

		if (*fmt != '%') {
			putc_(*fmt);
			continue;
		}
		if (*++fmt == 'l')
			lng = 1, fmt++;
		switch (*fmt) {
		case 'd': {
			long v = lng ? __builtin_va_arg(ap, long) : __builtin_va_arg(ap, int);

			putnum(v < 0 ? -(unsigned long)v : (unsigned long)v, 10, v < 0);
			break;
		}
		case 'u':
			putnum(lng ? __builtin_va_arg(ap, unsigned long) : __builtin_va_arg(ap, unsigned int), 10, 0);
			break;
		case 'x':
			putnum(lng ? __builtin_va_arg(ap, unsigned long) : __builtin_va_arg(ap, unsigned int), 16, 0);
			break;
		case 'p':
			putc_('0'), putc_('x');
			putnum((unsigned long)__builtin_va_arg(ap, void *), 16, 0);
			break;
		case 's': {
			const char *s = __builtin_va_arg(ap, const char *);

			while (*s)
				putc_(*s++);
			break;
		}
		case 'c':
			putc_((char)__builtin_va_arg(ap, int));
			break;
		default:
			putc_(*fmt);
		}
	}
	__builtin_va_end(ap);
}

static __attribute__((unused)) void __attribute__((noreturn)) exit_(int code)
{
	flush();
	sys(__NR_exit_group, code);
	__builtin_unreachable();
}

int main(int argc, char **argv, char **envp);

void __freestanding_start(unsigned long *sp)
{
	int argc = (int)sp[0];
	char **argv = (char **)(sp + 1);

	exit_(main(argc, argv, argv + argc + 1));
}

__asm__(".text\n.globl _start\n_start:\n"
	"  mov %rsp, %rdi\n  and $-16, %rsp\n  call __freestanding_start\n  ud2\n");
#endif
