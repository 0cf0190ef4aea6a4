"""Building an application from a directory with a Makefile or a configure
script, with ukl-cc as the compiler (UKL_TARGET chooses ring 0 or an
ordinary process). The directory is copied first: the user's tree is never
written to."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ukltool import ui
from ukltool.errors import UklError
from ukltool.paths import REPO

UKL_CC = REPO / "ukl-cc"


def is_project(path: Path) -> bool:
    return path.is_dir()


def _run(cmd: list[str], cwd: Path, env: dict[str, str], log: Path, what: str) -> None:
    with open(log, "a") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        res = subprocess.run(cmd, cwd=cwd, env=env, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if res.returncode:
        tail = log.read_text(errors="replace").splitlines()[-25:]
        raise UklError(f"{what} failed (exit {res.returncode}); log: {log}\n  " + "\n  ".join(tail))


def build(src: Path, target: str, workdir: Path, program: str | None) -> Path:
    """Configure (if there is a configure script) and make SRC with CC=ukl-cc;
    return the program that was linked (PROGRAM names it when several were)."""
    if not (src / "Makefile").is_file() and not (src / "makefile").is_file() and not (src / "configure").is_file():
        raise UklError(f"{src} has neither a Makefile nor a configure script",
                       "name the C files instead, or add a Makefile that uses $(CC)")
    tree = workdir / "src"
    shutil.copytree(src, tree, symlinks=True)
    log = workdir / "build.log"
    programs = workdir / "programs"
    env = dict(os.environ, UKL_TARGET=target, UKL_CC_LOG=str(programs), CC=str(UKL_CC))
    with ui.step(f"building {src.name} with CC=ukl-cc ({target})"):
        if (tree / "configure").is_file() and not (tree / "Makefile").is_file():
            _run(["sh", "./configure", f"CC={UKL_CC}"], tree, env, log, f"configure of {src.name}")
        _run(["make", f"-j{os.cpu_count() or 2}", f"CC={UKL_CC}"], tree, env, log, f"make in {src.name}")
    linked = list(dict.fromkeys(programs.read_text().split())) if programs.is_file() else []
    linked = [p for p in linked if Path(p).is_file()]
    if program:
        chosen = [p for p in linked if Path(p).name == program]
        if not chosen:
            raise UklError(f"make did not link a program named '{program}'",
                           "programs linked: " + (", ".join(Path(p).name for p in linked) or "none"))
        return Path(chosen[-1])
    if len(linked) != 1:
        raise UklError(f"make linked {len(linked)} programs" + (": " + ", ".join(Path(p).name for p in linked)
                                                             if linked else ""),
                       "choose the application with --name PROGRAM")
    return Path(linked[0])
