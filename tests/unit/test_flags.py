"""The ring-0 compile flags have one source (ukltool.build.flags): glibc's
compiler wrapper, a shell script, must add exactly the same ones."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ukltool.build import flags
from ukltool.util.paths import REPO

WRAPPER = REPO / "libc" / "ukl-gcc"


def wrapper_args(tmp_path: Path, args: list[str]) -> list[str]:
    fake = tmp_path / "fake-gcc"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    res = subprocess.run([str(WRAPPER), *args], capture_output=True, text=True,
                         env=dict(os.environ, UKL_HOST_CC=str(fake)), check=True)
    return res.stdout.splitlines()


@pytest.mark.parametrize("args", [
    ["-O2", "-c", "x.c", "-o", "x.o"],
    ["-O2", "-fPIC", "-c", "x.c", "-o", "x.os.o"],
    ["-fpie", "-c", "x.c", "-o", "x.o"],
    ["-E", "x.c", "-o", "x.o"],
])
def test_glibc_objects_get_the_flags_of_ukl_cc(tmp_path, args):
    assert wrapper_args(tmp_path, args) == [*flags.ring0(args), *args]


def test_other_glibc_compiles_are_ordinary_non_pie_code(tmp_path):
    got = wrapper_args(tmp_path, ["-o", "conftest", "conftest.c"])
    assert "-mcmodel=kernel" not in got and "-no-pie" in got and "-D__UKL__" not in got


def test_ukl_build_refuses_flags_that_undo_ring0():
    assert flags.refused(["-O3", "-fPIC", "-mcmodel=large", "-mred-zone", "-DX", "-o", "x"]) == [
        "-fPIC", "-mcmodel=large", "-mred-zone", "-o"]
