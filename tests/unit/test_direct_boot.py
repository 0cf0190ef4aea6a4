"""Direct boot and the boot savings, without booting: the uncompressed
kernel taken out of a bzImage (its PVH note), and QEMU's command line for
-M microvm and for each saving."""

from __future__ import annotations

import gzip
import re
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest
from fakekernel import elf_with_notes, fake_bzimage, note

from ukltool.linux import bzimage, kernel, profiles
from ukltool.run import hosttsc, vm
from ukltool.util.errors import UklError


def test_the_pvh_entry_is_read_from_the_payload():
    elf = elf_with_notes(note(b"GNU", 3, bytes(20)) + note(b"Xen", 18, struct.pack("<I", 0x1A2B3C4)))
    out, entry = bzimage.direct_kernel(fake_bzimage(gzip.compress(elf, mtime=0)))
    assert out == elf and entry == 0x1A2B3C4


def lz4_payload(data: bytes) -> bytes:
    """As Kbuild's cmd_lz4_with_size: `lz4 -l -c9`, then the size."""
    out = subprocess.run(["lz4", "-l", "-c9"], input=data, capture_output=True, check=True).stdout
    return out + struct.pack("<I", len(data))


@pytest.mark.skipif(shutil.which("lz4") is None, reason="needs the host's lz4 (scripts/install-host-deps installs it)")
def test_an_lz4_payload_is_read_as_kbuild_writes_it():
    elf = elf_with_notes(note(b"Xen", 18, struct.pack("<I", 0x1000000))) + bytes(300000)
    out, entry = bzimage.direct_kernel(fake_bzimage(lz4_payload(elf)))
    assert out == elf and entry == 0x1000000
    with pytest.raises(UklError, match="does not decompress"):
        bzimage.payload(fake_bzimage(lz4_payload(elf)[:-1000]))
    with pytest.raises(UklError, match="LZ4 payload is cut short"):
        bzimage.payload(fake_bzimage(bzimage.LZ4_LEGACY_MAGIC + bytes(4)))


@pytest.mark.parametrize("name", ["gzip", "lz4", "zstd", "xz", "bzip2", "lzo", "lzma"])
def test_the_kernel_compression_is_read_from_the_payload(name):
    assert bzimage.compression(fake_bzimage(bzimage.MAGICS[name] + bytes(64))) == name


def test_an_unknown_compression_is_a_clear_error():
    with pytest.raises(UklError, match="no format Linux offers"):
        bzimage.compression(fake_bzimage(b"\x00\x01\x02\x03" + bytes(64)))


def test_a_kernel_without_pvh_is_refused_with_a_hint():
    elf = elf_with_notes(note(b"GNU", 3, bytes(20)))
    with pytest.raises(UklError) as e:
        bzimage.direct_kernel(fake_bzimage(gzip.compress(elf, mtime=0)), "out/x/bzImage")
    assert "no PVH entry" in str(e.value) and "out/x/bzImage" in str(e.value)


@pytest.mark.parametrize("data,what", [
    (b"not a kernel" * 100, "no bzImage"),
    (fake_bzimage(gzip.compress(b"x"), protocol=0x207), "older than boot protocol 2.08"),
    (fake_bzimage(b"\x28\xb5\x2f\xfd" + bytes(60)), "neither LZ4 nor gzip"),
    (fake_bzimage(b"\x1f\x8b\x08\x00garbage"), "does not decompress"),
    (fake_bzimage(gzip.compress(b"not an elf file")), "no ELF file"),
])
def test_bad_kernels_give_clear_errors(data, what):
    with pytest.raises(UklError) as e:
        bzimage.payload(data)
    assert what in str(e.value)


def spec(tmp_path, **kw) -> vm.RunSpec:
    return vm.RunSpec(bzimage=tmp_path / "bzImage", initrds=[], log=tmp_path / "log", **kw)


def append_of(cmd: list[str]) -> list[str]:
    return cmd[cmd.index("-append") + 1].split()


def test_savings_apply_where_they_help(tmp_path):
    # one TCG CPU on -M pc: both; two CPUs or KVM: the APIC timer stays
    assert {"no_timer_check", "noapictimer", "pmtmr=0"} <= set(
        append_of(vm.qemu_command("qemu", spec(tmp_path, smp=1), "tcg", tmp_path / "i", tmp_path / "s")))
    # microvm has no HPET to take the ticks from; without noapictimer the
    # APIC timer's calibration needs the PM timer
    for s, accel in ((spec(tmp_path, smp=2), "tcg"), (spec(tmp_path, smp=1), "kvm"),
                     (spec(tmp_path, smp=1, machine="microvm"), "tcg")):
        words = append_of(vm.qemu_command("qemu", s, accel, tmp_path / "i", tmp_path / "s"))
        assert "no_timer_check" in words and "noapictimer" not in words and "pmtmr=0" not in words
    # a measurement chooses them one by one, or none
    for chosen in ((), ("noapictimer",)):
        words = append_of(vm.qemu_command("qemu", spec(tmp_path, smp=1, savings=chosen), "tcg",
                                          tmp_path / "i", tmp_path / "s"))
        assert [w for w in words if w in vm.BOOT_SAVINGS] == list(chosen)
    with pytest.raises(UklError, match="unknown boot saving"):
        vm.qemu_command("qemu", spec(tmp_path, savings=("lpj=1",)), "tcg", tmp_path / "i", tmp_path / "s")


def test_microvm_has_the_status_port_and_mmio_network(tmp_path):
    cmd = vm.qemu_command("qemu", spec(tmp_path, machine="microvm", forwards=[(8080, 80)]), "tcg",
                          tmp_path / "i", tmp_path / "s", kernel_file=tmp_path / "vmlinux")
    assert cmd[cmd.index("-M") + 1] == "microvm" and cmd[cmd.index("-kernel") + 1] == str(tmp_path / "vmlinux")
    # ttyS1 (the status channel) at the second port; virtio-mmio, not PCI
    assert f"file,id=ukl-status,path={tmp_path / 's'}" in cmd
    assert "isa-serial,chardev=ukl-status,iobase=0x2f8,irq=3" in cmd
    assert "virtio-net-device,netdev=n0" in cmd and not any("-pci" in w for w in cmd)
    pc = vm.qemu_command("qemu", spec(tmp_path), "tcg", tmp_path / "i", tmp_path / "s")
    assert pc[pc.index("-M") + 1] == "pc" and f"file:{tmp_path / 's'}" in pc and "virtio-net-pci,netdev=n0" in pc


def test_machines_are_checked(tmp_path):
    with pytest.raises(UklError, match="unknown machine"):
        vm.qemu_command("qemu", spec(tmp_path, machine="q35"), "tcg", tmp_path / "i", tmp_path / "s")
    with pytest.raises(UklError, match="ivshmem"):
        vm.check_machine(spec(tmp_path, machine="microvm", remote=tmp_path))


def test_pid1_puts_the_application_and_its_arguments_last(tmp_path):
    cmd = vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/hello", pid1_args=["a", "b c", ""], icount=True),
                          "tcg", tmp_path / "i", tmp_path / "s")
    line = cmd[cmd.index("-append") + 1]
    assert line.endswith(' norandmaps rdinit=/ukl/hello -- a "b c" ""'), line
    with pytest.raises(UklError, match="double quote"):
        vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/x", pid1_args=['"']), "tcg", tmp_path / "i", tmp_path / "s")
    with pytest.raises(UklError, match="at most 31"):
        vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/x", pid1_args=["a"] * 32), "tcg", tmp_path / "i",
                        tmp_path / "s")


def test_the_kernels_init_exit_line_gives_the_status():
    from ukltool.build import protocol
    # the status port's text: the kernel's console only, with or without
    # printk's time stamps (printk.time=0)
    kernel = "[    0.503021] ukl: init exited: status 134 (signal 6)\r\n[    0.51] Restarting system.\r\n"
    assert protocol.parse_init_exit(kernel) == 134
    assert protocol.parse_init_exit("ukl: init exited: status 7\r\nreboot: Restarting system\r\n") == 7
    assert protocol.parse_init_exit("x ukl: init exited: status 9\r\n") is None
    assert protocol.parse_init_exit("") is None


def test_pid1_status_comes_from_a_console_the_application_does_not_write(tmp_path):
    """Issue 44: the status was parsed from the console the application
    writes, so a line it printed could pass for the kernel's."""
    words = append_of(vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/x"), "tcg", tmp_path / "i", tmp_path / "s"))
    # /dev/console, the application's, is ttyS0; the kernel also writes the
    # status port, through its early console kept after boot
    assert [w for w in words if w.startswith("console=")] == ["console=ttyS0"], words
    assert "earlyprintk=serial,ttyS1,115200,keep" in words
    words = append_of(vm.qemu_command("qemu", spec(tmp_path), "tcg", tmp_path / "i", tmp_path / "s"))
    assert not [w for w in words if w.startswith("earlyprintk=")]


def test_pid1_output_is_the_consoles_lines_that_are_not_the_kernels(capsysbinary):
    rest = vm._show_app_lines(b"[    0.1] Run /ukl/x\r\nHello\r\n[  12.345678] ukl: init exited: status 0\nparti",
                              flush=False)
    assert rest == b"parti" and capsysbinary.readouterr().out == b"Hello\n"
    assert vm._show_app_lines(b"al line", flush=True) == b""
    assert capsysbinary.readouterr().out == b"al line"


def test_pid1_arguments_the_kernel_would_cut_or_split(tmp_path):
    def line(*args: str, append: tuple[str, ...] = ()) -> str:
        cmd = vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/x", pid1_args=list(args), append=list(append)),
                              "tcg", tmp_path / "i", tmp_path / "s")
        return cmd[cmd.index("-append") + 1]
    # 0xa0 is a space to the kernel's Latin-1 ctype: "à" is C3 A0 in UTF-8
    assert line("à", "b\tc", "d").endswith('-- "à" "b\tc" d')
    for args, append, message in ((["--"], (), "second '--'"), (["x" * 3000], (), "longer than 2047 bytes"),
                                  (["a"], ("quiet",), "quiet would hide"), (["a"], ("loglevel=4",), "loglevel=4"),
                                  (["a"], ("earlyprintk=vga",), "the early console is the status channel")):
        with pytest.raises(UklError, match=message):
            line(*args, append=tuple(append))


def test_microvm_under_tcg_is_told_the_tsc_frequency(tmp_path, monkeypatch):
    """Issue 44: the guest was told cpuinfo's "cpu MHz", the current core
    speed on hosts with frequency scaling, for its TSC frequency. Now the
    TSC's rate is measured, whatever cpuinfo says of the core's speed."""
    real_read_text = Path.read_text
    cpuinfo = real_read_text(Path("/proc/cpuinfo"))
    scaled = re.sub(r"^cpu MHz\s*:.*$", "cpu MHz\t\t: 800.000", cpuinfo, flags=re.M)
    monkeypatch.setattr(Path, "read_text",
                        lambda self, *a, **k: scaled if str(self) == "/proc/cpuinfo" else real_read_text(self, *a, **k))
    words = append_of(vm.qemu_command("qemu", spec(tmp_path, machine="microvm"), "tcg", tmp_path / "i",
                                      tmp_path / "s"))
    told = [int(w.split("=")[1]) for w in words if w.startswith("tsc_early_khz=")]
    if hosttsc.has_invariant_tsc(cpuinfo):
        # the TSC against CLOCK_MONOTONIC_RAW over a longer interval, here
        read_mem = hosttsc._rdtsc()
        assert read_mem is not None
        rate = hosttsc.rate_khz(read_mem[0], lambda: time.clock_gettime_ns(time.CLOCK_MONOTONIC_RAW), time.sleep,
                                samples=3, interval=0.1)
        assert rate and len(told) == 1 and abs(told[0] - rate) < rate / 100, (told, rate)
    else:
        assert told == []
    # not under -icount (a 1 GHz TSC, calibrated exactly), not on -M pc, not under KVM
    for s, accel in ((spec(tmp_path, machine="microvm", icount=True), "tcg"), (spec(tmp_path), "tcg"),
                     (spec(tmp_path, machine="microvm"), "kvm")):
        assert not any(w.startswith("tsc_early_khz=") for w in append_of(
            vm.qemu_command("qemu", s, accel, tmp_path / "i", tmp_path / "s")))


def test_a_counter_s_rate_is_the_median_of_its_intervals():
    # 10 ms intervals at 2.5 GHz, two disturbed ones (a preempted read)
    # and three whose reads took a millisecond (interrupted: not used, or
    # the median would be 6.2 GHz)
    ghz = [2.5, 9.9, 2.5, 0.1, 2.5, 9.9, 9.9, 9.9]
    slow = {5, 6, 7}
    clock, counter, t, c = [], [], 0, 0
    for i, g in enumerate(ghz):
        # each counter read between two clock reads 100 ns (or 1 ms) apart
        width = 1_000_000 if i in slow else 100
        clock += [t - width // 2, t + width // 2, t + 10_000_000 - 50, t + 10_000_000 + 50]
        counter += [c, c + int(g * 10_000_000)]
        t, c = t + 20_000_000, c + 50_000_000
    ticks, counts = iter(clock), iter(counter)
    assert hosttsc.rate_khz(lambda: next(counts), lambda: next(ticks), lambda s: None, samples=8) == 2_500_000
    assert not hosttsc.has_invariant_tsc("flags\t\t: fpu tsc\n")
    assert not hosttsc.has_invariant_tsc("flags : a constant_tsc\n")  # may stop in deep C-states
    assert hosttsc.has_invariant_tsc("flags : a constant_tsc nonstop_tsc\n")


def test_no_initramfs_loads_the_kernel_alone_and_asks_it_for_the_file(tmp_path):
    cmd = vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/hello", pid1_args=["a"], initramfs=False), "tcg",
                          tmp_path / "i", tmp_path / "s")
    assert "-initrd" not in cmd
    line = cmd[cmd.index("-append") + 1]
    assert line.endswith(" ukl.init=/ukl/hello rdinit=/ukl/hello -- a"), line
    # with the initramfs, the file is there: the kernel is not asked
    cmd = vm.qemu_command("qemu", spec(tmp_path, pid1="/ukl/hello"), "tcg", tmp_path / "i", tmp_path / "s")
    assert "-initrd" in cmd and "ukl.init=" not in cmd[cmd.index("-append") + 1]
    with pytest.raises(UklError, match="no init program"):
        vm.qemu_command("qemu", spec(tmp_path, initramfs=False), "tcg", None, tmp_path / "s")


def test_loaded_bytes_count_the_load_segments_not_the_holes_between():
    ehsize, phsize = 64, 56
    ident = b"\x7fELF" + bytes([2, 1, 1]) + bytes(9)
    header = ident + struct.pack("<HHIQQQIHHHHHH", 2, 62, 1, 0x1000000, ehsize, 0, 0, ehsize, phsize, 3, 64, 0, 0)
    # two PT_LOAD segments 2 MiB apart in the file (filesz 100 and 50, the
    # second with 4000 bytes of bss), and a PT_NOTE inside the first
    phdrs = (struct.pack("<IIQQQQQQ", 1, 5, 0x200000, 0, 0x1000000, 100, 100, 0x200000)
             + struct.pack("<IIQQQQQQ", 1, 6, 0x400000, 0, 0x1200000, 50, 4050, 0x200000)
             + struct.pack("<IIQQQQQQ", 4, 4, 0x200010, 0, 0x1000010, 20, 20, 4))
    elf = header + phdrs + bytes(0x400000 + 50 - ehsize - 3 * phsize)
    assert bzimage.loaded_bytes(elf) == 150 < len(elf)
    with pytest.raises(UklError, match="cannot read x's program headers"):
        bzimage.loaded_bytes(b"\x7fELF" + bytes(10), "x")


def test_the_manifest_is_read_once_or_carried(tmp_path, monkeypatch):
    """The image's profile comes from the caller that read the manifest
    (`ukl run`, `ukl bench boot`) or is read once per boot."""
    (tmp_path / "manifest.json").write_text('{"config": "base+byp"}')
    reads = []
    real = profiles.image_config
    monkeypatch.setattr(profiles, "image_config", lambda d: reads.append(d) or real(d))
    cmd = vm.qemu_command("qemu", spec(tmp_path, smp=1), "tcg", tmp_path / "i", tmp_path / "s")
    assert "ukl.opts=byp" in append_of(cmd) and len(reads) == 1
    cmd = vm.qemu_command("qemu", spec(tmp_path, smp=1, config="base+ret"), "tcg", tmp_path / "i", tmp_path / "s")
    assert "ukl.opts=ret" in append_of(cmd) and len(reads) == 1
    assert cmd[cmd.index("-cpu") + 1] == kernel.profile_tcg_cpu("base+ret")
