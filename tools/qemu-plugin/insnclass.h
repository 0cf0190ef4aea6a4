/*
 * insnclass.h: the instruction classes of tools/qemu-plugin/insnclass.c and the
 * region marker the guest executes (guest/bench/region.h emits it).
 *
 * A region marker is the 7-byte multi-byte NOP "nopl DISP32(%rax)",
 * 0F 1F 80 followed by a 32-bit displacement whose upper half is 0x554B
 * ("UK") and whose lower half says what the marker does:
 *
 *   0x0000 | id   begin region id (id < 0x4000)
 *   0x4000 | id   end region id
 *   0x8000 | id   select id: the region that the next "begin selected"
 *                 markers open (a global setting, not per vCPU)
 *   0xC000        begin the selected region
 *   0xC001        end the open region
 *
 * It executes as a NOP on every x86-64 CPU and in TCG (it accesses no
 * memory), and compilers and assemblers only emit that form with a zero
 * displacement as padding, so it does not occur in ordinary code.
 * "Selected" markers carry no id, so they can sit in the same inline-asm
 * statement as a timing instruction (guest/bench/lebench.c) without changing the
 * code the compiler generates around it.
 */
#ifndef UKL_INSNCLASS_H
#define UKL_INSNCLASS_H

#include <stddef.h>
#include <stdint.h>

#define REGION_MAGIC 0x554B0000u
#define REGION_MAX 0x4000u	/* ids 0 .. 16383 */
#define MARK_BEGIN_ID 0x0000u
#define MARK_END_ID 0x4000u
#define MARK_SELECT_ID 0x8000u
#define MARK_BEGIN_SELECTED 0xC000u
#define MARK_END_OPEN 0xC001u

/* X(enum name, report name) in report order; CLS_OTHER last. */
#define INSN_CLASSES(X)						\
	X(SYSCALL, "syscall")		/* SYSCALL */			\
	X(SYSRET, "sysret")		/* SYSRET(Q) */			\
	X(IRET, "iret")			/* IRET, IRETD, IRETQ */	\
	X(SWAPGS, "swapgs")						\
	X(WRMSR, "wrmsr")						\
	X(RDMSR, "rdmsr")						\
	X(MOV_CR3, "mov_cr3")		/* MOV to CR3 */		\
	X(MOV_CR4, "mov_cr4")		/* MOV to CR4 */		\
	X(MOV_CR_OTHER, "mov_cr_other")	/* MOV to CR0/CR2, LMSW, CLTS */ \
	X(INVLPG, "invlpg")						\
	X(INVPCID, "invpcid")						\
	X(SERIALIZING, "serializing")	/* other serializing: WBINVD, INVD, LGDT, LIDT, LLDT, LTR, \
					   MOV to DR, SERIALIZE, XSETBV, RSM */ \
	X(LFENCE, "lfence")						\
	X(MFENCE, "mfence")						\
	X(SFENCE, "sfence")						\
	X(VERW, "verw")							\
	X(POPF, "popf")			/* POPF, POPFQ */		\
	X(CLI, "cli")							\
	X(STI, "sti")							\
	X(STAC_CLAC, "stac_clac")	/* SMAP toggles */		\
	X(RDTSC, "rdtsc")						\
	X(RDTSCP, "rdtscp")						\
	X(CPUID, "cpuid")						\
	X(XSAVE, "xsave")		/* XSAVE, XSAVEOPT, XSAVEC, XSAVES (and 64-bit forms) */ \
	X(XRSTOR, "xrstor")		/* XRSTOR, XRSTORS */		\
	X(OTHER, "other")

enum insn_class {
#define X(name, str) CLS_##name,
	INSN_CLASSES(X)
#undef X
	NCLASSES
};

enum marker { MARK_NONE, MARK_BEGIN, MARK_END, MARK_SELECT };

/* What one instruction is: a class, or a region marker. */
struct insn_kind {
	enum insn_class cls;	/* CLS_OTHER for a marker */
	enum marker marker;
	int selected;		/* MARK_BEGIN: of the selected region; MARK_END: of the open one */
	unsigned int region;	/* the id a marker names */
};

/* Decode the bytes of one 64-bit-mode instruction (len: its length). */
struct insn_kind insnclass_decode(const uint8_t *d, size_t len);
const char *insnclass_name(enum insn_class c);
/* HLT or MWAIT: where the vCPU idles */
int insnclass_is_idle(const uint8_t *d, size_t len);
/* a REP, REPE or REPNE string instruction (INS, OUTS, MOVS, CMPS, STOS,
 * LODS, SCAS): QEMU executes each iteration as one instruction */
int insnclass_is_rep_string(const uint8_t *d, size_t len);

#endif
