"""`ukl build DIR`: a project with a configure script and a Makefile, built
unmodified with CC=ukl-cc for both configurations, behaves the same; and
ukl-cc's refusals are clear errors."""

from __future__ import annotations

import subprocess

from conftest import REPO, assert_clean, build, ukl

PROJECT = REPO / "examples" / "wordfreq"
WORDS = ["the", "cat", "and", "the", "hat", "and", "the", "bat"]


def app_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]


def test_configure_and_make_project_runs_the_same_in_both_rings(outdir):
    outs = {}
    for config in ("linux", "base"):
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
