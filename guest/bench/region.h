/*
 * region.h: measured-region markers for ukl's instruction-class plugin
 * (tools/qemu-plugin/insnclass.c; the encoding is in tools/qemu-plugin/insnclass.h).
 *
 * A marker is the multi-byte NOP "nopl 0x554BXXXX(%rax)" (0F 1F 80 +
 * disp32). It is a NOP on every x86-64 CPU and in QEMU and changes no
 * register, flag or memory, so a program carries its markers whether or
 * not the plugin is loaded.
 *
 *   REGION_BEGIN(id); ... REGION_END(id);      id: a constant < 16384
 *
 *   region_select(id);                          id: any value < REGION_IDS
 *   asm(REGION_BEGIN_SELECTED "rdtscp" ...);    begins region `id`
 *   asm("rdtscp" REGION_END_OPEN ...);          ends it
 *
 * The second form is for code whose instruction count must not change:
 * the begin/end markers carry no id, so they go into an existing asm
 * statement (next to a timing instruction) and the compiler generates the
 * same code around it; region_select() runs once, outside the timed loop
 * (an id is part of the instruction, so it calls one of REGION_IDS stubs,
 * "marker; ret", through its address, skipping the red zone).
 */
#ifndef UKL_REGION_H
#define UKL_REGION_H

#define REGION_MARKER_(low) ".byte 0x0f, 0x1f, 0x80\n\t.long 0x554B0000 + (" #low ")\n\t"
#define REGION_BEGIN(id) __asm__ volatile(REGION_MARKER_(0x0000 + (id)) ::: "memory")
#define REGION_END(id) __asm__ volatile(REGION_MARKER_(0x4000 + (id)) ::: "memory")
#define REGION_BEGIN_SELECTED REGION_MARKER_(0xC000)
#define REGION_END_OPEN REGION_MARKER_(0xC001)

#define REGION_IDS 512		/* region_select() ids 0 .. 511 */

__asm__(".pushsection .text\n"
	".balign 64\n"
	"region_select_stubs:\n"
	".set region_i, 0\n"
	".rept 512\n"
	".byte 0x0f, 0x1f, 0x80\n"
	".long 0x554B0000 + 0x8000 + region_i\n"
	"ret\n"
	".set region_i, region_i + 1\n"
	".endr\n"
	".popsection\n");

extern const char region_select_stubs[] __attribute__((visibility("hidden")));

static inline void region_select(unsigned int id)
{
	const char *stub = region_select_stubs + 8 * (id % REGION_IDS);

	__asm__ volatile("lea -128(%%rsp), %%rsp\n\t"
			 "call *%0\n\t"
			 "lea 128(%%rsp), %%rsp" : : "r"(stub) : "memory");
}

#endif
