"""Initramfs images: the kernel's "newc" cpio format
(Documentation/driver-api/early-userspace/buffer-format.rst), written here
so that no root is needed for device nodes, nothing must be compiled for
it, and archives are reproducible (one fixed time, owner root)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

from ukltool.build import protocol
from ukltool.util.errors import UklError

EPOCH = 946684800  # 2000-01-01, for reproducible archives
MAGIC = b"070701"
TRAILER = "TRAILER!!!"
KINDS = {"dir": 0o040000, "file": 0o100000, "slink": 0o120000, "c": 0o020000, "b": 0o060000}


@dataclass(frozen=True)
class Entry:
    path: str           # absolute path in the image
    kind: str           # one of KINDS
    mode: int           # permission bits
    source: Path | None = None   # a file's content
    target: str = ""    # a symbolic link's target
    rdev: tuple[int, int] = (0, 0)  # a device node's major and minor


@dataclass
class Spec:
    """The entries of one archive, in order."""
    entries: list[Entry] = field(default_factory=list)

    def _add(self, entry: Entry) -> Spec:
        """Add ENTRY; one for a path already there replaces it in place."""
        parts = entry.path.split("/")
        if not entry.path.startswith("/") or "\0" in entry.path or entry.path == "/" or \
                any(p in ("", ".", "..") for p in parts[1:]):
            raise UklError(f"'{entry.path}' is not an absolute path for a file in the image",
                           "give paths such as /etc/app.conf")
        for i, old in enumerate(self.entries):
            if old.path == entry.path:
                self.entries[i] = entry
                return self
        self.entries.append(entry)
        return self

    def parents(self, path: str) -> Spec:
        """Directories for PATH's ancestors that the image lacks."""
        have = {e.path for e in self.entries}
        parts = path.split("/")[1:-1]
        for n in range(1, len(parts) + 1):
            d = "/" + "/".join(parts[:n])
            if d not in have:
                self.dir(d)
        return self

    def dir(self, path: str, mode: str = "0755") -> Spec:
        return self._add(Entry(path, "dir", int(mode, 8)))

    def nod(self, path: str, mode: str, kind: str, major: int, minor: int) -> Spec:
        return self._add(Entry(path, kind, int(mode, 8), rdev=(major, minor)))

    def file(self, path: str, src: Path, mode: str = "0755") -> Spec:
        return self._add(Entry(path, "file", int(mode, 8), source=Path(src)))

    def slink(self, path: str, target: str) -> Spec:
        return self._add(Entry(path, "slink", 0o777, target=target))


def _pad(out: BinaryIO, n: int) -> None:
    out.write(b"\0" * (-n % 4))


def _record(out: BinaryIO, offset: int, ino: int, mode: int, nlink: int, name: str, data: bytes,
            rdev: tuple[int, int] = (0, 0)) -> int:
    """One header, name and content; returns the new offset."""
    raw = name.encode() + b"\0"
    fields = [ino, mode, 0, 0, nlink, EPOCH, len(data), 0, 0, rdev[0], rdev[1], len(raw), 0]
    head = MAGIC + b"".join(b"%08X" % f for f in fields)
    out.write(head + raw)
    offset += len(head) + len(raw)
    _pad(out, offset)
    offset += -offset % 4
    out.write(data)
    offset += len(data)
    _pad(out, offset)
    return offset + -offset % 4


def write_to(spec: Spec, out: BinaryIO) -> None:
    offset = 0
    for ino, e in enumerate(spec.entries, start=721):
        if e.kind == "file":
            assert e.source is not None
            try:
                data = e.source.read_bytes()
            except OSError as err:
                raise UklError(f"cannot read {e.source} for {e.path} in the image: {err.strerror}") from None
        else:
            data = e.target.encode()
        offset = _record(out, offset, ino, KINDS[e.kind] | e.mode, 2 if e.kind == "dir" else 1,
                         e.path.lstrip("/"), data, e.rdev)
    _record(out, offset, 0, 0, 1, TRAILER, b"")


def write(spec: Spec, out: Path) -> None:
    """Write SPEC to OUT, or leave nothing behind."""
    tmp = out.with_name(out.name + ".partial")
    try:
        with open(tmp, "wb") as fh:
            write_to(spec, fh)
        tmp.replace(out)
    finally:
        tmp.unlink(missing_ok=True)


def read_member(archive: bytes, name: str) -> bytes | None:
    """The content of NAME (no leading /) in a newc ARCHIVE; None if absent."""
    pos = 0
    while pos + 110 <= len(archive) and archive[pos:pos + 6] == MAGIC:
        fields = [int(archive[pos + 6 + 8 * i: pos + 14 + 8 * i], 16) for i in range(13)]
        size, namesize = fields[6], fields[11]
        start = pos + 110
        entry = archive[start:start + namesize - 1].decode(errors="replace")
        data_at = start + namesize + (-(110 + namesize) % 4)
        if entry == TRAILER:
            return None
        if entry == name:
            return archive[data_at:data_at + size]
        pos = data_at + size + (-size % 4)
    return None


def runtime_skeleton() -> Spec:
    """Directories and nodes our init expects."""
    s = Spec()
    for d in ("/dev", "/proc", "/sys", "/bin", "/etc", protocol.PROTOCOL_DIR, "/root"):
        s.dir(d)
    s.dir("/tmp", "1777")
    s.nod("/dev/console", "0600", "c", 5, 1)
    return s


def args_archive(args: list[str], workdir: Path, sh: str | None = None) -> Path:
    """A small archive carrying /etc/ukl/args (NUL-separated), appended at run
    time, and /etc/ukl/sh when a shell is to run instead (SH: its command
    line, empty for an interactive shell)."""
    data = workdir / "args"
    data.write_bytes(b"".join(a.encode() + b"\0" for a in args))
    out = workdir / "args.cpio"
    spec = Spec().file(protocol.ARGS_FILE, data, "0644")
    if sh is not None:
        if "\0" in sh:
            raise UklError("the shell command contains a NUL byte")
        shf = workdir / "sh"
        shf.write_text(sh)
        spec.file(protocol.SH_FILE, shf, "0644")
    write(spec, out)
    return out
