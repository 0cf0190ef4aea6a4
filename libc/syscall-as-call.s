# Prepended to every assembly unit of code that runs in the UKL image (gcc
# -Wa,FILE makes the assembler read it first). GNU as expands a macro
# before it looks up an instruction, so every SYSCALL instruction, whether
# written in a .S file or in inline asm, becomes a call to the kernel's
# UKL system call entry, which keeps the SYSCALL register convention
# (arguments in rdi, rsi, rdx, r10, r8, r9; rcx and r11 clobbered).
.macro syscall
	call ukl_entry_SYSCALL_64
.endm
