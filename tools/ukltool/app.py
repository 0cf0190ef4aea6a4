"""Compiling the application for a configuration."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from ukltool.errors import UklError
from ukltool.paths import GUEST_DIR, cache_dir
from ukltool.proc import need_tool, run

CFLAGS = ["-O2", "-g", "-Wall"]


def check_sources(sources: list[Path]) -> list[Path]:
    out = []
    for s in sources:
        if not s.exists():
            raise UklError(f"source file {s} does not exist", "name one or more C files")
        if s.is_dir():
            raise UklError(f"{s} is a directory; directories with a Makefile are not supported yet",
                           "name the C files instead")
        if s.suffix != ".c":
            raise UklError(f"{s} is not a C file (.c)", "name one or more C files")
        out.append(s.resolve())
    if not out:
        raise UklError("no source files given", "usage: ukl build SOURCE.c... [--config NAME]")
    return out


def default_name(sources: list[Path]) -> str:
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", sources[0].stem)
    return name or "app"


def build_static(sources: list[Path], out: Path, extra: list[str] | None = None) -> None:
    """An ordinary static binary against the host's glibc (the `linux` baseline)."""
    cc = need_tool("gcc", "gcc")
    run([cc, *CFLAGS, "-static", *(extra or []), "-o", out, *sources, "-lpthread"],
        what=f"compiling {', '.join(s.name for s in sources)}")


def init_binary() -> Path:
    """guest/init.c, compiled once per content."""
    src = GUEST_DIR / "init.c"
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:12]
    out = cache_dir() / "bin" / f"ukl-init-{digest}"
    if not out.is_file():
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".partial")
        build_static([src], tmp)
        tmp.rename(out)
    return out
