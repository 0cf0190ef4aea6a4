"""Network namespaces a killed `ukl cluster` (or apptest, hostbench) left:
the next private network removes those named exactly as the tool names
them (ukl-PID-N) whose process has ended, and nothing else. The ip
commands are answered here; the processes, alive or ended, are real."""

from __future__ import annotations

import os
import subprocess

import pytest

from ukltool.run import netns
from ukltool.util.errors import UklError


def ended_pid() -> int:
    """The PID of a process that has ended and been waited for."""
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert not os.path.exists(f"/proc/{proc.pid}")
    return proc.pid


class FakeIp:
    """`ip netns list|pids|del` over the namespaces in NAMES; INSIDE: the
    processes in a namespace; GONE: namespaces another process removes
    just before this one's del; VANISH: those it removes just after the
    first listing."""

    def __init__(self, names: list[str], inside: dict[str, str] | None = None, gone: set[str] | None = None,
                 vanish: set[str] | None = None):
        self.names, self.inside, self.gone, self.vanish = list(names), inside or {}, gone or set(), vanish or set()
        self.deleted: list[str] = []

    def __call__(self, cmd, what=None, **kw) -> str:
        assert cmd[:2] == ["ip", "netns"], cmd
        if cmd[2] == "list":
            listing = "".join(f"{n} (id: {i})\n" for i, n in enumerate(self.names))
            self.names = [n for n in self.names if n not in self.vanish]
            return listing
        if cmd[2] == "pids":
            if cmd[3] not in self.names:
                raise UklError(f"{what} failed (exit 1):\n  No such file or directory")
            return self.inside.get(cmd[3], "")
        assert cmd[2] == "del" and len(cmd) == 4, cmd
        if cmd[3] in self.gone:
            self.names.remove(cmd[3])
            raise UklError(f"{what} failed (exit 1):\n  Cannot remove namespace file: No such file or directory")
        self.names.remove(cmd[3])
        self.deleted.append(cmd[3])
        return ""


@pytest.fixture
def live():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_only_the_tools_names_with_an_ended_process_are_removed(monkeypatch, capsys, live):
    dead = ended_pid()
    others = [f"ukl-{live}-0", f"ukl-{os.getpid()}-3", "cni-1234", f"myukl-{dead}-0", f"ukl-{dead}",
              f"ukl-{dead}-0-x", f"ukl-0{dead}-0", f"ukl-{dead}-01", f"ukl-{dead}-a", "ukl-1-0"]   # PID 1 lives
    ip = FakeIp([f"ukl-{dead}-0", *others, f"ukl-{dead}-12"])
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == [f"ukl-{dead}-0", f"ukl-{dead}-12"]
    assert ip.deleted == [f"ukl-{dead}-0", f"ukl-{dead}-12"] and ip.names == others
    err = capsys.readouterr().err
    assert f"removed network namespace ukl-{dead}-0, left by ukl process {dead} that ended" in err
    assert f"ukl-{dead}-12" in err and f"ukl-{live}" not in err


def test_a_namespace_with_processes_in_it_is_kept_and_named(monkeypatch, capsys):
    dead = ended_pid()
    ip = FakeIp([f"ukl-{dead}-0"], inside={f"ukl-{dead}-0": "4242\n4243\n"})
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == [] and ip.names == [f"ukl-{dead}-0"]
    assert "processes 4242, 4243 still run in it: kept" in capsys.readouterr().err


def test_one_another_ukl_removed_first_is_no_error(monkeypatch, capsys):
    dead = ended_pid()
    ip = FakeIp([f"ukl-{dead}-0", f"ukl-{dead}-1"], gone={f"ukl-{dead}-0"})
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == [f"ukl-{dead}-1"]
    assert "warning" not in capsys.readouterr().err
    # removed between the listing and the look at the processes in it
    ip = FakeIp([f"ukl-{dead}-0", f"ukl-{dead}-1"], vanish={f"ukl-{dead}-0"})
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == [f"ukl-{dead}-1"]
    assert "warning" not in capsys.readouterr().err


def test_a_new_private_network_removes_stale_ones_first(monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    monkeypatch.setattr(netns, "remove_stale", lambda: calls.append("remove_stale") or [])
    monkeypatch.setattr(netns, "run", lambda cmd, what=None, **kw: calls.append(" ".join(cmd[:4])) or "")
    with netns.private_network(bridged=2) as ns:
        assert ns.name == f"ukl-{os.getpid()}-{ns.name.rsplit('-', 1)[1]}"
        assert netns.NAME.fullmatch(ns.name)
    assert calls[:2] == ["remove_stale", f"ip netns add {ns.name}"]
    assert calls[-1] == f"ip netns del {ns.name}"
