"""Project builds shared across checkouts (build/project.py): the compiler
drivers at a path of the cache, which run the checkout UKL_DRIVER_DIR
names; the compiler's key; the kernel compressions' names."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from ukltool.build import project
from ukltool.linux import kernel
from ukltool.util.errors import UklError


def fake_checkout(root: Path) -> Path:
    root.mkdir(parents=True)
    for name in ("ukl-cc", "ukl-c++"):
        (root / name).write_text(f'#!/bin/sh\necho "{name} from $0:" "$@"\n')
        (root / name).chmod(0o755)
    return root


def test_the_drivers_run_the_checkout_the_environment_names(tmp_path, monkeypatch):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path / "cache"))
    cc, cxx = project.drivers()
    assert cc.parent == cxx.parent == tmp_path / "cache" / "projects" / "drivers"
    assert project.drivers() == (cc, cxx) and os.access(cc, os.X_OK)
    # a checkout whose path has a space and a quote
    other = fake_checkout(tmp_path / "a b'c")
    env = dict(os.environ, UKL_DRIVER_DIR=str(other))
    res = subprocess.run([cc, "-c", "x y.c"], capture_output=True, text=True, env=env, check=False)
    assert res.returncode == 0 and res.stdout.strip() == f"ukl-cc from {other}/ukl-cc: -c x y.c", res
    res = subprocess.run([cxx, "-v"], capture_output=True, text=True, env=env, check=False)
    assert res.stdout.strip() == f"ukl-c++ from {other}/ukl-c++: -v"
    # no guess: unset, or a checkout that is gone, is a clear error
    env.pop("UKL_DRIVER_DIR")
    res = subprocess.run([cc], capture_output=True, text=True, env=env, check=False)
    assert res.returncode != 0 and "UKL_DRIVER_DIR" in res.stderr and "ukl build" in res.stderr
    res = subprocess.run([cc], capture_output=True, text=True, check=False,
                         env=dict(env, UKL_DRIVER_DIR=str(tmp_path / "gone")))
    assert res.returncode == 127 and "no ukl-cc in UKL_DRIVER_DIR" in res.stderr


def test_the_compiler_key_follows_what_the_compiler_makes(tmp_path, monkeypatch):
    monkeypatch.setattr(project, "REPO", tmp_path)
    files = []
    for rel in ("ukl-cc", "libc/syscall-as-call.s", "kernel/ukl-app.lds"):
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("one\n")
        files.append(f)
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "ukl.h").write_text("#define X 1\n")
    monkeypatch.setattr(project, "COMPILER_FILES", files)
    monkeypatch.setattr(project, "COMPILER_DIRS", [tmp_path / "runtime"])
    key = project.compiler_key("linux")
    assert project.compiler_key("linux") == key
    for changed in (files[1], files[2], tmp_path / "runtime" / "ukl.h"):
        before = changed.read_text()
        changed.write_text(before + "two\n")
        assert project.compiler_key("linux") != key, changed
        changed.write_text(before)
    monkeypatch.setenv("UKL_HOST_CC", "clang-none-such")
    with pytest.raises(UklError):
        project.compiler_key("linux")


def test_kernel_compressions_are_named_and_checked():
    assert kernel.compressions()[0] == "lz4" and set(kernel.compressions()) == {"lz4", "gzip", "zstd", "xz"}
    for bad in ("bogus", "../lz4", "LZ4", ""):
        with pytest.raises(UklError, match="unknown kernel compression") as e:
            kernel.compression_fragment(bad)
        assert "lz4, gzip" in (e.value.hint or "")
    for c in kernel.compressions():
        wanted = kernel.parse_fragment(kernel.compression_fragment(c).read_text())
        assert [s for s, v in wanted.items() if v == "y"] == [f"CONFIG_KERNEL_{c.upper()}"]
        assert set(wanted) == {f"CONFIG_KERNEL_{x.upper()}" for x in kernel.compressions()}


def test_kernel_optimizations_are_named_and_checked():
    assert kernel.optimizations() == ["size"]
    wanted = kernel.parse_fragment(kernel.optimize_fragment("size").read_text())
    assert wanted == {"CONFIG_CC_OPTIMIZE_FOR_PERFORMANCE": "n", "CONFIG_CC_OPTIMIZE_FOR_SIZE": "y"}
    for bad in ("Os", "../size", "performance", ""):
        with pytest.raises(UklError, match="unknown kernel optimization") as e:
            kernel.optimize_fragment(bad)
        assert "size" in (e.value.hint or "")
