"""Running host commands with readable failures."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

from ukltool.util.errors import UklError


def need_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise UklError(f"host tool '{name}' is missing",
                       f"install it with `apt-get install {package}` or run `make demo`")
    return path


def host_cc() -> str:
    """The host's C compiler: $UKL_HOST_CC, else gcc."""
    return os.environ.get("UKL_HOST_CC") or need_tool("gcc", "gcc")


def host_cxx() -> str:
    """The host's C++ compiler: $UKL_HOST_CXX, else g++."""
    return os.environ.get("UKL_HOST_CXX") or need_tool("g++", "g++")


def passthrough(cmd: Sequence[str | Path]) -> int:
    """Run a command with our standard streams; its exit status."""
    try:
        return subprocess.run([str(c) for c in cmd]).returncode
    except FileNotFoundError as e:
        raise UklError(f"cannot run {cmd[0]}: {e.strerror}", "run `make demo` to install host dependencies") from None


def capture(cmd: Sequence[str | Path], *, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """Run a command whose failure the caller judges: its status and text
    output (a missing program is still an error of ours)."""
    try:
        return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True,
                              errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError as e:
        raise UklError(f"cannot run {cmd[0]}: {e.strerror}", "run `make demo` to install host dependencies") from None


def git(tree: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """git in TREE; its output without surrounding white space."""
    return run(["git", "-C", tree, *args], what=f"git {args[0]} in {tree}", env=env).strip()


def run(cmd: Sequence[str | Path], *, cwd: Path | None = None, what: str | None = None,
        env: dict[str, str] | None = None, input: bytes | None = None) -> str:
    """Run a command, return stdout; on failure raise UklError with its output tail."""
    try:
        res = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, input=input,
                             capture_output=True)
    except FileNotFoundError as e:
        raise UklError(f"cannot run {cmd[0]}: {e.strerror}", "run `make demo` to install host dependencies") from None
    if res.returncode != 0:
        tail = (res.stdout + res.stderr).decode(errors="replace").strip().splitlines()[-25:]
        raise UklError(f"{what or ' '.join(map(str, cmd[:3]))} failed (exit {res.returncode}):\n  " + "\n  ".join(tail))
    return res.stdout.decode(errors="replace")


def stream(cmd: Sequence[str | Path], log: Path, on_line: Callable[[str], None], *,
           cwd: Path | None = None, what: str, hint: str | None = None, env: dict[str, str] | None = None,
           append: bool = False) -> None:
    """Run a long command, writing all output to `log` (after what it has,
    with APPEND) and feeding lines to on_line."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a" if append else "w") as fh:
        start = fh.tell()
        p = subprocess.Popen([str(c) for c in cmd], cwd=cwd, stdout=subprocess.PIPE, env=env,
                             stdin=subprocess.DEVNULL, stderr=subprocess.STDOUT, text=True, errors="replace")
        assert p.stdout is not None
        for line in p.stdout:
            fh.write(line)
            on_line(line.rstrip("\n"))
        rc = p.wait()
    if rc != 0:
        with open(log, errors="replace") as fh:
            fh.seek(start)
            lines = fh.read().splitlines()
        errs = [l for l in lines if "error" in l.lower() or "Error" in l][-15:] or lines[-25:]
        raise UklError(f"{what} failed (exit {rc}); full log: {log}\n  " + "\n  ".join(errs), hint)


def cached_host_build(out_dir: Path, stem: str, suffix: str, sources: Sequence[Path], flags: Sequence[str],
                      what: str, source_hint: str, cc_hint: str) -> Path:
    """Compile SOURCES[0] (the others are what it includes) with the host's
    C compiler and FLAGS into OUT_DIR/STEM-HASH+SUFFIX, once per version of
    the sources and flags; WHAT names it in errors."""
    h = hashlib.sha256(" ".join(flags).encode())
    for src in sources:
        try:
            h.update(src.name.encode() + b"\0" + src.read_bytes())
        except OSError as e:
            raise UklError(f"cannot read the source of {what}, {src}: {e.strerror}", source_hint) from None
    out = out_dir / f"{stem}-{h.hexdigest()[:16]}{suffix}"
    if out.is_file():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.{os.getpid()}.partial")
    cc = host_cc()
    res = capture([cc, *flags, "-o", tmp, sources[0]])
    if res.returncode != 0:
        tmp.unlink(missing_ok=True)
        tail = (res.stdout + res.stderr).strip().splitlines()[-20:]
        raise UklError(f"building {what} {sources[0]} with {cc} failed (exit {res.returncode}):\n  "
                       + "\n  ".join(tail), cc_hint)
    tmp.replace(out)
    return out
