"""`ukl build DIR`: a project with a configure script and a Makefile, built
unmodified with CC=ukl-cc for both configurations, behaves the same; and
ukl-cc's refusals are clear errors."""

from __future__ import annotations

import subprocess

import pytest

from conftest import BASIC_CONFIGS, REPO, assert_clean, build, ukl

PROJECT = REPO / "examples" / "wordfreq"
WORDS = ["the", "cat", "and", "the", "hat", "and", "the", "bat"]


def app_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]


def test_configure_and_make_project_runs_the_same_in_both_rings(outdir):
    outs = {}
    for config in BASIC_CONFIGS:
        out = build(PROJECT, config, outdir / f"wordfreq-{config}")
        res = ukl("run", out, "--timeout", "90", "--", *WORDS)
        assert res.returncode == 0, res.stdout
        outs[config] = app_lines(res.stdout)
        assert_clean(out / "console.log")
    assert outs["base"] == outs["linux"]
    assert "  3 the" in outs["base"] and "configured: sys/epoll.h found" in outs["base"]
    assert not (PROJECT / "Makefile").exists(), "the user's tree must not be written to"


def ukl_cc(*args, cwd=None, env=None):
    import os
    return subprocess.run([str(REPO / "ukl-cc"), *args], capture_output=True, text=True, cwd=cwd,
                          env=dict(os.environ, **(env or {})))


def test_ukl_cc_output_runs_on_the_host_and_carries_the_image(tmp_path):
    src = tmp_path / "p.c"
    src.write_text('#include <stdio.h>\nint main(void) { printf("twin %d\\n", 42); return 3; }\n')
    res = ukl_cc("-O2", "-o", "p", "p.c", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    host = subprocess.run([str(tmp_path / "p")], capture_output=True, text=True)
    assert host.returncode == 3 and host.stdout == "twin 42\n"
    sections = subprocess.run(["readelf", "-S", str(tmp_path / "p")], capture_output=True, text=True).stdout
    assert ".ukl_app" in sections


def test_ukl_cc_refuses_what_cannot_be_linked_into_the_kernel(tmp_path):
    src = tmp_path / "p.c"
    src.write_text("int main(void) { return 0; }\n")
    res = ukl_cc("-shared", "-o", "libp.so", "p.c", cwd=tmp_path)
    assert res.returncode == 2 and "shared libraries cannot be linked" in res.stderr
    res = ukl_cc("-o", "p", "p.c", "-lnosuchlib", cwd=tmp_path)
    assert res.returncode != 0 and "-lnosuchlib not found" in res.stderr and "Traceback" not in res.stderr
    res = ukl_cc("-o", "p", "p.c", env={"UKL_TARGET": "mars"}, cwd=tmp_path)
    assert res.returncode == 2 and "unknown target 'mars'" in res.stderr
    assert not (tmp_path / "p").exists() and not (tmp_path / "libp.so").exists()


def test_directory_without_makefile_is_a_clear_error(tmp_path, outdir):
    (tmp_path / "x.c").write_text("int main(void) { return 0; }\n")
    res = ukl("build", tmp_path, "--config", "base", "-o", outdir / "nomake")
    assert res.returncode == 2 and "neither a Makefile nor a configure script" in res.stdout
    assert "Traceback" not in res.stdout


def test_ukl_cc_is_a_drop_in_gcc_for_real_build_steps(tmp_path):
    """Archives by path, -l after the objects that need it (autoconf's
    one-step conftest), the system's static libraries, -pipe, two-step
    builds, response files and gcc's queries (issue 12, item 1)."""
    (tmp_path / "main.c").write_text('#include <stdio.h>\n#include <zlib.h>\nint helper(int);\n'
                                     'int main(void) { printf("%d %s\\n", helper(2), zlibVersion()); return 0; }\n')
    (tmp_path / "lib.c").write_text("int helper(int x) { return x * 21; }\n")
    macros = subprocess.run(["gcc", "-E", "-dM", "-"], input="#include <zlib.h>\n", capture_output=True,
                            text=True).stdout
    want = next(line.split('"')[1] for line in macros.splitlines() if line.startswith("#define ZLIB_VERSION "))
    steps = [
        ["-pipe", "-O2", "-c", "lib.c", "-o", "lib.o"],
        ["-O2", "-c", "main.c"],
    ]
    for s in steps:
        res = ukl_cc(*s, cwd=tmp_path)
        assert res.returncode == 0, (s, res.stderr)
    assert subprocess.run(["ar", "rcs", "libhelp.a", "lib.o"], cwd=tmp_path).returncode == 0
    (tmp_path / "link.rsp").write_text("-o prog2 main.o -L. -lhelp -lz\n")
    links = {
        "prog1": ["-pipe", "-o", "prog1", "main.c", "./libhelp.a", "-lz"],   # one step, archive by path
        "prog2": ["@link.rsp"],                                             # two steps, response file
    }
    for name, args in links.items():
        res = ukl_cc(*args, cwd=tmp_path)
        assert res.returncode == 0, (name, res.stderr)
        host = subprocess.run([str(tmp_path / name)], capture_output=True, text=True)
        assert host.stdout == f"42 {want}\n", (name, host)
        sections = subprocess.run(["readelf", "-S", str(tmp_path / name)], capture_output=True, text=True).stdout
        assert ".ukl_app" in sections, name
    # autoconf's AC_CHECK_LIB: the library after the program that needs it
    (tmp_path / "conftest.c").write_text("char zlibVersion(void);\nint main(void) { return zlibVersion() == 0; }\n")
    res = ukl_cc("-o", "conftest", "-g", "-O2", "conftest.c", "-lz", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    for query in (["-dumpversion"], ["-print-file-name=libc.a"], ["--version"]):
        assert ukl_cc(*query).returncode == 0, query


@pytest.mark.parametrize("args,message", [
    (["-c", "x.f90"], "x.f90: 'f95' is not supported for UKL applications"),
    (["-o", "p", "p.c", "missing.o"], "missing.o: No such file or directory"),
    (["-o", "p", "p.c", "notanobject.o"], "notanobject.o: not an ELF object"),
    (["-o", "p", "p.c", "/usr/lib/x86_64-linux-gnu/libz.so"], "a shared library cannot be linked"),
    (["-o", "p"], "no input files"),
])
def test_ukl_cc_refusals_are_one_clear_line(tmp_path, args, message):
    (tmp_path / "p.c").write_text("int main(void) { return 0; }\n")
    (tmp_path / "x.f90").write_text("end\n")
    (tmp_path / "notanobject.o").write_text("not an object\n")
    res = ukl_cc(*args, cwd=tmp_path)
    assert res.returncode != 0 and message in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "p").exists()
