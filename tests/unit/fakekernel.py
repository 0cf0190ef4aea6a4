"""Kernel-shaped files for unit tests: a minimal ELF file with notes, and a
bzImage whose payload is it (tools/ukltool/linux/bzimage.py reads them)."""

from __future__ import annotations

import gzip
import struct


def elf_with_notes(notes: bytes) -> bytes:
    """A minimal ELF64 file: one PT_NOTE segment holding NOTES."""
    ehsize, phsize = 64, 56
    off = ehsize + phsize
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x1000000, ehsize, 0, 0, ehsize, phsize, 1, 64, 0, 0)
    phdr = struct.pack("<IIQQQQQQ", 4, 4, off, 0, 0, len(notes), len(notes), 4)
    return header + phdr + notes


def note(name: bytes, ntype: int, desc: bytes) -> bytes:
    def pad(b: bytes) -> bytes:
        return b + bytes(-len(b) % 4)
    return struct.pack("<III", len(name) + 1, len(desc), ntype) + pad(name + b"\0") + pad(desc)


def fake_bzimage(payload: bytes, protocol: int = 0x20F, setup_sects: int = 1) -> bytes:
    """A bzImage-shaped file: setup sectors with the boot protocol header,
    then the protected-mode code with PAYLOAD at its start."""
    head = bytearray((setup_sects + 1) * 512)
    head[0x1F1] = setup_sects
    head[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", head, 0x206, protocol)
    struct.pack_into("<II", head, 0x248, 0, len(payload))
    return bytes(head) + payload


def pvh_bzimage(entry: int = 0x1000000) -> tuple[bytes, bytes]:
    """A bzImage with a PVH entry at ENTRY, and its uncompressed kernel."""
    elf = elf_with_notes(note(b"GNU", 3, bytes(20)) + note(b"Xen", 18, struct.pack("<I", entry)))
    return fake_bzimage(gzip.compress(elf, mtime=0)), elf
