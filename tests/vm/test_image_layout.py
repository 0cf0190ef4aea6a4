"""What the kernel image holds and what boot does with it, checked against
vmlinux itself: the ORC unwinder's fast lookup table, filled in one pass
(kernel patch 0002) and read back from the running guest through QEMU's gdb
stub, equals the binary searches it replaced; the 2 MiB padding after
the application's .bss is given back at boot (0046), and the kernel's
.bss no longer ends in a 2 MiB pad for memory that is never decrypted
(0045)."""

from __future__ import annotations

import bisect
import os
import re
import socket
import struct
import subprocess
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import REPO, UKL, assert_clean, build, ukl, ukl_bss_padding, vmlinux_symbols
from ukltool.bench.bootbench import symbol_address
from ukltool.build import image as image_mod

PAGE = 4096
LOOKUP_BLOCK = 256  # arch/x86/include/asm/orc_lookup.h


@pytest.fixture(scope="module")
def hello(outdir) -> Path:
    return build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "hello-layout")


def vmlinux_of(image: Path) -> Path:
    return image_mod.load(image).vmlinux_path()


def expected_orc_lookup(vmlinux: Path) -> tuple[int, int, list[int]]:
    """orc_lookup[]'s address and size, and its contents as the binary
    search of unwind_init() before 0044 filled it: per 256-byte block of
    text from _stext, and for _etext last, the index of the last entry of
    the sorted .orc_unwind_ip at or below that address, else 0."""
    with vmlinux.open("rb") as f:
        elf = ELFFile(f)
        sec = elf.get_section_by_name(".orc_unwind_ip")
        assert sec is not None, "vmlinux has no ORC table"
        data = sec.data()
        base = sec["sh_addr"]
    s = {n: symbol_address(vmlinux, n) for n in ("_stext", "_etext", "orc_lookup", "orc_lookup_end")}
    rel = struct.unpack(f"<{len(data) // 4}i", data)
    ips = [base + 4 * i + r for i, r in enumerate(rel)]
    assert ips == sorted(ips), "the ORC table is not sorted in vmlinux"
    nblocks = (s["orc_lookup_end"] - s["orc_lookup"]) // 4
    starts = [s["_stext"] + LOOKUP_BLOCK * i for i in range(nblocks - 1)] + [s["_etext"]]
    table = [max(bisect.bisect_right(ips, ip) - 1, 0) for ip in starts]
    return s["orc_lookup"], nblocks * 4, table


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_orc_lookup_table_is_what_the_binary_searches_found(hello, tmp_path):
    vmlinux = vmlinux_of(hello)
    addr, size, expected = expected_orc_lookup(vmlinux)
    stop_at = symbol_address(vmlinux, "kernel_init")  # after unwind_init()
    port = free_port()
    env = dict(os.environ, UKL_QEMU_ARGS=f"-gdb tcp:127.0.0.1:{port} -S")
    vm = subprocess.Popen([str(UKL), "run", str(hello), "--timeout", "300"], env=env, stdin=subprocess.DEVNULL,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    dump = tmp_path / "orc_lookup.bin"
    try:
        gdb = subprocess.run(
            ["gdb", "-nx", "-batch", "-ex", "set architecture i386:x86-64",
             "-ex", f"target remote 127.0.0.1:{port}", "-ex", f"hbreak *{stop_at:#x}", "-ex", "continue",
             "-ex", f"dump binary memory {dump} {addr:#x} {addr + size:#x}", "-ex", "kill"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300, stdin=subprocess.DEVNULL)
    finally:
        vm.kill()
        vm.communicate()
    assert dump.exists(), gdb.stdout
    got = list(struct.unpack(f"<{size // 4}I", dump.read_bytes()))
    assert len(expected) > 1000 and len(set(expected)) > 1000, "too small a table to tell anything"
    wrong = [i for i, (g, e) in enumerate(zip(got, expected, strict=True)) if g != e]
    assert not wrong, f"{len(wrong)} of {len(expected)} blocks differ, first {wrong[0]}: " \
                      f"{got[wrong[0]]} != {expected[wrong[0]]}"


def test_the_padding_around_the_application_data_is_freed(hello):
    """ukl_init() frees the rest of the 2 MiB before the application's data
    (after its constants) and after its last page, and nothing else of the
    image; the kernel's .bss ends at the page after its last object. The
    kernel's own 2 MiB alignment gaps are freed before the initcalls
    (0004), not after them with the init memory."""
    res = ukl("run", hello, "--append", "ignore_loglevel", "--", "x")
    assert res.returncode == 0, res.stdout
    assert_clean(hello / "console.log")
    log = (hello / "console.log").read_text(errors="replace")
    s = vmlinux_symbols(hello, "__bss_stop", "__start_bss_decrypted", "__end_bss_decrypted", "__ukl_rodata_end",
                        "__ukl_data_start")
    pad = ukl_bss_padding(hello)
    before = s["__ukl_data_start"] - (s["__ukl_rodata_end"] + PAGE - 1) // PAGE * PAGE
    assert pad > 0 and before > 0, (pad, before)  # hello's constants and data are far smaller than 2 MiB
    freed = re.findall(r"Freeing unused kernel image \((UKL [^)]*)\) memory: (\d+)K", log)
    assert freed == [("UKL data padding", str(before // 1024)), ("UKL bss padding", str(pad // 1024))], freed
    order = [m.group(1) for m in re.finditer(r"Freeing unused kernel image \(([^)]*)\) memory", log)]
    assert order.index("text/rodata gap") < order.index("rodata/data gap") < order.index("initmem"), order
    assert s["__start_bss_decrypted"] == s["__end_bss_decrypted"]
    assert s["__bss_stop"] - s["__end_bss_decrypted"] < PAGE, "the kernel's .bss still ends in a 2 MiB pad"


def test_the_option_roms_are_found_as_before(outdir):
    """probe_roms() checksums each ROM a block at a time (0047). The option
    ROM QEMU puts at 0xc0000 for -kernel is taken for a video ROM, whose
    length the kernel trusts only if its checksum holds: else the resource
    keeps its default 32 KiB."""
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "hello-layout-sh", "--userspace")
    res = ukl("run", out, "--timeout", "240", "--sh", "grep ROM /proc/iomem; exit 3")
    assert res.returncode == 3, res.stdout
    roms = {k: (int(a, 16), int(b, 16)) for a, b, k in
            re.findall(r"^\s*([0-9a-f]+)-([0-9a-f]+) : (\w+ ROM)\s*$", res.stdout, re.M)}
    assert roms.get("System ROM") == (0xf0000, 0xfffff), res.stdout
    start, end = roms["Video ROM"]
    length = end + 1 - start
    assert start == 0xc0000 and length % 512 == 0 and 0 < length < 0x8000, res.stdout
    assert_clean(out / "console.log")
