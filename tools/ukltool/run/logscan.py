"""Recognising kernel failures in a console log.

The console carries the application's output too, so only the kernel's
own messages count: `ukl run` boots with printk.time=1, and a kernel
message is what follows a "[  seconds.micros] " stamp (anywhere in a
line: a message may start after an application's unfinished line). An
application that prints "WARNING: ..." is not a kernel failure."""

from __future__ import annotations

import re

# What Linux prints when it panics, oopses, hits BUG() or WARN(), and what
# the debug configuration's checkers print (lockdep and KASAN reports start
# with WARNING: or BUG:; stalls and lockups do not).
FAILURE = re.compile(
    r"Kernel panic - not syncing|\bOops\b|\bBUG:|kernel BUG at|\bWARNING:|"
    r"general protection fault|Unable to handle kernel|double fault:|"
    r"\bstack segment:|Call Trace:|rcu: INFO:|soft lockup|hard LOCKUP|"
    r"INFO: task .* blocked|UBSAN:")

# Boot-time reports of a CPU's vulnerability state that Linux words as
# warnings but that report no fault of the kernel: the mitigated
# configurations' emulated Skylake has no SPEC_CTRL (TCG lacks it), so
# Retbleed cannot be mitigated there.
BENIGN = re.compile(
    r"^RETBleed: WARNING: Spectre v2 mitigation leaves CPU vulnerable to RETBleed attacks, "
    r"data leaks possible!$")

STAMP = re.compile(r"\[\s*\d+\.\d{6}\] ")


def is_failure(line: str) -> bool:
    """Does LINE hold a kernel message (text after a stamp) that reports a failure?"""
    return any(FAILURE.search(message) and not BENIGN.match(message.rstrip())
               for message in STAMP.split(line)[1:])


def failure_lines(log: str, context: int = 0) -> list[str]:
    """Lines (with `context` following lines) that show a kernel failure."""
    lines = log.splitlines()
    picked: list[str] = []
    seen: set[int] = set()
    for i, line in enumerate(lines):
        if is_failure(line):
            for j in range(i, min(len(lines), i + 1 + context)):
                if j not in seen:
                    seen.add(j)
                    picked.append(lines[j])
    return picked
