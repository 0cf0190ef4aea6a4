/*
 * insnclass: a QEMU TCG plugin (API version 1, QEMU 7.2) that counts the
 * guest's executed instructions by class -- SYSCALL, SYSRET, IRET, SWAPGS,
 * WRMSR, MOV to CR3, VERW, fences, ... (insnclass.h lists them) -- in total
 * and per measured region, for ukl's cycle model (tools/ukltool/plugin/cyclemodel.py,
 * docs/cycle-model.md).
 *
 *   qemu-system-x86_64 ... -plugin insnclass.so,out=REPORT.json
 *
 * Each instruction is classified once, when QEMU translates it, by decoding
 * its bytes (prefixes, REX, the 0F escape, the ModRM byte where the class
 * depends on it). Executions are counted cheaply: all instructions by one
 * inline add per translation block (exact with one vCPU; with several, a
 * per-TB callback into per-vCPU counters, since QEMU's inline adds are not
 * atomic), and a classed instruction -- rare -- by a callback into its
 * vCPU's counters.
 *
 * Regions: the guest marks a region's begin and end with multi-byte NOPs
 * (insnclass.h; guest/bench/region.h emits them) that name the region, or that
 * open the region a "select" marker named last. Per vCPU, what executes
 * between a begin and the next end (any guest thread on that vCPU, the
 * kernel and interrupts included, as under -icount) is added to that
 * region; each begin..end is one iteration; a begin while a region is open
 * starts it afresh. Per region the report gives the sums, the number of
 * iterations and the most frequent per-iteration class vector (the mode:
 * what a typical iteration executes, without the rare timer interrupt that
 * the sums include).
 *
 * With machine=on a region is the machine's instead: from a begin on any
 * vCPU to the next end on any vCPU, what every vCPU executes is added to it
 * (for a guest with several vCPUs whose measured thread may move between
 * them, and whose interrupts and kernel threads run on either: `ukl bench
 * secrecy`). The vCPU that runs the marker is counted to the marker; the
 * others to the start of the block each was executing (their counts are read
 * while they run, so each may be off by one block).
 *
 * Profile (profile=on, one vCPU): per region, how often each translation
 * block ran while the region was open, with the addresses of the block's
 * instructions, so the tool can say which functions the instructions were
 * in (tools/ukltool/plugin/insnprofile.py). Blocks are counted whole when they
 * start: the block holding a region's begin marker is not counted, the
 * one holding its end marker is (both are the benchmark's own code), and a
 * block cut short by an exception is counted whole.
 *
 * With profile=points (and at=...), the profile's "region" of a block is
 * instead the number of points reached when it began: 0 before the first
 * point, k between point k-1 and point k (for `ukl bench boot
 * --by-function`: where the boot's instructions go between its points).
 * The block holding a point is counted in the span before it.
 *
 * Points (at=ADDR:ADDR:..., hexadecimal guest virtual addresses, at most
 * MAX_POINTS, one vCPU): for each address, in order, the first execution of
 * an instruction there after the previous point's: the instructions
 * executed before it, the idle instructions (HLT, MWAIT) executed before it,
 * the executions of REP-prefixed string instructions before it (QEMU runs,
 * and -icount counts, each iteration as one instruction: a 4 MB `rep stosb`
 * is 4 million instructions, where a real CPU clears 16 or more bytes a
 * cycle), and the host's monotonic clock then (for `ukl bench boot`: the kernel's
 * first instruction, its entries, the application's main()). Under
 * -icount shift=0,sleep=off the guest's clock is the instructions plus the
 * idle time QEMU skips at each HLT; the idle count says where that applies.
 *
 * At exit QEMU calls our atexit callback, which writes a JSON report to the
 * file given as out=PATH (through PATH.partial and a rename). With
 * stop=last (and at=...) the plugin writes the report when the last point
 * runs and ends QEMU there (status 0): for a guest that never ends by
 * itself, such as a server started as PID 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "insnclass.h"

/* ---- the decoder (also built alone, -DINSNCLASS_DECODER_ONLY, for tests) ---- */

static const char *const class_names[NCLASSES] = {
#define X(name, str) [CLS_##name] = str,
	INSN_CLASSES(X)
#undef X
};

const char *insnclass_name(enum insn_class c)
{
	return c < NCLASSES ? class_names[c] : "?";
}

static struct insn_kind kind(enum insn_class c)
{
	struct insn_kind k = { .cls = c };

	return k;
}

/* 0F 01: system instructions, chosen by the whole ModRM byte (mod 3) or
 * by its reg field (memory forms). */
static enum insn_class grp7(uint8_t modrm, int rep, int repne, int opsize)
{
	int mod = modrm >> 6, reg = (modrm >> 3) & 7;

	if (reg == 6)
		return CLS_MOV_CR_OTHER;	/* LMSW: writes CR0 */
	if (mod != 3) {
		switch (reg) {
		case 2:				/* LGDT */
		case 3:				/* LIDT */
			return CLS_SERIALIZING;
		case 7:
			return CLS_INVLPG;
		default:			/* SGDT, SIDT, SMSW */
			return CLS_OTHER;
		}
	}
	switch (modrm) {
	case 0xf8:
		return CLS_SWAPGS;
	case 0xf9:
		return CLS_RDTSCP;
	case 0xca:				/* CLAC */
	case 0xcb:				/* STAC */
		return CLS_STAC_CLAC;
	case 0xd1:				/* XSETBV */
		return CLS_SERIALIZING;
	case 0xe8:				/* SERIALIZE (F3: SETSSBSY) */
		return rep || repne || opsize ? CLS_OTHER : CLS_SERIALIZING;
	default:
		return CLS_OTHER;
	}
}

/* 0F AE: fences (register forms) and state save/restore (memory forms). */
static enum insn_class grp15(uint8_t modrm, int rep, int repne, int opsize)
{
	int mod = modrm >> 6, reg = (modrm >> 3) & 7;

	if (rep || repne)	/* RDFSBASE.., INCSSP, UMONITOR, UMWAIT, PTWRITE, ... */
		return CLS_OTHER;
	if (mod == 3) {
		if (opsize)	/* TPAUSE, PCOMMIT */
			return CLS_OTHER;
		switch (reg) {
		case 5:
			return CLS_LFENCE;
		case 6:
			return CLS_MFENCE;
		case 7:
			return CLS_SFENCE;
		default:
			return CLS_OTHER;
		}
	}
	if (opsize)		/* CLWB, CLFLUSHOPT */
		return CLS_OTHER;
	switch (reg) {
	case 4:			/* XSAVE, XSAVE64 */
	case 6:			/* XSAVEOPT, XSAVEOPT64 */
		return CLS_XSAVE;
	case 5:			/* XRSTOR, XRSTOR64 */
		return CLS_XRSTOR;
	default:		/* FXSAVE, FXRSTOR, LDMXCSR, STMXCSR, CLFLUSH */
		return CLS_OTHER;
	}
}

struct insn_kind insnclass_decode(const uint8_t *d, size_t len)
{
	int opsize = 0, rep = 0, repne = 0;
	unsigned int rex = 0;
	size_t i = 0;

	if (len == 7 && d[0] == 0x0f && d[1] == 0x1f && d[2] == 0x80 &&
	    d[5] == (REGION_MAGIC >> 16 & 0xff) && d[6] == (REGION_MAGIC >> 24 & 0xff)) {
		struct insn_kind k = { .cls = CLS_OTHER };
		unsigned int low = d[3] | (unsigned int)d[4] << 8;

		k.region = low & (REGION_MAX - 1);
		switch (low & ~(REGION_MAX - 1)) {
		case MARK_BEGIN_ID:
			k.marker = MARK_BEGIN;
			break;
		case MARK_END_ID:
			k.marker = MARK_END;
			break;
		case MARK_SELECT_ID:
			k.marker = MARK_SELECT;
			break;
		default:
			k.region = 0;
			k.selected = 1;
			k.marker = low == MARK_BEGIN_SELECTED ? MARK_BEGIN
				: low == MARK_END_OPEN ? MARK_END : MARK_NONE;
		}
		return k;
	}
	/* Legacy prefixes, then at most one REX right before the opcode (a
	 * REX followed by a legacy prefix is ignored, as by the CPU). */
	for (; i < len; i++) {
		uint8_t b = d[i];

		if (b == 0x66)
			opsize = 1;
		else if (b == 0xf3)
			rep = 1, repne = 0;
		else if (b == 0xf2)
			repne = 1, rep = 0;
		else if (b == 0x67 || b == 0xf0 || b == 0x26 || b == 0x2e || b == 0x36 || b == 0x3e ||
			 b == 0x64 || b == 0x65)
			;
		else if ((b & 0xf0) == 0x40) {
			rex = b;
			continue;
		} else
			break;
		rex = 0;
	}
	if (i >= len)
		return kind(CLS_OTHER);
	switch (d[i]) {
	case 0xcf:
		return kind(CLS_IRET);
	case 0x9d:
		return kind(CLS_POPF);
	case 0xfa:
		return kind(CLS_CLI);
	case 0xfb:
		return kind(CLS_STI);
	case 0x0f:
		break;
	default:		/* incl. VEX (C4, C5), EVEX (62), XOP (8F): none is classed */
		return kind(CLS_OTHER);
	}
	if (++i >= len)
		return kind(CLS_OTHER);
	uint8_t op = d[i++];
	uint8_t modrm = i < len ? d[i] : 0;
	int reg = (modrm >> 3) & 7;
	int has_modrm = i < len;

	switch (op) {
	case 0x05:
		return kind(CLS_SYSCALL);
	case 0x07:
		return kind(CLS_SYSRET);
	case 0x30:
		return kind(CLS_WRMSR);
	case 0x32:
		return kind(CLS_RDMSR);
	case 0x31:
		return kind(CLS_RDTSC);
	case 0xa2:
		return kind(CLS_CPUID);
	case 0x06:		/* CLTS: clears CR0.TS */
		return kind(CLS_MOV_CR_OTHER);
	case 0x08:		/* INVD */
	case 0x09:		/* WBINVD (F3: WBNOINVD) */
	case 0x23:		/* MOV to DRn */
	case 0xaa:		/* RSM */
		return kind(CLS_SERIALIZING);
	case 0x22:		/* MOV to CRn: n from ModRM.reg and REX.R */
		if (!has_modrm)
			return kind(CLS_OTHER);
		switch (reg | (rex & 4 ? 8 : 0)) {
		case 3:
			return kind(CLS_MOV_CR3);
		case 4:
			return kind(CLS_MOV_CR4);
		case 8:		/* CR8 (TPR): not serializing */
			return kind(CLS_OTHER);
		default:
			return kind(CLS_MOV_CR_OTHER);
		}
	case 0x00:		/* group 6 */
		if (!has_modrm)
			return kind(CLS_OTHER);
		if (reg == 5)
			return kind(CLS_VERW);
		if (reg == 2 || reg == 3)	/* LLDT, LTR */
			return kind(CLS_SERIALIZING);
		return kind(CLS_OTHER);
	case 0x01:
		return has_modrm ? kind(grp7(modrm, rep, repne, opsize)) : kind(CLS_OTHER);
	case 0xae:
		return has_modrm ? kind(grp15(modrm, rep, repne, opsize)) : kind(CLS_OTHER);
	case 0xc7:		/* group 9, memory forms */
		if (!has_modrm || modrm >> 6 == 3 || rep || repne || opsize)
			return kind(CLS_OTHER);
		if (reg == 3)	/* XRSTORS */
			return kind(CLS_XRSTOR);
		if (reg == 4 || reg == 5)	/* XSAVEC, XSAVES */
			return kind(CLS_XSAVE);
		return kind(CLS_OTHER);
	case 0x38:		/* 66 0F 38 82: INVPCID */
		if (opsize && !rep && !repne && has_modrm && modrm == 0x82)
			return kind(CLS_INVPCID);
		return kind(CLS_OTHER);
	default:
		return kind(CLS_OTHER);
	}
}

/* The legacy prefixes and REX: how many bytes of D they take, and whether
 * F2 or F3 (REPNE, REP) was among them */
static size_t skip_prefixes(const uint8_t *d, size_t len, int *rep_prefix)
{
	size_t i = 0;

	*rep_prefix = 0;
	while (i < len && (d[i] == 0x66 || d[i] == 0x67 || d[i] == 0xf2 || d[i] == 0xf3 || d[i] == 0xf0 ||
			   d[i] == 0x2e || d[i] == 0x3e || d[i] == 0x26 || d[i] == 0x36 || d[i] == 0x64 ||
			   d[i] == 0x65 || (d[i] & 0xf0) == 0x40)) {
		if (d[i] == 0xf2 || d[i] == 0xf3)
			*rep_prefix = 1;
		i++;
	}
	return i;
}

/* INS, OUTS (6C-6F), MOVS, CMPS (A4-A7), STOS, LODS, SCAS (AA-AF) with a
 * REP, REPE or REPNE prefix: QEMU executes each iteration as one
 * instruction */
int insnclass_is_rep_string(const uint8_t *d, size_t len)
{
	int rep_prefix;
	size_t i = skip_prefixes(d, len, &rep_prefix);

	if (!rep_prefix || i >= len)
		return 0;
	return (d[i] >= 0x6c && d[i] <= 0x6f) || (d[i] >= 0xa4 && d[i] <= 0xa7) || (d[i] >= 0xaa && d[i] <= 0xaf);
}

/* HLT (F4) or MWAIT (0F 01 C9), after legacy prefixes: where the vCPU idles */
int insnclass_is_idle(const uint8_t *d, size_t len)
{
	int rep_prefix;
	size_t i = skip_prefixes(d, len, &rep_prefix);

	if (i < len && d[i] == 0xf4)
		return 1;
	return i + 2 < len && d[i] == 0x0f && d[i + 1] == 0x01 && d[i + 2] == 0xc9;
}

#ifndef INSNCLASS_DECODER_ONLY
#include "qemu-plugin-api.h"

QEMU_PLUGIN_EXPORT int qemu_plugin_version = QEMU_PLUGIN_VERSION;

#define MAX_MODES 8	/* distinct per-iteration vectors kept per region */

struct vcpu {
	uint64_t insns;			/* all instructions (per-TB callback mode) */
	uint64_t cls[NCLASSES];		/* classed instructions */
	int region;			/* the open region, -1 if none */
	uint64_t begin_insns, begin_cls[NCLASSES];
} __attribute__((aligned(64)));

struct mode {
	uint64_t n;
	uint32_t cls[NCLASSES];
};

struct region {
	uint64_t iterations, insns, insns_min, insns_max;
	uint64_t cls[NCLASSES];
	struct mode modes[MAX_MODES];
	int nmodes;
	uint64_t unmoded;		/* iterations whose vector found no free slot */
};

static struct vcpu *vcpus;
static unsigned int nvcpus;
static int use_inline;
static uint64_t inline_insns;		/* all instructions (inline mode: one vCPU) */
static struct region *regions[REGION_MAX];
static int selected = -1;		/* for "begin selected" markers (global) */
static uint64_t unbalanced, restarted, unselected;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *out_path;
static int machine_wide;		/* machine=on: regions count every vCPU */
static struct vcpu machine;		/* machine=on: the open region, under machine_lock */
static pthread_mutex_t machine_lock = PTHREAD_MUTEX_INITIALIZER;	/* taken before lock */

/* profile=on: a translated block, and its executions per region (newest
 * region first; a region that comes back gets a second entry, summed by
 * the reader) */
struct tb_slot {
	struct tb_slot *next;
	unsigned int region;
	uint64_t execs;
};

struct tb_prof {
	struct tb_prof *next;
	struct tb_slot *slots;
	size_t n;
	uint64_t vaddr[];
};

static int profile;			/* PROFILE_REGIONS or PROFILE_POINTS; 0: off */
#define PROFILE_REGIONS 1
#define PROFILE_POINTS 2
static struct tb_prof *profiled;	/* every translated block, under lock */

/* at=ADDR:...: points recorded at their first execution, in order */
#define MAX_POINTS 16

struct point {
	uint64_t vaddr;
	int seen;
	uint64_t insns, halts, reps, wall_ns;
};

static struct point points[MAX_POINTS];
static unsigned int npoints, next_point;
static int stop_at_last;		/* stop=last: end QEMU at the last point */
static uint64_t halts;			/* HLT and MWAIT executions */
static uint64_t reps;			/* REP string instructions' executions (iterations) */
static uint64_t wall_start_ns;		/* when the plugin was installed */

static struct vcpu *vcpu(unsigned int index)
{
	return &vcpus[index < nvcpus ? index : nvcpus - 1];
}

/* Instructions this vCPU has executed before the instruction whose callback
 * runs now, `left` instructions before its TB's end: the TB's count was
 * added when the TB began. */
static uint64_t insns_now(struct vcpu *v, uint64_t left)
{
	return (use_inline ? inline_insns : v->insns) - left;
}

static void on_tb(unsigned int index, void *n)
{
	vcpu(index)->insns += (uintptr_t)n;
}

static void on_classed(unsigned int index, void *cls)
{
	vcpu(index)->cls[(uintptr_t)cls]++;
}

/* profile=on (one vCPU, so no other thread touches the block's slots) */
static void on_tb_profiled(unsigned int index, void *udata)
{
	struct tb_prof *p = udata;
	int region = profile == PROFILE_POINTS ? (int)next_point : vcpu(index)->region;
	struct tb_slot *s;

	if (region < 0)
		return;
	s = p->slots;
	if (!s || s->region != (unsigned int)region) {
		s = calloc(1, sizeof(*s));
		if (!s)
			return;
		s->region = (unsigned int)region;
		s->next = p->slots;
		p->slots = s;
	}
	s->execs++;
}

static void add_iteration(unsigned int id, uint64_t insns, const uint64_t *cls)
{
	struct region *r = regions[id];
	uint32_t vec[NCLASSES];
	int m;

	if (!r) {
		r = calloc(1, sizeof(*r));
		if (!r)
			return;
		r->insns_min = UINT64_MAX;
		regions[id] = r;
	}
	r->iterations++;
	r->insns += insns;
	if (insns < r->insns_min)
		r->insns_min = insns;
	if (insns > r->insns_max)
		r->insns_max = insns;
	for (int c = 0; c < NCLASSES; c++) {
		r->cls[c] += cls[c];
		vec[c] = cls[c] > UINT32_MAX ? UINT32_MAX : (uint32_t)cls[c];
	}
	vec[CLS_OTHER] = 0;	/* "other" varies with every path: not part of the vector */
	for (m = 0; m < r->nmodes; m++)
		if (!memcmp(r->modes[m].cls, vec, sizeof(vec)))
			break;
	if (m == r->nmodes) {
		if (m == MAX_MODES) {
			r->unmoded++;
			return;
		}
		memcpy(r->modes[m].cls, vec, sizeof(vec));
		r->nmodes++;
	}
	r->modes[m].n++;
}

/* udata of a marker: enum marker | selected << 2 | id << 3 | instructions
 * left in its TB << 20 */
#define UD_LEFT_SHIFT 20

/* machine=on: every vCPU's instructions and classed instructions so far
 * (into CLS); LEFT: those left in the calling vCPU's block */
static uint64_t machine_now(uint64_t left, uint64_t *cls)
{
	uint64_t n = 0;

	memset(cls, 0, NCLASSES * sizeof(*cls));
	for (unsigned int i = 0; i < nvcpus; i++) {
		n += __atomic_load_n(&vcpus[i].insns, __ATOMIC_RELAXED);
		for (int c = 0; c < NCLASSES; c++)
			cls[c] += __atomic_load_n(&vcpus[i].cls[c], __ATOMIC_RELAXED);
	}
	return (use_inline ? inline_insns : n) - left;
}

/* A begin or end marker of region ID (U: its udata) for the region state
 * V, when NOW instructions and CLS classed ones have executed */
static void mark(struct vcpu *v, uintptr_t u, int id, uint64_t now, const uint64_t *cls)
{
	if ((u & 3) == MARK_BEGIN) {
		if (u & 4) {
			id = __atomic_load_n(&selected, __ATOMIC_RELAXED);
			if (id < 0) {
				__atomic_fetch_add(&unselected, 1, __ATOMIC_RELAXED);
				return;
			}
		}
		/* A begin while a region is open starts it afresh: the earlier
		 * begin had no end (a warm-up iteration, say). */
		if (v->region >= 0)
			__atomic_fetch_add(&restarted, 1, __ATOMIC_RELAXED);
		v->region = id;
		v->begin_insns = now;
		memcpy(v->begin_cls, cls, sizeof(v->begin_cls));
		return;
	}
	if (v->region < 0 || (!(u & 4) && v->region != id)) {
		__atomic_fetch_add(&unbalanced, 1, __ATOMIC_RELAXED);
		v->region = -1;
		return;
	}
	id = v->region;
	uint64_t d[NCLASSES];

	for (int c = 0; c < NCLASSES; c++)
		d[c] = cls[c] - v->begin_cls[c];
	/* "other" = all instructions but the classed ones */
	uint64_t all = now - v->begin_insns, classed = 0;

	for (int c = 0; c < CLS_OTHER; c++)
		classed += d[c];
	d[CLS_OTHER] = all > classed ? all - classed : 0;
	pthread_mutex_lock(&lock);
	add_iteration((unsigned int)id, all, d);
	pthread_mutex_unlock(&lock);
	v->region = -1;
}

static void on_marker(unsigned int index, void *udata)
{
	uintptr_t u = (uintptr_t)udata;
	int id = (int)(u >> 3 & (REGION_MAX - 1));
	struct vcpu *v = vcpu(index);

	if ((u & 3) == MARK_SELECT) {
		__atomic_store_n(&selected, id, __ATOMIC_RELAXED);
		return;
	}
	if (machine_wide) {
		uint64_t cls[NCLASSES], now;

		pthread_mutex_lock(&machine_lock);
		now = machine_now(u >> UD_LEFT_SHIFT, cls);
		mark(&machine, u, id, now, cls);
		pthread_mutex_unlock(&machine_lock);
		return;
	}
	mark(v, u, id, insns_now(v, u >> UD_LEFT_SHIFT), v->cls);
}

static uint64_t wall_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* udata of a point's instruction: point index | instructions left in its TB
 * << UD_LEFT_SHIFT (points need one vCPU: the order is global) */
static void write_report(qemu_plugin_id_t id, void *udata);

static void on_point(unsigned int index, void *udata)
{
	uintptr_t u = (uintptr_t)udata;
	unsigned int k = (unsigned int)(u & (MAX_POINTS - 1));
	struct point *p = &points[k];

	if (k != next_point || p->seen)
		return;		/* not armed yet (an earlier point has not run), or done */
	p->seen = 1;
	p->insns = insns_now(vcpu(index), u >> UD_LEFT_SHIFT);
	p->halts = halts;
	p->reps = reps;
	p->wall_ns = wall_now_ns() - wall_start_ns;
	next_point++;
	if (stop_at_last && next_point == npoints) {
		/* one vCPU (at= needs it): nothing else runs guest code now */
		write_report(0, NULL);
		_exit(0);
	}
}

static void on_halt(unsigned int index, void *udata)
{
	(void)index;
	(void)udata;
	__atomic_fetch_add(&halts, 1, __ATOMIC_RELAXED);
}

static void on_rep(unsigned int index, void *udata)
{
	(void)index;
	(void)udata;
	__atomic_fetch_add(&reps, 1, __ATOMIC_RELAXED);
}

static void watch_points(struct qemu_plugin_insn *insn, const uint8_t *data, size_t size, uint64_t left)
{
	uint64_t vaddr = qemu_plugin_insn_vaddr(insn);

	for (unsigned int k = 0; k < npoints; k++)
		if (points[k].vaddr == vaddr)
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_point, QEMU_PLUGIN_CB_NO_REGS,
							       (void *)(uintptr_t)(k | left << UD_LEFT_SHIFT));
	if (insnclass_is_idle(data, size))
		qemu_plugin_register_vcpu_insn_exec_cb(insn, on_halt, QEMU_PLUGIN_CB_NO_REGS, NULL);
	else if (insnclass_is_rep_string(data, size))
		qemu_plugin_register_vcpu_insn_exec_cb(insn, on_rep, QEMU_PLUGIN_CB_NO_REGS, NULL);
}

static void on_translate(qemu_plugin_id_t id, struct qemu_plugin_tb *tb)
{
	size_t n = qemu_plugin_tb_n_insns(tb);

	(void)id;
	if (use_inline)
		qemu_plugin_register_vcpu_tb_exec_inline(tb, QEMU_PLUGIN_INLINE_ADD_U64, &inline_insns, n);
	else
		qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb, QEMU_PLUGIN_CB_NO_REGS, (void *)(uintptr_t)n);
	if (profile) {
		struct tb_prof *p = calloc(1, sizeof(*p) + n * sizeof(p->vaddr[0]));

		if (p) {
			p->n = n;
			for (size_t i = 0; i < n; i++)
				p->vaddr[i] = qemu_plugin_insn_vaddr(qemu_plugin_tb_get_insn(tb, i));
			pthread_mutex_lock(&lock);
			p->next = profiled;
			profiled = p;
			pthread_mutex_unlock(&lock);
			qemu_plugin_register_vcpu_tb_exec_cb(tb, on_tb_profiled, QEMU_PLUGIN_CB_NO_REGS, p);
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct qemu_plugin_insn *insn = qemu_plugin_tb_get_insn(tb, i);
		struct insn_kind k = insnclass_decode(qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn));

		if (npoints)
			watch_points(insn, qemu_plugin_insn_data(insn), qemu_plugin_insn_size(insn), n - i);

		if (k.marker != MARK_NONE) {
			uintptr_t u = (uintptr_t)k.marker | (uintptr_t)!!k.selected << 2 | (uintptr_t)k.region << 3
				| (uintptr_t)(n - i) << UD_LEFT_SHIFT;

			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_marker, QEMU_PLUGIN_CB_NO_REGS, (void *)u);
		} else if (k.cls != CLS_OTHER) {
			qemu_plugin_register_vcpu_insn_exec_cb(insn, on_classed, QEMU_PLUGIN_CB_NO_REGS,
							       (void *)(uintptr_t)k.cls);
		}
	}
}

static void put_counts(FILE *f, const uint64_t *cls)
{
	int first = 1;

	fputc('{', f);
	for (int c = 0; c < NCLASSES; c++)
		if (cls[c]) {
			fprintf(f, "%s\"%s\": %llu", first ? "" : ", ", class_names[c], (unsigned long long)cls[c]);
			first = 0;
		}
	fputc('}', f);
}

/* "profile": [[region, executions, [instruction addresses]], ...] */
static void put_profile(FILE *f)
{
	int first = 1;

	fprintf(f, ",\n \"profile\": [");
	for (struct tb_prof *p = profiled; p; p = p->next)
		for (struct tb_slot *s = p->slots; s; s = s->next) {
			fprintf(f, "%s\n  [%u, %llu, [", first ? "" : ",", s->region, (unsigned long long)s->execs);
			for (size_t i = 0; i < p->n; i++)
				fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)p->vaddr[i]);
			fprintf(f, "]]");
			first = 0;
		}
	fprintf(f, "%s]", first ? "" : "\n ");
}

/* "halts": N, "reps": N, "points": [{"vaddr": A, "insns": N|null, "halts": N, "reps": N,
 * "wall_ns": N}, ...] */
static void put_points(FILE *f)
{
	fprintf(f, ",\n \"halts\": %llu, \"reps\": %llu, \"points\": [", (unsigned long long)halts,
		(unsigned long long)reps);
	for (unsigned int k = 0; k < npoints; k++) {
		struct point *p = &points[k];

		fprintf(f, "%s\n  {\"vaddr\": %llu, ", k ? "," : "", (unsigned long long)p->vaddr);
		if (p->seen)
			fprintf(f, "\"insns\": %llu, \"halts\": %llu, \"reps\": %llu, \"wall_ns\": %llu}",
				(unsigned long long)p->insns, (unsigned long long)p->halts,
				(unsigned long long)p->reps, (unsigned long long)p->wall_ns);
		else
			fprintf(f, "\"insns\": null, \"halts\": null, \"reps\": null, \"wall_ns\": null}");
	}
	fprintf(f, "%s]", npoints ? "\n " : "");
}

static void write_report(qemu_plugin_id_t id, void *udata)
{
	uint64_t total[NCLASSES] = { 0 }, outside[NCLASSES], insns = 0, in_regions = 0;
	char *tmp;
	FILE *f;
	int first = 1;

	(void)id;
	(void)udata;
	for (unsigned int v = 0; v < nvcpus; v++) {
		insns += vcpus[v].insns;
		for (int c = 0; c < NCLASSES; c++)
			total[c] += vcpus[v].cls[c];
	}
	if (use_inline)
		insns = inline_insns;
	uint64_t classed = 0;

	for (int c = 0; c < CLS_OTHER; c++)
		classed += total[c];
	total[CLS_OTHER] = insns > classed ? insns - classed : 0;
	memcpy(outside, total, sizeof(total));
	for (unsigned int r = 0; r < REGION_MAX; r++)
		if (regions[r]) {
			in_regions += regions[r]->insns;
			for (int c = 0; c < NCLASSES; c++)
				outside[c] -= outside[c] >= regions[r]->cls[c] ? regions[r]->cls[c] : outside[c];
		}
	if (asprintf(&tmp, "%s.partial", out_path) < 0)
		return;
	f = fopen(tmp, "w");
	if (!f) {
		fprintf(stderr, "insnclass: cannot write %s: %s\n", tmp, strerror(errno));
		free(tmp);
		return;
	}
	fprintf(f, "{\"plugin\": \"insnclass\", \"format\": 1, \"vcpus\": %u, \"inline\": %s,\n \"classes\": [",
		nvcpus, use_inline ? "true" : "false");
	for (int c = 0; c < NCLASSES; c++)
		fprintf(f, "%s\"%s\"", c ? ", " : "", class_names[c]);
	fprintf(f, "],\n \"unbalanced\": %llu, \"restarted\": %llu, \"unselected\": %llu,\n"
		" \"total\": {\"insns\": %llu, \"counts\": ", (unsigned long long)unbalanced,
		(unsigned long long)restarted, (unsigned long long)unselected, (unsigned long long)insns);
	put_counts(f, total);
	fprintf(f, "},\n \"outside\": {\"insns\": %llu, \"counts\": ",
		(unsigned long long)(insns > in_regions ? insns - in_regions : 0));
	put_counts(f, outside);
	fprintf(f, "},\n \"regions\": [");
	for (unsigned int r = 0; r < REGION_MAX; r++) {
		struct region *g = regions[r];
		int best = 0;

		if (!g)
			continue;
		for (int m = 1; m < g->nmodes; m++)
			if (g->modes[m].n > g->modes[best].n)
				best = m;
		fprintf(f, "%s\n  {\"id\": %u, \"iterations\": %llu, \"insns\": %llu, \"insns_min\": %llu, "
			"\"insns_max\": %llu, \"counts\": ", first ? "" : ",", r,
			(unsigned long long)g->iterations, (unsigned long long)g->insns,
			(unsigned long long)g->insns_min, (unsigned long long)g->insns_max);
		put_counts(f, g->cls);
		if (g->nmodes) {
			uint64_t vec[NCLASSES];

			for (int c = 0; c < NCLASSES; c++)
				vec[c] = g->modes[best].cls[c];
			fprintf(f, ", \"mode\": {\"iterations\": %llu, \"counts\": ",
				(unsigned long long)g->modes[best].n);
			put_counts(f, vec);
			fputc('}', f);
		}
		fprintf(f, ", \"distinct\": %d, \"unmoded\": %llu}", g->nmodes, (unsigned long long)g->unmoded);
		first = 0;
	}
	fprintf(f, "%s]", first ? "" : "\n ");
	if (npoints)
		put_points(f);
	if (profile)
		put_profile(f);
	fprintf(f, "}\n");
	if (fclose(f) != 0 || rename(tmp, out_path) != 0)
		fprintf(stderr, "insnclass: cannot write %s: %s\n", out_path, strerror(errno));
	free(tmp);
}

/* at=ADDR:ADDR:...: hexadecimal addresses, with or without 0x */
static int parse_points(const char *text)
{
	const char *p = text;

	while (*p) {
		char *end;
		unsigned long long v;

		if (npoints == MAX_POINTS) {
			fprintf(stderr, "insnclass: at= takes at most %d addresses\n", MAX_POINTS);
			return -1;
		}
		errno = 0;
		v = strtoull(p, &end, 16);
		if (end == p || errno || (*end && *end != ':')) {
			fprintf(stderr, "insnclass: at=%s: not hexadecimal addresses separated by ':'\n", text);
			return -1;
		}
		points[npoints++].vaddr = v;
		p = *end ? end + 1 : end;
	}
	if (!npoints) {
		fprintf(stderr, "insnclass: at= names no address\n");
		return -1;
	}
	return 0;
}

QEMU_PLUGIN_EXPORT int qemu_plugin_install(qemu_plugin_id_t id, const qemu_info_t *info, int argc,
					   char **argv)
{
	int inline_arg = -1;	/* -1: inline exactly when there is one vCPU */

	for (int i = 0; i < argc; i++) {
		if (!strncmp(argv[i], "out=", 4) && argv[i][4])
			out_path = argv[i] + 4;
		else if (!strcmp(argv[i], "inline=on"))
			inline_arg = 1;
		else if (!strcmp(argv[i], "inline=off"))
			inline_arg = 0;
		else if (!strcmp(argv[i], "profile=on"))
			profile = PROFILE_REGIONS;
		else if (!strcmp(argv[i], "profile=points"))
			profile = PROFILE_POINTS;
		else if (!strcmp(argv[i], "stop=last"))
			stop_at_last = 1;
		else if (!strcmp(argv[i], "machine=on"))
			machine_wide = 1;
		else if (!strncmp(argv[i], "at=", 3)) {
			if (parse_points(argv[i] + 3))
				return -1;
		} else {
			fprintf(stderr, "insnclass: unknown argument '%s' (out=PATH, inline=on|off, "
				"profile=on|points, at=ADDR:..., stop=last, machine=on)\n", argv[i]);
			return -1;
		}
	}
	if (!out_path) {
		fprintf(stderr, "insnclass: give the report's path: -plugin insnclass.so,out=PATH\n");
		return -1;
	}
	if (strcmp(info->target_name, "x86_64") != 0) {
		fprintf(stderr, "insnclass: decodes x86-64 only, not %s\n", info->target_name);
		return -1;
	}
	/* user mode has a vCPU per guest thread, system emulation max_vcpus */
	nvcpus = info->system_emulation && info->system.max_vcpus > 0 ? (unsigned int)info->system.max_vcpus : 64;
	if (npoints && nvcpus != 1) {
		fprintf(stderr, "insnclass: at= needs one vCPU (-smp 1), not %u\n", nvcpus);
		return -1;
	}
	if (stop_at_last && !npoints) {
		fprintf(stderr, "insnclass: stop=last needs at=ADDR:...\n");
		return -1;
	}
	if (profile == PROFILE_POINTS && !npoints) {
		fprintf(stderr, "insnclass: profile=points needs at=ADDR:...\n");
		return -1;
	}
	if (profile == PROFILE_REGIONS && machine_wide) {
		fprintf(stderr, "insnclass: profile=on counts a vCPU's regions, not machine=on's\n");
		return -1;
	}
	if (profile && nvcpus != 1) {
		fprintf(stderr, "insnclass: profile=%s needs one vCPU (-smp 1), not %u\n",
			profile == PROFILE_POINTS ? "points" : "on", nvcpus);
		return -1;
	}
	vcpus = calloc(nvcpus, sizeof(*vcpus));
	if (!vcpus)
		return -1;
	for (unsigned int v = 0; v < nvcpus; v++)
		vcpus[v].region = -1;
	machine.region = -1;
	use_inline = inline_arg >= 0 ? inline_arg
		: info->system_emulation && info->system.max_vcpus == 1;
	wall_start_ns = wall_now_ns();
	qemu_plugin_register_vcpu_tb_trans_cb(id, on_translate);
	qemu_plugin_register_atexit_cb(id, write_report, NULL);
	return 0;
}
#endif
