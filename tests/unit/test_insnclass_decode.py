"""The plugin's instruction decoder (tools/qemu-plugin/insnclass.c), built alone
with the host compiler and called through ctypes on known encodings (as
GNU as assembles them), and the plugin's build in the cache."""

from __future__ import annotations

import ctypes
import subprocess

import pytest

from ukltool.plugin import insnclass
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO


class Kind(ctypes.Structure):
    _fields_ = [("cls", ctypes.c_int), ("marker", ctypes.c_int), ("selected", ctypes.c_int),
                ("region", ctypes.c_uint)]


NONE, BEGIN, END, SELECT = range(4)  # enum marker


@pytest.fixture(scope="module")
def decoder():
    lib = ctypes.CDLL(str(insnclass.build(decoder_only=True)))
    lib.insnclass_decode.restype = Kind
    lib.insnclass_decode.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
    lib.insnclass_name.restype = ctypes.c_char_p
    lib.insnclass_name.argtypes = [ctypes.c_int]

    def decode(hexbytes: str) -> tuple[str, int, int, int]:
        data = bytes.fromhex(hexbytes)
        k = lib.insnclass_decode(data, len(data))
        return lib.insnclass_name(k.cls).decode(), k.marker, k.selected, k.region
    return decode


CASES = {
    # system call entry and exit
    "0f 05": "syscall",                 # syscall
    "0f 07": "sysret",                  # sysretl
    "48 0f 07": "sysret",               # sysretq
    "cf": "iret",                       # iretl
    "48 cf": "iret",                    # iretq
    "66 cf": "iret",                    # iretw
    "48 66 cf": "iret",                 # a REX before a legacy prefix is ignored
    "0f 01 f8": "swapgs",
    "2e 0f 01 f8": "swapgs",            # a segment prefix changes nothing
    # MSRs and control registers
    "0f 30": "wrmsr",
    "0f 32": "rdmsr",
    "0f 22 d8": "mov_cr3",              # mov %rax,%cr3
    "0f 22 df": "mov_cr3",              # mov %rdi,%cr3
    "41 0f 22 d8": "mov_cr3",           # mov %r8,%cr3 (REX.B: the source)
    "0f 22 e0": "mov_cr4",              # mov %rax,%cr4
    "0f 22 c0": "mov_cr_other",         # mov %rax,%cr0
    "0f 22 d0": "mov_cr_other",         # mov %rax,%cr2
    "44 0f 22 c0": "other",             # mov %rax,%cr8 (REX.R): not serializing
    "0f 20 d8": "other",                # mov %cr3,%rax: a read
    "0f 06": "mov_cr_other",            # clts
    "0f 01 f0": "mov_cr_other",         # lmsw %ax
    "0f 01 e0": "other",                # smsw %eax
    # TLB and other serializing instructions
    "0f 01 3f": "invlpg",               # invlpg (%rdi)
    "0f 01 7c 24 08": "invlpg",         # invlpg 0x8(%rsp)
    "66 0f 38 82 07": "invpcid",        # invpcid (%rdi),%rax
    "0f 38 82 07": "other",             # no 66: not INVPCID
    "0f 09": "serializing",             # wbinvd
    "0f 08": "serializing",             # invd
    "0f 01 e8": "serializing",          # serialize
    "f3 0f 01 e8": "other",             # setssbsy
    "0f 01 17": "serializing",          # lgdt (%rdi)
    "0f 01 1f": "serializing",          # lidt (%rdi)
    "0f 01 07": "other",                # sgdt (%rdi)
    "0f 00 d0": "serializing",          # lldt %ax
    "0f 00 d8": "serializing",          # ltr %ax
    "0f 23 f8": "serializing",          # mov %rax,%db7
    "0f 21 f8": "other",                # mov %db7,%rax
    "0f 01 d1": "serializing",          # xsetbv
    "0f 01 d0": "other",                # xgetbv
    "0f aa": "serializing",             # rsm
    # fences and VERW
    "0f ae e8": "lfence",
    "0f ae f0": "mfence",
    "0f ae f8": "sfence",
    "f3 0f ae e8": "other",             # incsspd %eax
    "66 0f ae f0": "other",             # tpause %eax
    "0f 00 2c 24": "verw",              # verw (%rsp)
    "0f 00 2d 00 00 00 00": "verw",     # verw 0x0(%rip)
    "0f 00 e8": "verw",                 # verw %ax
    "0f 00 e0": "other",                # verr %ax
    # flags and interrupts
    "9d": "popf",                       # popfq
    "66 9d": "popf",                    # popfw
    "fa": "cli",
    "fb": "sti",
    "0f 01 ca": "stac_clac",            # clac
    "0f 01 cb": "stac_clac",            # stac
    # time stamp counter, CPUID
    "0f 31": "rdtsc",
    "0f 01 f9": "rdtscp",
    "0f a2": "cpuid",
    # extended state
    "0f ae 27": "xsave",                # xsave (%rdi)
    "48 0f ae 27": "xsave",             # xsave64 (%rdi)
    "0f ae 37": "xsave",                # xsaveopt (%rdi)
    "48 0f c7 27": "xsave",             # xsavec64 (%rdi)
    "48 0f c7 2f": "xsave",             # xsaves64 (%rdi)
    "0f ae 2f": "xrstor",               # xrstor (%rdi)
    "48 0f ae 2f": "xrstor",            # xrstor64 (%rdi)
    "48 0f c7 1f": "xrstor",            # xrstors64 (%rdi)
    "0f ae 07": "other",                # fxsave (%rdi)
    "0f ae 3f": "other",                # clflush (%rdi)
    "66 0f ae 37": "other",             # clwb (%rdi)
    "66 0f ae 3f": "other",             # clflushopt (%rdi)
    "f3 0f ae c0": "other",             # rdfsbase %eax
    "0f c7 0f": "other",                # cmpxchg8b (%rdi)
    "0f c7 f0": "other",                # rdrand %eax
    # ordinary instructions
    "90": "other",
    "48 89 e5": "other",                # mov %rsp,%rbp
    "c3": "other",
    "0f 0b": "other",                   # ud2
    "c5 f8 77": "other",                # vzeroupper (VEX)
    "65 48 8b 04 25 00 00 00 00": "other",  # mov %gs:0x0,%rax
    "0f 1f 80 00 00 00 00": "other",    # nopl 0x0(%rax): padding, not a marker
    "66 0f 1f 84 00 00 00 00 00": "other",
    "f3 0f 1e fa": "other",             # endbr64
    "0f": "other",                      # truncated
    "": "other",
}


@pytest.mark.parametrize("hexbytes,cls", CASES.items())
def test_classes(decoder, hexbytes, cls):
    assert decoder(hexbytes) == (cls, 0, 0, 0), hexbytes


def test_region_markers(decoder):
    assert decoder("0f 1f 80 05 00 4b 55") == ("other", BEGIN, 0, 5)     # begin region 5
    assert decoder("0f 1f 80 05 40 4b 55") == ("other", END, 0, 5)       # end region 5
    assert decoder("0f 1f 80 ff 3f 4b 55") == ("other", BEGIN, 0, 16383)
    assert decoder("0f 1f 80 2a 80 4b 55") == ("other", SELECT, 0, 42)   # select 42
    assert decoder("0f 1f 80 00 c0 4b 55") == ("other", BEGIN, 1, 0)     # begin the selected region
    assert decoder("0f 1f 80 01 c0 4b 55") == ("other", END, 1, 0)       # end the open region
    assert decoder("0f 1f 80 02 c0 4b 55") == ("other", NONE, 1, 0)      # reserved
    assert decoder("0f 1f 80 05 00 4b 56")[1] == NONE                    # another displacement
    assert decoder("66 0f 1f 80 05 00 4b 55")[1] == NONE                 # prefixed: not ours


def test_bench_region_h_emits_what_the_decoder_reads(tmp_path):
    """guest/bench/region.h's markers, assembled by the host compiler."""
    src = tmp_path / "m.c"
    src.write_text('#include "region.h"\n'
                   'void f(void) { REGION_BEGIN(7); REGION_END(7); region_select(3);\n'
                   '  __asm__ volatile(REGION_BEGIN_SELECTED REGION_END_OPEN); }\n')
    obj = tmp_path / "m.o"
    subprocess.run(["gcc", "-O2", "-c", "-I", str(REPO / "guest" / "bench"), "-o", str(obj), str(src)], check=True)
    text = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    for marker in ("0f 1f 80 07 00 4b 55", "0f 1f 80 07 40 4b 55", "0f 1f 80 00 c0 4b 55",
                   "0f 1f 80 01 c0 4b 55", "0f 1f 80 03 80 4b 55", "0f 1f 80 ff 81 4b 55"):
        assert marker in text, marker


def test_the_mpi_subset_marks_its_run_as_one_region(tmp_path, decoder):
    """guest/mpi/ukl-mpi.c writes region.h's markers out: MPI_Init's
    return begins region 1 and MPI_Finalize ends it, once each (what `ukl
    bench secrecy` counts)."""
    obj = tmp_path / "m.o"
    subprocess.run(["gcc", "-std=gnu11", "-O2", "-c", "-o", str(obj), str(REPO / "guest" / "mpi" / "ukl-mpi.c")],
                   check=True)
    text = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True, check=True).stdout
    found, func = [], ""
    for line in text.splitlines():
        if line.endswith(">:"):
            func = line.split("<")[1].rstrip(">:")
        elif "0f 1f 80" in line and "4b 55" in line:
            name, marker, _, region = decoder(line.split("\t")[1])
            found.append((func, marker, region))
    assert found == [("MPI_Init", BEGIN, 1), ("MPI_Finalize", END, 1)], found


def test_the_plugin_builds_once_per_source(tmp_path, monkeypatch):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path))
    so = insnclass.build()
    assert so.parent == tmp_path / "plugins" and so.name.startswith("insnclass-") and so.stat().st_size > 0
    assert insnclass.build() == so
    assert insnclass.option(so, tmp_path / "a,b.json") == f"file={so},out={tmp_path}/a,,b.json"


def test_a_failing_compiler_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path))
    monkeypatch.setenv("UKL_HOST_CC", "false")
    with pytest.raises(UklError, match="building the QEMU plugin .*insnclass.c with false failed"):
        insnclass.build()
    assert not list((tmp_path / "plugins").iterdir())


REP_CASES = {
    "f3 aa": True,            # rep stos %al,(%rdi)
    "f3 48 ab": True,         # rep stos %rax,(%rdi)
    "f3 a4": True,            # rep movsb
    "f3 48 a5": True,         # rep movsq
    "f3 a6": True,            # repz cmpsb
    "f2 ae": True,            # repnz scasb
    "f3 6c": True,            # rep insb
    "f3 6f": True,            # rep outsl
    "66 f3 ab": True,         # rep stosw (operand size before REP)
    "f3 ac": True,            # rep lodsb
    "aa": False,              # stos without REP: one execution
    "a4": False,
    "f3 90": False,           # pause
    "f3 c3": False,           # rep ret
    "f3 0f bc c0": False,     # tzcnt
    "f3 0f b8 c0": False,     # popcnt
    "f3 0f 1e fa": False,     # endbr64
    "f3 a8 01": False,        # test $1,%al (A8: not a string instruction)
    "f3 0f 6f c1": False,     # movdqu (F3, then the 0F escape)
    "c5 f9 6f c1": False,     # vmovdqa (VEX, not a prefix)
    "f3": False,              # prefixes alone
}


@pytest.fixture(scope="module")
def predicates():
    lib = ctypes.CDLL(str(insnclass.build(decoder_only=True)))
    for fn in (lib.insnclass_is_rep_string, lib.insnclass_is_idle):
        fn.restype = ctypes.c_int
        fn.argtypes = [ctypes.c_char_p, ctypes.c_size_t]

    def check(name: str, hexbytes: str) -> bool:
        data = bytes.fromhex(hexbytes)
        return bool(getattr(lib, name)(data, len(data)))
    return check


@pytest.mark.parametrize("hexbytes,rep", REP_CASES.items())
def test_rep_string_instructions_are_told_apart(predicates, hexbytes, rep):
    assert predicates("insnclass_is_rep_string", hexbytes) is rep


@pytest.mark.parametrize("hexbytes,idle", {"f4": True, "f3 f4": True, "0f 01 c9": True, "0f 01 c8": False,
                                           "f3 90": False, "90": False}.items())
def test_idle_instructions_are_hlt_and_mwait(predicates, hexbytes, idle):
    assert predicates("insnclass_is_idle", hexbytes) is idle
