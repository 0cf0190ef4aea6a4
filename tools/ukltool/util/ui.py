"""Console output and progress for long steps (a live spinner on a terminal,
periodic heartbeat lines elsewhere, e.g. in CI logs)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console

__all__ = ["Console", "err", "info", "warn", "step", "report_console"]

err = Console(stderr=True, highlight=False, soft_wrap=True)


def report_console() -> Console:
    """Where result tables go: the terminal's width on a terminal; wide
    enough elsewhere (a pipe, a log, a test) that no cell is cut short."""
    return Console() if sys.stdout.isatty() else Console(width=320)


def info(msg: str) -> None:
    err.print(f"[bold cyan]ukl:[/] {msg}")


def warn(msg: str) -> None:
    err.print(f"[bold yellow]ukl: warning:[/] {msg}")


class Step:
    """A long step: call update() with short progress text as work advances."""

    def __init__(self, title: str, status) -> None:  # status: rich Status or None
        self.title = title
        self._status = status
        self._start = time.monotonic()
        self._last_beat = self._start
        self.count = 0

    def update(self, text: str) -> None:
        self.count += 1
        elapsed = time.monotonic() - self._start
        line = f"{self.title} [{elapsed:4.0f}s, {self.count}] {text}"
        if self._status is not None:
            self._status.update(line[: err.width - 4] if err.width else line)
        elif time.monotonic() - self._last_beat >= 30:
            self._last_beat = time.monotonic()
            print(f"ukl: {line}", file=sys.stderr, flush=True)

    @property
    def elapsed(self) -> float:
        return time.monotonic() - self._start


@contextmanager
def step(title: str) -> Iterator[Step]:
    info(f"{title} ...")
    if err.is_terminal:
        with err.status(title) as status:
            s = Step(title, status)
            yield s
    else:
        s = Step(title, None)
        yield s
    info(f"{title}: done in {s.elapsed:.0f}s")
