/*
 * libgcc's soft-fp routines (the _Float128 arithmetic glibc's printf and
 * strtod use) report floating-point exceptions through
 * __sfp_handle_exceptions. Debian's libgcc.a builds that function with the
 * red zone, which ring 0 cannot have, so UKL applications link this one:
 * the exception bits of soft-fp on x86 are those of <fenv.h>, and glibc's
 * feraiseexcept raises them exactly.
 */
#include <fenv.h>

void __sfp_handle_exceptions(int ex);

void __sfp_handle_exceptions(int ex)
{
	feraiseexcept(ex & FE_ALL_EXCEPT);
}
