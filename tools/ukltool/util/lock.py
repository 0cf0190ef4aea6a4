"""Serializing builds that share a directory in the cache (two `ukl`
processes, or two threads of one, building the same configuration)."""

from __future__ import annotations

import fcntl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ukltool.util import ui
from ukltool.util.paths import cache_dir

# flock() locks belong to open files, so two threads of one process would
# not exclude each other through it alone.
_threads: dict[Path, threading.Lock] = {}
_guard = threading.Lock()


@contextmanager
def held(name: str, what: str) -> Iterator[None]:
    """Hold the lock NAME (~/.cache/ukl/locks/NAME, outside what a build
    may remove) for the block."""
    path = cache_dir() / "locks" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with _guard:
        tlock = _threads.setdefault(path, threading.Lock())
    with tlock, open(path, "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            ui.info(f"waiting for another ukl process to finish with {what}")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
