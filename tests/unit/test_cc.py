"""ukl-cc's command-line handling and the image checks (no VM needed)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ukltool.build import app, cc


def test_compile_flags_keep_pic_code_pic():
    assert "-mcmodel=kernel" in cc.compile_flags(["-O2"])
    for pic in ("-fPIC", "-fpic", "-fPIE", "-fpie"):
        assert "-mcmodel=kernel" not in cc.compile_flags([pic])
    for args in ([], ["-fPIC"]):
        f = cc.compile_flags(args)
        assert "-mno-red-zone" in f and "-mstack-protector-guard-reg=fs" in f and "-D__UKL__" in f


def test_syscall_instructions_become_calls(tmp_path: Path):
    src = tmp_path / "s.c"
    src.write_text('long f(long n) { long r; __asm__ volatile("syscall" : "=a"(r) : "a"(n) : "rcx", "r11", '
                   '"memory"); return r; }\n')
    obj = tmp_path / "s.o"
    subprocess.run(["gcc", "-O2", *cc.compile_flags([]), "-c", str(src), "-o", str(obj)], check=True)
    dis = subprocess.run(["objdump", "-dr", str(obj)], capture_output=True, text=True).stdout
    assert "ukl_entry_SYSCALL_64" in dis
    assert not app.raw_syscalls(dis)
    plain = tmp_path / "p.o"
    subprocess.run(["gcc", "-O2", "-c", str(src), "-o", str(plain)], check=True)
    dis = subprocess.run(["objdump", "-d", str(plain)], capture_output=True, text=True).stdout
    assert app.raw_syscalls(dis) == ["f: syscall"]


def test_int80_is_found_but_other_interrupts_are_not():
    dis = ("0000000000000000 <a>:\n   0:\tcd 80                \tint    $0x80\n"
           "0000000000000002 <b>:\n   2:\tcc                   \tint3\n")
    assert app.raw_syscalls(dis) == ["a: int    $0x80"]


def test_stack_protector_guard_is_read_from_fs(tmp_path: Path):
    src = tmp_path / "g.c"
    src.write_text("void g(char *s) { char b[64]; __builtin_strcpy(b, s); __asm__(\"\" :: \"r\"(b)); }\n")
    obj = tmp_path / "g.o"
    subprocess.run(["gcc", "-O2", "-fstack-protector-strong", *cc.compile_flags([]), "-c", str(src), "-o",
                    str(obj)], check=True)
    dis = subprocess.run(["objdump", "-d", str(obj)], capture_output=True, text=True).stdout
    assert "%fs:0x28" in dis and "%gs:" not in dis
