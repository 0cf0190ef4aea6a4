"""deploy/urunc/patches: our changes to urunc, applied by
scripts/install-urunc to the pinned source. Each applies to that source
with `git apply`, says who wrote it and why (a commit message and a
Signed-off-by, as urunc's maintainers take contributions), urunc's
packages it touches build and pass `go vet` with it, and the packages of
its own tests pass `go test`."""

from __future__ import annotations

import re
import shutil
import subprocess
import tarfile

import pytest

from conftest import REPO

PATCHES = sorted((REPO / "deploy" / "urunc" / "patches").glob("*.patch"))


def pinned() -> tuple[str, str]:
    script = (REPO / "scripts" / "install-urunc").read_text()
    commit = re.search(r"^COMMIT=(\w+)", script, re.M)
    digest = re.search(r"^TARBALL_SHA256=(\w+)", script, re.M)
    assert commit and digest
    return commit.group(1), digest.group(1)


def test_each_patch_is_a_contribution():
    assert PATCHES
    for p in PATCHES:
        text = p.read_text()
        assert re.search(r"^Subject: \[PATCH[^\]]*\] \w+: ", text, re.M), p.name
        assert "Signed-off-by: " in text and re.search(r"^\+\+\+ b/.*_test\.go$", text, re.M), p.name


def test_the_patches_apply_and_urunc_s_tests_pass(tmp_path):
    go = shutil.which("go") or "/usr/local/go/bin/go"
    commit, _ = pinned()
    tarball = REPO.parent / "shared" / "urunc" / f"urunc-{commit}.tar.xz"
    if not tarball.is_file() or not shutil.which("git") or not shutil.which(go):
        pytest.skip(f"needs {tarball}, git and Go (scripts/install-urunc says where they come from)")
    src = tmp_path / "urunc"
    with tarfile.open(tarball) as tf:
        tf.extractall(tmp_path, filter="data")
    (top,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    top.rename(src)
    touched, tested = set(), set()
    for p in PATCHES:
        subprocess.run(["git", "apply", p], cwd=src, check=True)
        files = re.findall(r"^\+\+\+ b/(\S+\.go)$", p.read_text(), re.M)
        touched |= {"./" + f.rsplit("/", 1)[0] for f in files}
        tested |= {"./" + f.rsplit("/", 1)[0] for f in files if f.endswith("_test.go")}
    # Every package a patch touches builds and passes vet; the packages
    # holding the patches' tests pass `go test`. (pkg/unikontainers's own
    # file tests expect permission errors that root does not get: they
    # fail as root without any patch.)
    res = subprocess.run([go, "vet", *sorted(touched)], cwd=src, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout + res.stderr
    res = subprocess.run([go, "test", *sorted(tested)], cwd=src, capture_output=True, text=True, timeout=1200)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "FAIL" not in res.stdout, res.stdout
