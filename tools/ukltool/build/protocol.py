"""The protocol between the host tool and the guest's init (guest/init.c),
described in guest/PROTOCOL.md. The host side's one definition;
tests/unit/test_protocol.py checks that init.c uses the same values."""

from __future__ import annotations

import re

# Files the host puts in the initramfs for init to read
APP_PATH_FILE = "/etc/ukl/app"    # the program to start: /ukl/NAME or /bin/NAME
ARGS_FILE = "/etc/ukl/args"       # its arguments, each followed by a NUL (appended at run time)
SH_FILE = "/etc/ukl/sh"           # if present: run /bin/sh -c CONTENT instead (empty: interactive)
PROTOCOL_DIR = "/etc/ukl"

# What init writes
INIT_MARKER = "ukl-init: starting "       # on the console, before the program starts
STATUS_DEVICE = "/dev/ttyS1"              # the second serial port: QEMU's -serial file:STATUS
STATUS_LINE = re.compile(r"^status (\d+)$", re.M)   # "status N" on it, N = exit status or 128+signal
STATUS_NO_APP = 127                        # nothing to start (as a shell says for "not found")
DEBUG_EXIT_PORT = 0xf4                     # then init writes N here and QEMU exits
DEBUG_EXIT_DEVICE = f"isa-debug-exit,iobase={DEBUG_EXIT_PORT:#x},iosize=0x04"

# Core dumps (`ukl run --core DIR`): the kernel parameter CORE_PARAM=1
# has init raise RLIMIT_CORE for the application, point core_pattern into
# CORE_DIR and, when the application has exited, copy every file there to
# the virtio disk whose serial is CORE_DISK_SERIAL as records: CORE_MAGIC,
# the name's length (u32 LE), 4 zero bytes, the size (u64 LE), the name,
# the bytes; then CORE_END. The host (ukltool.run.cores) reads them back.
CORE_PARAM = "ukl_core"
CORE_DIR = "/ukl-core"
CORE_PATTERN = CORE_DIR + "/core.%e.%p"
CORE_DISK_SERIAL = "ukl-core"
CORE_MAGIC = b"UKLCORE1"
CORE_END = b"UKLCEND1"


# The application as PID 1 (`ukl run --pid1`, patch "x86/ukl: let the
# application run as init"): the kernel starts /ukl/NAME itself and, when it
# exits, prints this (a kernel warning: the console's log level must be 5 or
# more) and ends the machine.
# `ukl run` reads it from the status port (ttyS1), a console of the
# kernel's only: the application's output goes to /dev/console (ttyS0), so
# a line it prints cannot pass for the kernel's. With or without printk's
# time stamp. The kernel passes at most MAX_INIT_ARGS words to init.
KERNEL_STATUS_CONSOLE = "ttyS1"
INIT_EXIT_LINE = re.compile(r"^(?:\[\s*\d+\.\d+\] )?ukl: init exited: status (\d+)(?: \(signal \d+\))?\r?$", re.M)
MAX_INIT_ARGS = 32


def parse_init_exit(kernel_log: str) -> int | None:
    """The status the kernel printed for the application as PID 1, from
    the kernel's own console (the status port's text)."""
    found = INIT_EXIT_LINE.findall(kernel_log)
    return int(found[-1]) if found else None


def parse_status(text: str) -> int | None:
    """The application's status from the status channel (the last line)."""
    found = STATUS_LINE.findall(text)
    return int(found[-1]) if found else None
