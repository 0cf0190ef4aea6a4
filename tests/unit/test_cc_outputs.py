"""Where ukl-cc writes its output (issue 34): as gcc and ld do. A device or
a FIFO named by -o (zstd's Makefile probes with `-o /dev/null`) is written
into, never replaced; a regular file is replaced atomically; a failed link
removes the file ld would have replaced and leaves no temporary file.

Special files are made in tmp_path, never the host's. The UKL pre-link
(which needs our glibc) is replaced by `ld -r` of the same objects: the
rest of the link (compiling, the host-runnable twin, objcopy, the output)
is ukl-cc's own code."""

from __future__ import annotations

import os
import stat
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ukltool.build import cc, image
from ukltool.glibc import libc
from ukltool.util.errors import UklError

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")

GOOD = "int main(void) { return 0; }\n"
UNDEFINED = "int missing(void);\nint main(void) { return missing(); }\n"
SYNTAX_ERROR = "int main(void) { return }\n"


@pytest.fixture(autouse=True)
def stand_in_prelink(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def link_ukl(objs: list[Path], archives: list[Path], out: Path, workdir: Path, lc: object) -> None:
        subprocess.run(["ld", "-r", "-o", str(out), *map(str, objs)], check=True)
    monkeypatch.setattr(cc.libc, "build", lambda: libc.Libc(tmp_path / "no-glibc", "2.36"))
    monkeypatch.setattr(cc.app, "link_ukl", link_ukl)
    monkeypatch.delenv("UKL_TARGET", raising=False)
    monkeypatch.delenv("UKL_CC_LOG", raising=False)


def source(d: Path, text: str = GOOD, name: str = "prog.c") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    src = d / name
    src.write_text(text)
    return src


def null_device(path: Path) -> os.stat_result:
    """A private /dev/null: character device 1:3."""
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    return os.lstat(path)


@contextmanager
def fifo(path: Path) -> Iterator[bytearray]:
    """A FIFO at PATH and what was written to it while the block ran. The
    test holds a writer too, so that nothing blocks whether or not the
    command opens the FIFO."""
    os.mkfifo(path)
    r = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    os.set_blocking(r, True)
    w = os.open(path, os.O_WRONLY)
    data = bytearray()

    def drain() -> None:
        while chunk := os.read(r, 65536):
            data.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        yield data
    finally:
        os.close(w)
        reader.join(timeout=60)
        os.close(r)


@contextmanager
def stdin_from(path: Path) -> Iterator[None]:
    """PATH as the standard input of what runs in the block."""
    saved = os.dup(0)
    with open(path, "rb") as fh:
        os.dup2(fh.fileno(), 0)
    try:
        yield
    finally:
        os.dup2(saved, 0)
        os.close(saved)


def same_node(path: Path, before: os.stat_result) -> bool:
    after = os.lstat(path)
    return (stat.S_IFMT(after.st_mode), after.st_ino, after.st_rdev) == \
        (stat.S_IFMT(before.st_mode), before.st_ino, before.st_rdev)


def leftovers(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir() if "ukl" in p.name or "partial" in p.name)


@root_only
def test_link_and_compile_into_a_null_device_keep_it(tmp_path: Path):
    src = source(tmp_path)
    node = tmp_path / "null"
    before = null_device(node)
    assert cc.main([str(src), "-o", str(node)]) == 0
    assert same_node(node, before) and stat.S_ISCHR(os.lstat(node).st_mode)
    assert cc.main(["-c", str(src), "-o", str(node)]) == 0
    assert same_node(node, before)
    with stdin_from(src):  # zstd's probe: `$(CC) -x c - -o /dev/null`
        assert cc.main(["-x", "c", "-", "-o", str(node)]) == 0
    assert same_node(node, before)
    assert leftovers(tmp_path) == []


@root_only
def test_failed_link_leaves_a_null_device_alone(tmp_path: Path):
    src = source(tmp_path, UNDEFINED)
    node = tmp_path / "null"
    before = null_device(node)
    assert cc.main([str(src), "-o", str(node)]) != 0
    assert same_node(node, before)
    assert leftovers(tmp_path) == []


def test_link_writes_the_program_into_a_fifo(tmp_path: Path):
    src = source(tmp_path)
    pipe = tmp_path / "pipe"
    with fifo(pipe) as data:
        before = os.lstat(pipe)
        assert cc.main([str(src), "-o", str(pipe)]) == 0
    assert same_node(pipe, before) and stat.S_ISFIFO(os.lstat(pipe).st_mode)
    # ld fails here (it seeks: "final link failed: Illegal seek"); ukl-cc
    # has the whole program and writes it, with the UKL object in it
    assert bytes(data[:4]) == b"\x7fELF"
    program = tmp_path / "from-pipe"
    program.write_bytes(bytes(data))
    sections = subprocess.run(["objdump", "-h", str(program)], capture_output=True, text=True).stdout
    assert cc.SECTION in sections
    assert leftovers(tmp_path) == []


def test_compile_into_a_fifo_keeps_it(tmp_path: Path):
    src = source(tmp_path)
    pipe = tmp_path / "pipe"
    with fifo(pipe):
        before = os.lstat(pipe)
        cc.main(["-c", str(src), "-o", str(pipe)])  # gcc's as cannot seek in it either
    assert same_node(pipe, before)


def test_dash_output_is_a_file_named_dash_as_with_gcc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capfd: pytest.CaptureFixture[str]):
    src = source(tmp_path)
    monkeypatch.chdir(tmp_path)
    # gcc: a link with -o - writes a file named '-' (ld does not know stdout)
    assert cc.main([str(src), "-o", "-"]) == 0
    assert (tmp_path / "-").read_bytes()[:4] == b"\x7fELF"
    assert "ELF" not in capfd.readouterr().out
    # gcc: -c -o - fails (as: "can't open a bfd on stdout -"), creating nothing
    (tmp_path / "-").unlink()
    assert cc.main(["-c", str(src), "-o", "-"]) != 0
    assert not (tmp_path / "-").exists()
    assert leftovers(tmp_path) == []


def test_link_replaces_a_regular_file_atomically(tmp_path: Path):
    src = source(tmp_path)
    out = tmp_path / "prog"
    out.write_text("old")
    os.chmod(out, 0o444)
    keep = tmp_path / "other-name"
    os.link(out, keep)  # the old file lives on under another name, as after ld
    old = os.umask(0o022)
    try:
        assert cc.main([str(src), "-o", str(out)]) == 0
    finally:
        os.umask(old)
    assert out.read_bytes()[:4] == b"\x7fELF" and keep.read_text() == "old"
    assert stat.S_IMODE(out.stat().st_mode) == 0o755
    assert leftovers(tmp_path) == []


def test_failed_link_removes_the_output_as_gcc_does(tmp_path: Path):
    for who in ("gcc", "ukl-cc"):
        d = tmp_path / who
        src = source(d, UNDEFINED)
        out = d / "prog"
        out.write_text("old")
        if who == "gcc":
            assert subprocess.run(["gcc", str(src), "-o", str(out)], capture_output=True).returncode != 0
        else:
            assert cc.main([str(src), "-o", str(out)]) != 0
        assert sorted(p.name for p in d.iterdir()) == ["prog.c"], who


def test_failed_compile_leaves_the_output_as_gcc_does(tmp_path: Path):
    src = source(tmp_path, SYNTAX_ERROR)
    out = tmp_path / "prog"
    out.write_text("old")
    assert subprocess.run(["gcc", str(src), "-o", str(out)], capture_output=True).returncode != 0
    assert out.read_text() == "old"
    assert cc.main([str(src), "-o", str(out)]) != 0
    assert out.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_symbolic_links_are_followed_as_ld_follows_them(tmp_path: Path):
    src = source(tmp_path)
    # to an empty file (/dev/stdout redirected to a new file): written through
    empty = tmp_path / "empty"
    empty.touch()
    through = tmp_path / "through"
    through.symlink_to(empty)
    assert cc.main([str(src), "-o", str(through)]) == 0
    assert through.is_symlink() and empty.read_bytes()[:4] == b"\x7fELF"
    # to a non-empty file: the link is replaced, its target kept
    full = tmp_path / "full"
    full.write_text("old")
    replaced = tmp_path / "replaced"
    replaced.symlink_to(full)
    assert cc.main([str(src), "-o", str(replaced)]) == 0
    assert not replaced.is_symlink() and full.read_text() == "old"
    assert leftovers(tmp_path) == []


@root_only
def test_link_through_a_symbolic_link_to_a_device_keeps_both(tmp_path: Path):
    src = source(tmp_path)
    node = tmp_path / "null"
    before = null_device(node)
    link = tmp_path / "stdout"
    link.symlink_to(node)
    for text in (GOOD, UNDEFINED):
        src.write_text(text)
        cc.main([str(src), "-o", str(link)])
        assert link.is_symlink() and same_node(node, before)
    assert leftovers(tmp_path) == []


def test_unwritable_outputs_are_clear_errors(tmp_path: Path, capfd: pytest.CaptureFixture[str]):
    src = source(tmp_path)
    (tmp_path / "dir").mkdir()
    for out, why in ((tmp_path / "dir", "Is a directory"), (tmp_path / "no" / "prog", "No such file")):
        assert cc.main([str(src), "-o", str(out)]) == 2
        err = capfd.readouterr().err
        assert f"cannot write output file {out}: {why}" in err and "Traceback" not in err
    assert (tmp_path / "dir").is_dir() and not any((tmp_path / "dir").iterdir())
    assert leftovers(tmp_path) == []


def test_failed_write_leaves_the_old_output_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    program = tmp_path / "linked"
    program.write_bytes(b"\x7fELF new")
    out = tmp_path / "prog"
    out.write_text("old")

    def full(src: object, dst: object) -> None:
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(cc.shutil, "copyfileobj", full)
    with pytest.raises(UklError, match="cannot write output file .*prog: No space left on device"):
        cc.write_output(program, str(out))
    assert out.read_text() == "old"
    assert leftovers(tmp_path) == []


@root_only
def test_only_programs_are_logged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    log = tmp_path / "programs"
    monkeypatch.setenv("UKL_CC_LOG", str(log))
    src = source(tmp_path)
    null_device(tmp_path / "null")
    assert cc.main([str(src), "-o", str(tmp_path / "null")]) == 0
    assert cc.main([str(src), "-o", str(tmp_path / "prog")]) == 0
    assert log.read_text().split() == [str(tmp_path / "prog")]


def test_build_outdir_that_it_would_not_replace_is_refused(tmp_path: Path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    (tmp_path / "linked").symlink_to(target)
    os.mkfifo(tmp_path / "pipe")
    os.mkfifo(tmp_path / "out.partial")
    for outdir in ("linked", "pipe", "out"):
        with pytest.raises(UklError):
            image._prepare_outdir(tmp_path / outdir)
    assert (tmp_path / "linked").is_symlink() and target.is_dir()
    assert stat.S_ISFIFO(os.lstat(tmp_path / "pipe").st_mode)
    assert stat.S_ISFIFO(os.lstat(tmp_path / "out.partial").st_mode)
    assert image._prepare_outdir(tmp_path / "new") == tmp_path / "new.partial"


def test_a_partial_directory_of_the_user_s_is_kept(tmp_path: Path):
    """Issue 44's review: OUTDIR.partial was removed whole whatever it was."""
    mine = tmp_path / "out.partial"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(UklError, match="was not made by ukl"):
        image._prepare_outdir(tmp_path / "out")
    assert (mine / "notes.txt").read_text() == "mine"
    # What an interrupted build left (its mark) is cleared, and so is an empty one
    left = image._prepare_outdir(tmp_path / "other")
    (left / "half-written").write_text("x")
    assert image._prepare_outdir(tmp_path / "other") == left and list(left.iterdir()) == [left / image.PARTIAL_MARK]
    (tmp_path / "empty.partial").mkdir()
    assert image._prepare_outdir(tmp_path / "empty").is_dir()
