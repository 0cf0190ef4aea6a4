"""Where things live: the repository and the cache outside it."""

from __future__ import annotations

import os
from pathlib import Path

# The checkout: the package runs from it (`pip install -e .`) or is told
# where it is (UKL_REPO), since it builds from its patches and sources.
REPO = Path(os.environ.get("UKL_REPO") or Path(__file__).resolve().parents[3])
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


def repo_problem() -> str | None:
    """Why REPO is not a ukl checkout, if it is not."""
    if (REPO / "kernel" / "patches").is_dir() and (REPO / "guest").is_dir():
        return None
    return (f"{REPO} is not a ukl checkout (no kernel/patches): install ukltool with `pip install -e .` from a "
            "checkout, or set UKL_REPO to one")
