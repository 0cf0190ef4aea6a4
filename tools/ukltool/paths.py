"""Where things live: the repository and the cache outside it."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
KERNEL_DIR = REPO / "kernel"
PATCH_DIR = KERNEL_DIR / "patches"
CONFIG_DIR = KERNEL_DIR / "configs"
GUEST_DIR = REPO / "guest"
LOCK_FILE = REPO / "sources.lock"


def cache_dir() -> Path:
    """$UKL_CACHE, default ~/.cache/ukl; created on first use."""
    env = os.environ.get("UKL_CACHE")
    base = Path(env) if env else Path.home() / ".cache" / "ukl"
    base.mkdir(parents=True, exist_ok=True)
    return base.resolve()
