/*
 * Unwind tables. An executable finds its .eh_frame through PT_GNU_EH_FRAME
 * or gcc's crtbegin, neither of which a UKL application has: its unwind
 * tables are in the kernel image, gathered at __ukl_eh_frame by
 * kernel/ukl-eh-frame.lds (ending with a zero terminator). Registering
 * them with libgcc's unwinder before any other constructor runs lets
 * pthread_exit() and pthread_cancel() unwind the stack, and any other
 * user of the unwinder (_Unwind_Backtrace) find the application's frames.
 */
extern const char __ukl_eh_frame[];
void __register_frame_info(const void *begin, void *object);

/* libgcc's struct object, which it fills in; larger than it needs */
static long ukl_eh_object[16];

__attribute__((constructor(101))) static void ukl_register_eh_frame(void)
{
	__register_frame_info(__ukl_eh_frame, ukl_eh_object);
}
