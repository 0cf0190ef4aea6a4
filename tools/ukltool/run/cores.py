"""Core dumps out of the guest (`ukl run --core DIR`).

The guest's init (guest/init.c, ukl_core=1) lets the application dump
core into protocol.CORE_DIR and, when it has exited, writes those files to
a raw virtio disk as records (guest/PROTOCOL.md). Here: the disk (a
sparse file as large as the guest's memory and a little more), QEMU's
arguments for it, and the records read back into DIR, each as a new file
(mode 0600: a core holds the process's memory), never over one that
exists."""

from __future__ import annotations

import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from ukltool.build import protocol
from ukltool.util.errors import UklError

HEADER = struct.Struct("<8sII Q")  # magic, name length, zero, size
SLACK = 64 << 20  # beyond the guest's memory: several cores of small processes
NAME_MAX = 255


@dataclass(frozen=True)
class Saved:
    path: Path
    size: int


def check_dest(dest: Path) -> None:
    """DEST is a directory, or can be one: refused before the VM starts."""
    if dest.exists() and not dest.is_dir():
        raise UklError(f"--core {dest}: exists and is not a directory",
                       "name a directory for the cores (it is made if it does not exist)")


def make_disk(path: Path, memory_bytes: int) -> Path:
    """A sparse file for the guest's cores: no core is larger than the memory."""
    with open(path, "wb") as f:
        f.truncate(memory_bytes + SLACK)
    return path


def qemu_args(disk: Path, machine: str) -> list[str]:
    dev = "virtio-blk-device" if machine == "microvm" else "virtio-blk-pci"
    return ["-drive", f"file={disk},if=none,format=raw,id=ukl-core",
            "-device", f"{dev},drive=ukl-core,serial={protocol.CORE_DISK_SERIAL}"]


def kernel_args() -> list[str]:
    return [f"{protocol.CORE_PARAM}=1"]


def safe_name(name: bytes) -> str:
    """A file name for the host from the guest's (core.COMM.PID): COMM is
    the process's, which it chooses; only a plain name is kept."""
    text = re.sub(r"[^A-Za-z0-9._+-]", "_", name.decode("utf-8", "replace"))[:NAME_MAX]
    return text if text.strip(".") else "core"


def _new_file(dest: Path, name: str) -> tuple[int, Path]:
    """Create DEST/NAME, or NAME.1, NAME.2 ... where it exists: never open
    an existing file (O_EXCL, no symbolic link followed)."""
    for i in range(1000):
        path = dest / (name if i == 0 else f"{name}.{i}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600), path
        except FileExistsError:
            continue
    raise UklError(f"--core {dest}: a thousand files named {name}* exist already", "clean the directory")


def extract(disk: Path, dest: Path) -> tuple[list[Saved], bool]:
    """The cores on DISK, written into DEST; and whether the guest finished
    the disk (its end marker), which it does not when the VM was cut short."""
    saved: list[Saved] = []
    with open(disk, "rb") as f:
        while True:
            head = f.read(HEADER.size)
            if head[:8] == protocol.CORE_END:
                return saved, True
            if len(head) < HEADER.size or head[:8] != protocol.CORE_MAGIC:
                return saved, False
            _, name_len, _, size = HEADER.unpack(head)
            if name_len > 4096:  # not init's: a damaged disk
                return saved, False
            name = f.read(name_len)
            if len(name) != name_len:
                return saved, False
            dest.mkdir(parents=True, exist_ok=True)
            fd, path = _new_file(dest, safe_name(name))
            left = size
            with os.fdopen(fd, "wb") as out:
                while left:
                    chunk = f.read(min(left, 1 << 20))
                    if not chunk:
                        break
                    out.write(chunk)
                    left -= len(chunk)
            saved.append(Saved(path, size - left))
            if left:
                return saved, False
