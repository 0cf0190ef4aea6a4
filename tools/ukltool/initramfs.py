"""Initramfs images in the kernel's own format, written by the kernel's
usr/gen_init_cpio (built once from the tree), so no root is needed for
device nodes and archives are reproducible."""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.errors import UklError
from ukltool.paths import cache_dir
from ukltool.proc import run

EPOCH = "946684800"  # 2000-01-01, for reproducible archives


def gen_init_cpio(tree: Path) -> Path:
    out = cache_dir() / "bin" / "gen_init_cpio"
    src = tree / "usr" / "gen_init_cpio.c"
    if not out.is_file() or out.stat().st_mtime < src.stat().st_mtime:
        out.parent.mkdir(parents=True, exist_ok=True)
        run(["cc", "-O2", "-o", out, src], what="compiling gen_init_cpio")
    return out


@dataclass
class Spec:
    """The entries of one archive (gen_init_cpio's spec language)."""
    lines: list[str] = field(default_factory=list)

    def dir(self, path: str, mode: str = "0755") -> "Spec":
        self.lines.append(f"dir {path} {mode} 0 0")
        return self

    def nod(self, path: str, mode: str, kind: str, major: int, minor: int) -> "Spec":
        self.lines.append(f"nod {path} {mode} 0 0 {kind} {major} {minor}")
        return self

    def file(self, path: str, src: Path, mode: str = "0755") -> "Spec":
        if any(c.isspace() for c in str(src)):
            raise UklError(f"path contains white space, which initramfs specs cannot carry: {src}")
        self.lines.append(f"file {path} {src} {mode} 0 0")
        return self

    def slink(self, path: str, target: str) -> "Spec":
        self.lines.append(f"slink {path} {target} 0777 0 0")
        return self


def write(tool: Path, spec: Spec, out: Path) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".spec") as sf:
        sf.write("\n".join(spec.lines) + "\n")
        sf.flush()
        with open(out, "wb") as fh:
            res = subprocess.run([str(tool), "-t", EPOCH, sf.name], stdout=fh, stderr=subprocess.PIPE)
    if res.returncode != 0:
        out.unlink(missing_ok=True)
        raise UklError(f"writing initramfs {out} failed: {res.stderr.decode(errors='replace').strip()}")


def runtime_skeleton() -> Spec:
    """Directories and nodes our init expects."""
    s = Spec()
    for d in ("/dev", "/proc", "/sys", "/bin", "/etc", "/etc/ukl", "/root"):
        s.dir(d)
    s.dir("/tmp", "1777")
    s.nod("/dev/console", "0600", "c", 5, 1)
    return s


def args_archive(tool: Path, args: list[str], workdir: Path, sh: str | None = None) -> Path:
    """A small archive carrying /etc/ukl/args (NUL-separated), appended at run
    time, and /etc/ukl/sh when a shell is to run instead (SH: its command
    line, empty for an interactive shell)."""
    data = workdir / "args"
    data.write_bytes(b"".join(a.encode() + b"\0" for a in args))
    out = workdir / "args.cpio"
    spec = Spec().file("/etc/ukl/args", data, "0644")
    if sh is not None:
        if "\0" in sh:
            raise UklError("the shell command contains a NUL byte")
        shf = workdir / "sh"
        shf.write_text(sh)
        spec.file("/etc/ukl/sh", shf, "0644")
    write(tool, spec, out)
    return out
