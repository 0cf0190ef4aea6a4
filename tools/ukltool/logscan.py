"""Recognising kernel failures in a console log."""

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


def failure_lines(log: str, context: int = 0) -> list[str]:
    """Lines (with `context` following lines) that show a kernel failure."""
    lines = log.splitlines()
    picked: list[str] = []
    seen: set[int] = set()
    for i, line in enumerate(lines):
        if FAILURE.search(line):
            for j in range(i, min(len(lines), i + 1 + context)):
                if j not in seen:
                    seen.add(j)
                    picked.append(lines[j])
    return picked
