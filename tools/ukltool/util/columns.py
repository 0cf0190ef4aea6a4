"""Column headings of the benchmark tables: a first column, then per
configuration its value and, for all but the baseline, its ratio to the
baseline's."""

from __future__ import annotations

from collections.abc import Callable


def config_columns(first: str, configs: list[str], baseline: str, value: Callable[[str], str],
                   ratio: Callable[[str], str]) -> list[str]:
    head = [first]
    for c in configs:
        head.append(value(c))
        if c != baseline:
            head.append(ratio(c))
    return head
