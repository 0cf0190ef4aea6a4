"""The uncompressed kernel inside a bzImage, and its PVH entry.

A bzImage's payload is vmlinux itself (stripped, an ELF file), compressed
(LZ4 in our configurations, gzip in most distributions' kernels).
A VMM that boots through the x86/HVM direct boot ABI (PVH: QEMU's
`-kernel vmlinux`, Firecracker) loads that ELF file's segments and jumps to
the physical address in its XEN_ELFNOTE_PHYS32_ENTRY note, with no firmware
and no decompression. `ukl run --direct` and `ukl bench boot` take it from
the image's bzImage, so an image holds one kernel.
"""
from __future__ import annotations

import io
import struct
import subprocess
import zlib

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.segments import NoteSegment

from ukltool.util.errors import UklError
from ukltool.util.proc import need_tool

# The boot protocol's setup header (Documentation/x86/boot.rst)
SETUP_SECTS = 0x1F1
HEADER_MAGIC = 0x202
PAYLOAD_OFFSET = 0x248      # protocol 2.08+: from the protected-mode code's start
GZIP_MAGIC = b"\x1f\x8b"
LZ4_LEGACY_MAGIC = b"\x02\x21\x4c\x18"  # `lz4 -l`, as Kbuild compresses, then the size (4 bytes)
XEN_ELFNOTE_PHYS32_ENTRY = 18


# The payload's first bytes for each compression Kbuild offers
MAGICS = {"gzip": GZIP_MAGIC, "lz4": LZ4_LEGACY_MAGIC, "zstd": b"\x28\xb5\x2f\xfd", "xz": b"\xfd7zXZ",
          "lzma": b"\x5d\x00", "bzip2": b"BZh", "lzo": b"\x89LZO"}


def _payload_bytes(bzimage: bytes, source: str) -> bytes:
    if len(bzimage) < PAYLOAD_OFFSET + 8 or bzimage[HEADER_MAGIC:HEADER_MAGIC + 4] != b"HdrS":
        raise UklError(f"{source} is no bzImage (no Linux boot protocol header)", "rebuild the image")
    if struct.unpack_from("<H", bzimage, 0x206)[0] < 0x208:
        raise UklError(f"{source} is older than boot protocol 2.08 (no payload field)", "rebuild the image")
    setup_sects = bzimage[SETUP_SECTS] or 4
    offset, length = struct.unpack_from("<II", bzimage, PAYLOAD_OFFSET)
    start = (setup_sects + 1) * 512 + offset
    return bzimage[start:start + length]


def compression(bzimage: bytes, source: str = "bzImage") -> str:
    """How the kernel in BZIMAGE is compressed (a name of MAGICS), from the
    payload's first bytes."""
    data = _payload_bytes(bzimage, source)
    for name, magic in MAGICS.items():
        if data.startswith(magic):
            return name
    raise UklError(f"{source}'s payload is compressed in no format Linux offers (magic {data[:4].hex()})",
                   "rebuild the image")


def payload(bzimage: bytes, source: str = "bzImage") -> bytes:
    """The compressed payload's bytes, decompressed: the ELF vmlinux."""
    elf = _decompress(_payload_bytes(bzimage, source), source)
    if elf[:4] != b"\x7fELF":
        raise UklError(f"{source}'s payload is no ELF file", "rebuild the image")
    return elf


def _decompress(data: bytes, source: str) -> bytes:
    if data[:2] == GZIP_MAGIC:
        unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
        try:
            elf = unzip.decompress(data)
        except zlib.error as e:
            raise UklError(f"{source}'s payload does not decompress: {e}", "rebuild the image") from None
        if not unzip.eof:
            raise UklError(f"{source}'s payload does not decompress: it is cut short", "rebuild the image")
        return elf
    if data[:4] == LZ4_LEGACY_MAGIC:
        if len(data) < 12:
            raise UklError(f"{source}'s LZ4 payload is cut short ({len(data)} bytes)", "rebuild the image")
        size = struct.unpack("<I", data[-4:])[0]
        try:
            res = subprocess.run([need_tool("lz4", "lz4"), "-dc"], input=data[:-4], capture_output=True, check=False)
        except OSError as e:
            raise UklError(f"cannot run lz4 on {source}'s payload: {e}", "check the host's lz4") from None
        if res.returncode != 0 or len(res.stdout) != size:
            why = res.stderr.decode(errors="replace").strip() or f"{len(res.stdout)} bytes, not {size}"
            raise UklError(f"{source}'s payload does not decompress: {why}", "rebuild the image")
        return res.stdout
    raise UklError(f"{source}'s kernel is compressed with neither LZ4 nor gzip (magic {data[:4].hex()})",
                   "direct boot takes it out of the bzImage: build it with `ukl build --compression lz4` "
                   "(the configurations' own) or gzip")


def pvh_entry(elf: bytes) -> int | None:
    """The physical address of the PVH entry (the XEN_ELFNOTE_PHYS32_ENTRY
    note, which CONFIG_PVH adds); None without one."""
    try:
        f = ELFFile(io.BytesIO(elf))
        for seg in f.iter_segments():
            if not isinstance(seg, NoteSegment):
                continue
            for note in seg.iter_notes():
                if note["n_name"] == "Xen" and note["n_type"] == XEN_ELFNOTE_PHYS32_ENTRY:
                    desc = note["n_desc"]
                    raw = desc if isinstance(desc, bytes) else desc.encode("latin-1")
                    return int(struct.unpack_from("<I", raw)[0])
    except (ELFError, struct.error) as e:
        raise UklError(f"the kernel's ELF notes cannot be read: {e}", "rebuild the image") from None
    return None


def loaded_bytes(elf: bytes, source: str = "vmlinux") -> int:
    """The bytes a loader reads from an ELF file: its PT_LOAD segments'
    file sizes (vmlinux's 2 MiB-aligned segments leave holes in the file
    that no loader reads)."""
    try:
        return sum(seg["p_filesz"] for seg in ELFFile(io.BytesIO(elf)).iter_segments()
                   if seg["p_type"] == "PT_LOAD")
    except ELFError as e:
        raise UklError(f"cannot read {source}'s program headers: {e}", "rebuild the image") from None


def direct_kernel(bzimage: bytes, source: str = "bzImage") -> tuple[bytes, int]:
    """The ELF vmlinux a PVH loader boots, and its entry; a clear error for a
    kernel built without CONFIG_PVH."""
    elf = payload(bzimage, source)
    entry = pvh_entry(elf)
    if entry is None:
        raise UklError(f"{source}'s kernel has no PVH entry (it was built without CONFIG_PVH)",
                       "rebuild the image with this checkout (kernel/configs/vm-base.config has CONFIG_PVH)")
    return elf, entry
