"""The host's TSC frequency, measured: what a TCG guest's TSC runs at.

Under TCG without -icount QEMU gives the guest the host's TSC (RDTSC reads
the host's counter). /proc/cpuinfo's "cpu MHz" is not its rate: on a host
with frequency scaling it is the core's current speed, so a guest told
that (tsc_early_khz=) keeps time and sleeps too fast or too slow. Linux
does not export its own calibration. So measure: read the TSC against
CLOCK_MONOTONIC_RAW over a few short intervals and take the median. That
needs an invariant TSC (cpuinfo's constant_tsc and nonstop_tsc flags); without it, or where
the process may not run the few bytes of RDTSC it maps, there is no answer
and the guest calibrates the TSC itself. Each read of the TSC is bracketed by
two clock reads; one whose bracket is wide (the process was interrupted)
is not used."""

from __future__ import annotations

import ctypes
import mmap
import platform
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

# rdtsc; shl $32, %rdx; or %rdx, %rax; ret
_RDTSC = bytes.fromhex("0f31" "48c1e220" "4809d0" "c3")
INTERVAL_S = 0.01
SAMPLES = 5


def has_invariant_tsc(cpuinfo: str) -> bool:
    """An invariant TSC: a constant rate (constant_tsc) that does not stop
    in deep C-states (nonstop_tsc), as Linux needs to trust it."""
    m = re.search(r"^flags\s*:(.*)$", cpuinfo, re.M)
    return m is not None and {"constant_tsc", "nonstop_tsc"} <= set(m.group(1).split())


def _rdtsc() -> tuple[Callable[[], int], mmap.mmap] | None:
    """A function that returns the TSC, and the mapping it lives in (keep it)."""
    if platform.machine() != "x86_64":
        return None
    try:
        mem = mmap.mmap(-1, mmap.PAGESIZE, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    except (OSError, ValueError):
        return None  # no executable mappings here (a hardened host)
    mem.write(_RDTSC)
    addr = ctypes.addressof(ctypes.c_char.from_buffer(mem))
    return ctypes.CFUNCTYPE(ctypes.c_uint64)(addr), mem


def rate_khz(read: Callable[[], int], clock: Callable[[], int], sleep: Callable[[float], None],
             samples: int = SAMPLES, interval: float = INTERVAL_S) -> int | None:
    """The counter READ's rate in kHz against CLOCK (nanoseconds): the
    median of SAMPLES intervals."""
    rates = []
    widest = interval * 1e9 / 100  # a read that took longer was interrupted
    for _ in range(samples):
        t0, c0, w0 = _stamp(read, clock)
        sleep(interval)
        t1, c1, w1 = _stamp(read, clock)
        if t1 > t0 and c1 > c0 and max(w0, w1) <= widest:
            rates.append((c1 - c0) * 1_000_000 / (t1 - t0))
    return round(statistics.median(rates)) if rates else None


def _stamp(read: Callable[[], int], clock: Callable[[], int]) -> tuple[int, int, int]:
    """The counter, the clock at its read (the middle of two reads around
    it) and the time between those two."""
    before = clock()
    count = read()
    after = clock()
    return (before + after) // 2, count, after - before


_cached: list[int | None] = []


def host_tsc_khz() -> int | None:
    """The host's TSC frequency in kHz, measured once per process; None
    where it cannot be measured (see the module's text)."""
    if _cached:
        return _cached[0]
    khz = None
    try:
        invariant = has_invariant_tsc(Path("/proc/cpuinfo").read_text())
    except OSError:
        invariant = False
    got = _rdtsc() if invariant else None
    if got is not None:
        read, mem = got
        khz = rate_khz(read, lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW), time.sleep)
        del read
        mem.close()
    _cached.append(khz)
    return khz
