"""What the benchmarks share (`ukl bench syscalls`, `app`, `boot`,
`remote`): the machine they ran on, the baseline the others are compared
with, and the note on -icount."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path

from ukltool.linux import kernel

BASELINE = "linux"
ICOUNT_NOTE = " with `-icount shift=0,sleep=off`, so one unit is one guest instruction and runs repeat exactly"


def machine() -> str:
    """The host, in words: its architecture, CPU model and count, and kernel."""
    model = "unknown CPU"
    try:
        m = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
        model = m.group(1) if m else model
    except OSError:
        pass
    return f"{platform.machine()}, {model}, {os.cpu_count()} host CPUs, host kernel {platform.release()}"


def baseline(configs: list[str]) -> list[str]:
    """The configurations to run, the baseline first: the first one without
    UKL (linux-mitigated for the mitigated ones), else linux added."""
    configs = list(dict.fromkeys(configs))
    stock = [c for c in configs if not kernel.is_ukl(c)]
    first = stock[0] if stock else BASELINE
    return [first, *(c for c in configs if c != first)]


def cpu_mismatch(configs: list[str]) -> str | None:
    """A warning where the baseline boots on another TCG CPU than some
    configuration compared with it (different mitigations run)."""
    base_cpu = kernel.tcg_cpu(configs[0])
    other = [c for c in configs[1:] if kernel.tcg_cpu(c) != base_cpu]
    if not other:
        return None
    return (f"{', '.join(other)} boot on another CPU than the baseline {configs[0]} under TCG "
            f"({kernel.tcg_cpu(other[0])} against {base_cpu}): Linux runs other mitigations there; "
            f"name a baseline on the same CPU first in --configs (e.g. linux-mitigated)")
