# Linked into the host-runnable twin that ukl-cc writes for every UKL
# program: an application whose own inline assembly calls the UKL entry
# still runs as an ordinary process (configure's test programs, make check).
	.text
	.globl	ukl_entry_SYSCALL_64
	.type	ukl_entry_SYSCALL_64, @function
ukl_entry_SYSCALL_64:
	syscall
	ret
	.size	ukl_entry_SYSCALL_64, . - ukl_entry_SYSCALL_64
	.section .note.GNU-stack, "", @progbits
