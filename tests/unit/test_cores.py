"""`ukl run --core DIR` on the host's side (ukltool.run.cores): the disk's
records read back into new files, never over a user's file, names from
the guest made plain, a disk the guest did not finish said so; and the
refusals before a VM starts."""

from __future__ import annotations

import os
import stat
import struct
from pathlib import Path

import pytest

from conftest import fake_image
from ukltool import cli
from ukltool.build import protocol
from ukltool.run import cores, vm


def record(name: bytes, data: bytes) -> bytes:
    return protocol.CORE_MAGIC + struct.pack("<IIQ", len(name), 0, len(data)) + name + data


def disk(tmp_path: Path, *parts: bytes, end: bool = True, size: int = 1 << 20) -> Path:
    path = tmp_path / "cores.img"
    body = b"".join(parts) + (protocol.CORE_END if end else b"")
    path.write_bytes(body + b"\0" * (size - len(body)))
    return path


def test_records_come_back_as_new_private_files(tmp_path):
    dest = tmp_path / "dest"
    saved, finished = cores.extract(disk(tmp_path, record(b"core.app.30", b"A" * 70000),
                                         record(b"core.app.31", b"")), dest)
    assert finished
    assert [(s.path.name, s.size) for s in saved] == [("core.app.30", 70000), ("core.app.31", 0)]
    assert (dest / "core.app.30").read_bytes() == b"A" * 70000
    assert stat.S_IMODE((dest / "core.app.30").stat().st_mode) == 0o600


def test_an_existing_file_or_link_is_never_written(tmp_path):
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "core.app.30").write_text("the user's")
    os.symlink(tmp_path / "elsewhere", dest / "core.app.30.1")
    saved, _ = cores.extract(disk(tmp_path, record(b"core.app.30", b"new")), dest)
    assert (dest / "core.app.30").read_text() == "the user's"
    assert not (tmp_path / "elsewhere").exists()
    assert saved[0].path == dest / "core.app.30.2" and saved[0].path.read_bytes() == b"new"


@pytest.mark.parametrize("name,want", [(b"../../etc/passwd", ".._.._etc_passwd"), (b"core.a b\n.1", "core.a_b_.1"),
                                       (b"..", "core"), (b"core.\xff.2", "core._.2")])
def test_names_from_the_guest_stay_in_the_directory(tmp_path, name, want):
    saved, _ = cores.extract(disk(tmp_path, record(name, b"x")), tmp_path / "dest")
    assert saved[0].path == tmp_path / "dest" / want


def test_a_disk_the_guest_did_not_finish_is_reported(tmp_path):
    cut = record(b"core.app.30", b"B" * 1000)[:-400]
    saved, finished = cores.extract(disk(tmp_path, cut, end=False, size=len(cut)), tmp_path / "dest")
    assert not finished and saved[0].size == 600
    saved, finished = cores.extract(disk(tmp_path, end=False), tmp_path / "dest2")
    assert (saved, finished) == ([], False) and not (tmp_path / "dest2").exists()
    # a header that claims a name of 4 GiB is not read as one
    bogus = protocol.CORE_MAGIC + struct.pack("<IIQ", 0xFFFFFFFF, 0, 1)
    saved, finished = cores.extract(disk(tmp_path, bogus, end=False), tmp_path / "dest3")
    assert (saved, finished) == ([], False) and not (tmp_path / "dest3").exists()


def test_the_disk_is_sparse_and_as_large_as_the_memory(tmp_path):
    d = cores.make_disk(tmp_path / "d.img", 1 << 30)
    assert d.stat().st_size == (1 << 30) + cores.SLACK and d.stat().st_blocks == 0


@pytest.mark.parametrize("machine,device", [("pc", "virtio-blk-pci"), ("microvm", "virtio-blk-device")])
def test_qemu_gets_the_disk_and_init_the_parameter(tmp_path, machine, device):
    spec = vm.RunSpec(bzimage=tmp_path / "b", initrds=[], log=tmp_path / "l", machine=machine,
                      core_disk=tmp_path / "c.img")
    cmd = vm.qemu_command("qemu", spec, "tcg", tmp_path / "i", tmp_path / "s")
    assert f"{device},drive=ukl-core,serial={protocol.CORE_DISK_SERIAL}" in cmd
    assert f"{protocol.CORE_PARAM}=1" in cmd[cmd.index("-append") + 1].split()


def test_init_uses_the_protocol_s_names():
    init = (Path(cli.__file__).parents[3] / "guest" / "init.c").read_text()
    for text in (protocol.CORE_DIR, protocol.CORE_PATTERN, protocol.CORE_DISK_SERIAL,
                 protocol.CORE_MAGIC.decode(), protocol.CORE_END.decode()):
        assert f'"{text}"' in init, text
    assert f'getenv("{protocol.CORE_PARAM}")' in init
    assert 'put(disk, len, sizeof(len))' in init and "uint32_t len[2]" in init and "uint64_t size" in init


@pytest.mark.parametrize("extra,refused", [(["--pid1"], "--core needs ukl's init"),
                                           (["--core", "FILE"], "exists and is not a directory")])
def test_run_refuses_core_where_it_cannot_work(capsys, tmp_path, extra, refused):
    out = fake_image(tmp_path)
    (tmp_path / "FILE").write_text("x")
    argv = ["run", str(out), *[str(tmp_path / "FILE") if e == "FILE" else e for e in extra]]
    if "--core" not in argv:
        argv += ["--core", str(tmp_path / "cores")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert refused in err and "hint:" in err and "Traceback" not in err, err
    assert (tmp_path / "FILE").read_text() == "x" and not (tmp_path / "cores").exists()
