"""The remote-call ring's ABI: the Python mirror (ukltool.run.remote) against
the C header, compiled with the host's compiler; the header the kernel
patch adds against the shadow's copy; the guest-physical layout of QEMU's
pc machine; and memory sizes as `-m` reads them. No VM."""

from __future__ import annotations

import ctypes
import re
import subprocess

import pytest

from ukltool.run import remote
from ukltool.util.errors import UklError
from ukltool.util.paths import PATCH_DIR, REPO
from ukltool.util.proc import host_cc

HEADER = REPO / "tools" / "shadow" / "ukl_ring.h"
PATCHED = "arch/x86/include/uapi/asm/ukl_ring.h"

STRUCTS = {"ukl_ring_hdr": remote.RingHdr, "ukl_seg": remote.Seg, "ukl_slot": remote.Slot}
CONSTANTS = {
    "UKL_RING_MAGIC": remote.RING_MAGIC, "UKL_RING_VERSION": remote.RING_VERSION,
    "UKL_RING_SIZE": remote.RING_SIZE, "UKL_RING_SLOTS": remote.RING_SLOTS,
    "UKL_SLOT_SIZE": remote.SLOT_SIZE, "UKL_SLOT_SEGS": remote.SLOT_SEGS,
    "UKL_SLOT_INLINE": remote.SLOT_INLINE, "UKL_RFD_BASE": remote.RFD_BASE, "UKL_RFD_MAX": remote.RFD_MAX,
    "UKL_SLOT_FREE": remote.SLOT_FREE, "UKL_SLOT_REQ": remote.SLOT_REQ, "UKL_SLOT_DONE": remote.SLOT_DONE,
    "UKL_ROP_NULL": remote.ROP_NULL, "UKL_ROP_HELLO": remote.ROP_HELLO,
    "UKL_SLOT_IRQ": remote.SLOT_IRQ, "UKL_SLOT_CONT": remote.SLOT_CONT, "UKL_SLOT_MORE": remote.SLOT_MORE,
    "UKL_SLOT_ERR": remote.SLOT_ERR, "UKL_SEG_FAULT": remote.SEG_FAULT,
}


def c_layout(tmp_path) -> dict[str, int]:
    """NAME -> value, from a program printing sizeof, offsetof and the
    constants of ukl_ring.h as the host compiler sees them."""
    lines = ['#include <stddef.h>', '#include <stdio.h>', '#include "ukl_ring.h"', 'int main(void) {']
    for cname, struct in STRUCTS.items():
        lines.append(f'printf("sizeof.{cname} %zu\\n", sizeof(struct {cname}));')
        for field in struct._fields_:
            f = field[0]
            lines.append(f'printf("offsetof.{cname}.{f} %zu\\n", offsetof(struct {cname}, {f}));')
            lines.append(f'printf("sizeof.{cname}.{f} %zu\\n", sizeof(((struct {cname} *)0)->{f}));')
    for name in CONSTANTS:
        lines.append(f'printf("{name} %llu\\n", (unsigned long long)({name}));')
    lines.append("return 0; }")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    res = subprocess.run([host_cc(), "-std=gnu11", "-Wall", "-Werror", "-I", str(HEADER.parent), "-o", str(exe),
                          str(src)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {k: int(v) for k, v in (line.split() for line in out.splitlines())}


def test_ctypes_mirror_matches_the_c_layout(tmp_path):
    c = c_layout(tmp_path)
    for cname, struct in STRUCTS.items():
        assert ctypes.sizeof(struct) == c[f"sizeof.{cname}"], cname
        for field in struct._fields_:
            f = field[0]
            desc = getattr(struct, f)
            assert desc.offset == c[f"offsetof.{cname}.{f}"], f"{cname}.{f}"
            assert desc.size == c[f"sizeof.{cname}.{f}"], f"{cname}.{f}"
    for name, value in CONSTANTS.items():
        assert value == c[name], name
    # The geometry the header's comments promise
    assert ctypes.sizeof(remote.RingHdr) <= remote.HDR_SIZE
    assert ctypes.sizeof(remote.Slot) == remote.SLOT_SIZE
    assert remote.Slot.seg.offset == 128
    assert remote.slot_offset(remote.RING_SLOTS) <= remote.RING_SIZE


def test_kernel_patches_leave_the_same_header(tmp_path):
    """One patch adds the uapi header, later ones may change it: applied in
    order, they give exactly tools/shadow/ukl_ring.h."""
    patches = sorted(PATCH_DIR.glob("*.patch"))
    touching = [p for p in patches if f"diff --git a/{PATCHED} b/{PATCHED}" in p.read_text(errors="replace")]
    assert touching, f"no patch in {PATCH_DIR} adds {PATCHED}"
    first = touching[0].read_text(errors="replace")
    assert re.search(rf"^diff --git a/{re.escape(PATCHED)} b/{re.escape(PATCHED)}\nnew file mode", first, re.M), \
        f"{touching[0].name} changes {PATCHED} before any patch adds it"
    subprocess.run(["git", "apply", f"--include={PATCHED}", *map(str, touching)], cwd=tmp_path, check=True)
    assert (tmp_path / PATCHED).read_text() == HEADER.read_text(), \
        f"{PATCHED} after {', '.join(p.name for p in touching)} differs from {HEADER}"


GIB = 1 << 30


@pytest.mark.parametrize(("ram", "low"), [
    (GIB, GIB),
    (3 * GIB, 3 * GIB),
    (0xE0000000 - 8192, 0xE0000000 - 8192),  # all low, just below max-ram-below-4g
    (0xE0000000, 3 * GIB),                    # 3.5G: cut to 3G (gigabyte_align)
    (4 * GIB, 3 * GIB),
    (8 * GIB, 3 * GIB),
])
def test_below_4g_follows_qemu_pc(ram, low):
    assert remote.below_4g(ram) == low


@pytest.mark.parametrize(("text", "size"), [
    ("1G", GIB), ("512M", 512 << 20), ("3.5G", 0xE0000000), ("2g", 2 * GIB), ("1024", GIB),
    ("64K", 65536), ("1T", 1 << 40), ("100B", 8192),
])
def test_parse_memory(text, size):
    assert remote.parse_memory(text) == size


@pytest.mark.parametrize("text", ["", "G", "1X", "-1G", "0", "1.G", "1 G B"])
def test_parse_memory_refuses(text):
    with pytest.raises(UklError):
        remote.parse_memory(text)


def test_parse_stats():
    log = ("ukl-shadow: landlock: abi 7\nnoise calls=99\nukl-shadow: calls=12 zero-copy=4096 inline=146\n"
           "ukl-shadow: rss-anon-kb=520\n")
    assert remote.parse_stats(log) == {"calls": 12, "zero-copy": 4096, "inline": 146, "rss-anon-kb": 520}
