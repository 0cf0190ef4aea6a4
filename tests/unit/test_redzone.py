"""The build-time refusal of red-zone code (no VM needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from ukltool.build import app, redzone
from ukltool.util.errors import UklError

LEAF = "int leaf(int a) { int v[8]; for (int i = 0; i < 8; i++) v[i] = a * i; return v[a & 7]; }\n"


def compile_(tmp_path: Path, *flags: str) -> Path:
    src = tmp_path / "leaf.c"
    src.write_text(LEAF)
    obj = tmp_path / "leaf.o"
    subprocess.run(["gcc", *flags, "-c", str(src), "-o", str(obj)], check=True)
    return obj


# A leaf whose inline SYSCALL becomes a call of the UKL entry in ring 0:
# with the red zone, the call's return address lands on its data.
SYSCALL_LEAF = ("long sys(long n) { volatile long v[4] = { n, 1, 2, 3 }; long r;\n"
                "  __asm__ volatile(\"syscall\" : \"=a\"(r) : \"a\"(v[0]) : \"rcx\", \"r11\", \"memory\");\n"
                "  return r + v[1] + v[2] + v[3]; }\n")


def compile_syscall_leaf(tmp_path: Path, *flags: str) -> Path:
    src = tmp_path / "sys.c"
    src.write_text(SYSCALL_LEAF)
    obj = tmp_path / "sys.o"
    subprocess.run(["gcc", *app.flags.ring0([]), *flags, "-c", str(src), "-o", str(obj)], check=True)
    return obj


@pytest.mark.parametrize("flags", [["-O2"], ["-O0"], ["-O2", "-g"]])
def test_red_zone_leaves_are_safe_in_ring_0(tmp_path, flags):
    """Nothing writes below a leaf's %rsp: interrupts arrive on an IST stack."""
    obj = compile_(tmp_path, *flags)
    dis = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True).stdout
    assert redzone.BELOW_RSP.search(dis) or redzone.BELOW_RBP.search(dis), "the test leaf should use the red zone"
    assert redzone.check_object(obj) == []


@pytest.mark.parametrize("flags", [["-O2"], ["-O0"]])
def test_red_zone_data_across_the_entry_call_is_found(tmp_path, flags):
    found = redzone.check_object(compile_syscall_leaf(tmp_path, *flags, "-mred-zone"))
    assert found and "sys keeps data below %rsp" in found[0] and "makes calls" in found[0]
    assert redzone.check_object(compile_syscall_leaf(tmp_path, *flags)) == []  # -mno-red-zone


def test_ukl_build_refuses_and_names_the_object(tmp_path):
    src = tmp_path / "leafy.c"
    src.write_text(SYSCALL_LEAF + "void _start(void) { for (;;) sys(1); }\n")
    with pytest.raises(UklError, match=r"(?s)red zone.*leafy\.o"):
        # -mred-zone after the UKL flags wins, as a careless library build would
        app.build_ukl_object([src], tmp_path / "app.o", tmp_path,
                             extra=["-mred-zone", f"-Wa,{app.flags.SYSCALL_MACRO}"])


def test_ukl_object_is_prefixed_and_needs_only_kernel_entry_points(tmp_path):
    src = tmp_path / "ok.c"
    src.write_text("static int n; void _start(void) { n++; __asm__ volatile(\"call ukl_entry_SYSCALL_64\"); }\n")
    out = tmp_path / "app.o"
    app.build_ukl_object([src], out, tmp_path)
    defined, undefined, _weak = app._symbols(out)
    assert "ukl__start" in defined and undefined == {"ukl_entry_SYSCALL_64"}
    bad = tmp_path / "bad.c"
    bad.write_text("int printf(const char *, ...); void _start(void) { printf(\"x\"); }\n")
    with pytest.raises(UklError, match="printf"):
        app.build_ukl_object([bad], tmp_path / "bad.o", tmp_path)


def test_lea_below_rsp_is_not_an_access():
    dis = ("0000000000000000 <f>:\n   0:\tlea    -0x8(%rsp),%rbp\n   5:\tpush   %rbx\n   6:\tcall   1 <x>\n"
           "   b:\tret\n"
           "0000000000000007 <g>:\n   7:\tmov    %rdi,-0x8(%rsp)\n   c:\tcall   1 <x>\n  11:\tret\n"
           "0000000000000012 <h>:\n  12:\tmov    %rdi,-0x8(%rsp)\n  17:\tret\n")
    assert redzone.code_offenders(dis) == ["g keeps data below %rsp and makes calls"]


def test_named_sections_get_start_and_stop_symbols(tmp_path):
    src = tmp_path / "impls.c"
    src.write_text('__attribute__((section("impls"), used)) static int a = 1;\n'
                   "extern int __start_impls[], __stop_impls[];\n"
                   "int count(void) { return __stop_impls - __start_impls; }\n")
    obj = tmp_path / "impls.o"
    subprocess.run(["gcc", "-O2", "-c", str(src), "-o", str(obj)], check=True)
    assert app.named_sections([obj]) == ["impls"]
    script = app.app_script([obj])
    assert "__start_impls = .;" in script and "KEEP(*(impls))" in script and "@NAMED_SECTIONS@" not in script


def test_a_check_that_cannot_run_fails(tmp_path, monkeypatch):
    """Not an object, or no working objdump: an error, never "no findings"."""
    junk = tmp_path / "junk.o"
    junk.write_text("not an object\n")
    with pytest.raises(UklError, match="junk.o is not an ELF object"):
        redzone.check_object(junk)
    obj = compile_(tmp_path, "-O2", "-mno-red-zone")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "objdump").write_text("#!/bin/sh\necho 'objdump: broken' >&2\nexit 1\n")
    (fake / "objdump").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:/usr/bin:/bin")
    with pytest.raises(UklError, match="objdump cannot read .*leaf.o.*objdump: broken"):
        redzone.check_object(obj)
