"""The host's side of the guest protocol (ukltool.build.protocol) and the
guest's (guest/init.c) agree."""

from __future__ import annotations

import re

from ukltool.build import protocol
from ukltool.run import vm
from ukltool.util.paths import GUEST_DIR

INIT = (GUEST_DIR / "init.c").read_text()


def test_init_reads_the_files_the_host_writes():
    for path in (protocol.APP_PATH_FILE, protocol.ARGS_FILE, protocol.SH_FILE):
        assert f'"{path}"' in INIT, path


def test_init_reports_as_the_host_expects():
    assert f'"{protocol.INIT_MARKER}%s\\n"' in INIT
    assert f'open("{protocol.STATUS_DEVICE}"' in INIT
    assert '"status %d\\n"' in INIT and protocol.parse_status("status 3\n") == 3
    port = re.search(r"#define DEBUG_EXIT_PORT (0x[0-9a-f]+)", INIT)
    assert port and int(port.group(1), 16) == protocol.DEBUG_EXIT_PORT
    assert f"report_and_exit({protocol.STATUS_NO_APP})" in INIT


def test_qemu_wires_the_status_channel_and_exit_port(tmp_path):
    spec = vm.RunSpec(bzimage=tmp_path / "b", initrds=[], log=tmp_path / "l")
    cmd = vm.qemu_command("qemu", spec, "tcg", tmp_path / "i", tmp_path / "s")
    serials = [cmd[i + 1] for i, a in enumerate(cmd) if a == "-serial"]
    assert serials == ["stdio", f"file:{tmp_path / 's'}"]  # ttyS0: console, ttyS1: status
    assert protocol.DEBUG_EXIT_DEVICE in cmd and "iobase=0xf4" in protocol.DEBUG_EXIT_DEVICE
