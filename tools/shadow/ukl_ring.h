/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * The ring of UKL remote system calls: shared by a UKL kernel and the
 * shadow process on the host (Documentation/x86/ukl-remote.rst). It is the
 * 1 MiB BAR2 of an ivshmem-doorbell PCI device whose memory the host created;
 * the guest's RAM is shared with the shadow too, so data buffers are named
 * by guest-physical segments and never pass through the ring.
 */
#ifndef _UAPI_ASM_X86_UKL_RING_H
#define _UAPI_ASM_X86_UKL_RING_H

#include <linux/types.h>

#define UKL_RING_MAGIC		0x31474e49524c4b55ULL	/* "UKLRING1" */
#define UKL_RING_VERSION	3
#define UKL_RING_SIZE		(1U << 20)	/* the BAR: a power of two */
#define UKL_RING_SLOTS		64
#define UKL_SLOT_SIZE		8192
#define UKL_SLOT_SEGS		248
#define UKL_SLOT_INLINE		4096

/* A remote file descriptor is UKL_RFD_BASE + the shadow's index */
#define UKL_RFD_BASE		0x40000000
#define UKL_RFD_MAX		4096

/* ukl_slot.state: who owns the slot */
#define UKL_SLOT_FREE		0	/* the guest */
#define UKL_SLOT_REQ		1	/* the host: a request to answer */
#define UKL_SLOT_DONE		2	/* the guest: answered */

/* ukl_slot.op: an x86-64 system call number, or one of these */
#define UKL_ROP_NULL		0x1000	/* answered -ENOSYS at once */
#define UKL_ROP_HELLO		0x1001	/* a new client: close all remote fds */

/* ukl_slot.flags */
#define UKL_SLOT_IRQ		1	/* the guest sleeps: answer by interrupt */
#define UKL_SLOT_CONT		2	/* a later round trip: the slot's file */
#define UKL_SLOT_MORE		4	/* one may follow: hold the file */
#define UKL_SLOT_ERR		8	/* args[5]: the guest's -errno */

/* ukl_seg.gpa of a buffer the guest could not pin: the host's copy faults */
#define UKL_SEG_FAULT		(~0ULL)

/* ukl_ring_hdr.notify: how a thread waits until it chooses */
#define UKL_NOTIFY_POLL		0
#define UKL_NOTIFY_IRQ		1

/* The ring's first 4096 bytes, written by the host before QEMU starts */
struct ukl_ring_hdr {
	__u64 magic;			/* UKL_RING_MAGIC, stored last */
	__u32 version;
	__u32 nslots;
	__u32 slot_size;
	__u32 slot_segs;
	__u32 notify;			/* UKL_NOTIFY_* */
	__u32 host_pid;
	__u64 ram_size;			/* guest RAM the host maps */
	__u64 below_4g;			/* RAM below the PCI hole */
	__u64 heartbeat;		/* counted by the host's loop */
	__u32 host_asleep;		/* ring the doorbell to wake the host */
	__u32 host_peer;		/* the host's ivshmem peer ID */
};

/* guest-physical bytes [gpa, gpa + len) */
struct ukl_seg {
	__u64 gpa;
	__u64 len;
};

/* Slot i is at 4096 + i * UKL_SLOT_SIZE */
struct ukl_slot {
	__u32 state;			/* UKL_SLOT_* */
	__u32 seq;			/* the guest's, new per request */
	__u32 ack;			/* the seq the host answered */
	__u32 op;
	__u32 client;			/* the guest process (tgid) */
	__u32 nsegs;			/* seg[]: the data buffer */
	__u32 inline_len;		/* data[]: path in, struct stat out */
	__u32 flags;
	__s64 args[6];			/* fds are remote indexes */
	__s64 ret;			/* >= 0, or -errno */
	__u8 pad[40];
	struct ukl_seg seg[UKL_SLOT_SEGS];
	__u8 data[UKL_SLOT_INLINE];
};

#endif /* _UAPI_ASM_X86_UKL_RING_H */
