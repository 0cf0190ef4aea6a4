"""Network namespaces a killed `ukl cluster` (or apptest, hostbench) left:
the next private network removes those whose owner marker (netns.MARKERS,
here a directory of the test's) says they were made in this PID namespace
by a process that has ended, and nothing else: not one without a marker,
one made in another PID namespace, or one whose process still runs. A
name in use is passed over, unless it is stale. The ip commands are
answered here; the processes, alive or ended, are real."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path

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
    """`ip netns list|pids|del|add` over the namespaces in NAMES; INSIDE:
    the processes in a namespace; GONE: namespaces another process removes
    just before this one's del; VANISH: those it removes just after the
    first listing; LIST_FAILS: `ip netns list` fails; ADD_FAILS: `ip netns
    add` fails for another reason than the name."""

    def __init__(self, names: list[str], inside: dict[str, str] | None = None, gone: set[str] | None = None,
                 vanish: set[str] | None = None, list_fails: bool = False, add_fails: bool = False):
        self.names, self.inside, self.gone, self.vanish = list(names), inside or {}, gone or set(), vanish or set()
        self.list_fails, self.add_fails = list_fails, add_fails
        self.deleted: list[str] = []
        self.added: list[str] = []
        self.calls: list[str] = []

    def __call__(self, cmd, what=None, **kw) -> str:
        self.calls.append(" ".join(cmd[:4]))
        if cmd[:2] == ["ip", "-n"]:   # a private network's tap or bridge
            assert cmd[2] in self.names, cmd
            return ""
        assert cmd[:2] == ["ip", "netns"], cmd
        if cmd[2] == "list":
            if self.list_fails:
                raise UklError(f"{what} failed (exit 1):\n  mount --make-shared /run/netns failed: Permission denied")
            listing = "".join(f"{n} (id: {i})\n" for i, n in enumerate(self.names))
            self.names = [n for n in self.names if n not in self.vanish]
            return listing
        if cmd[2] == "pids":
            if cmd[3] not in self.names:
                raise UklError(f"{what} failed (exit 1):\n  No such file or directory")
            return self.inside.get(cmd[3], "")
        if cmd[2] == "add":
            if cmd[3] in self.names:
                raise UklError(f"{what} failed (exit 1):\n  Cannot create namespace file \"/run/netns/{cmd[3]}\": "
                               "File exists")
            if self.add_fails:
                raise UklError(f"{what} failed (exit 1):\n  mount --bind /proc/self/ns/net failed: Permission denied")
            self.names.append(cmd[3])
            self.added.append(cmd[3])
            return ""
        assert cmd[2] == "del" and len(cmd) == 4, cmd
        if cmd[3] in self.gone:
            self.names.remove(cmd[3])
            raise UklError(f"{what} failed (exit 1):\n  Cannot remove namespace file: No such file or directory")
        self.names.remove(cmd[3])
        self.deleted.append(cmd[3])
        return ""


@pytest.fixture(autouse=True)
def markers(tmp_path, monkeypatch) -> Path:
    """netns.MARKERS in the test's directory: where the owners are."""
    (tmp_path / "run").mkdir()
    monkeypatch.setattr(netns, "MARKERS", tmp_path / "run" / "ukl" / "netns")
    return netns.MARKERS


def mark(name: str, owner: netns.Owner | str) -> None:
    """Record OWNER (or, a string, write it) as namespace NAME's owner."""
    with netns.markers() as d:
        if isinstance(owner, str):
            (netns.MARKERS / name).write_text(owner)
        else:
            assert netns.mark(d, name, owner)


def marked() -> set[str]:
    return set(os.listdir(netns.MARKERS)) if netns.MARKERS.exists() else set()


def owner(pid: int, start: int | None = None, pidns: tuple[int, int] | None = None) -> netns.Owner:
    """Process PID of this PID namespace as it is now (START: as a process
    that had PID and started then)."""
    now = netns.start_time(pid)
    return netns.Owner(pid, start if start is not None else now or 4242, pidns or netns.pid_namespace())


@pytest.fixture
def live():
    proc = subprocess.Popen(["sleep", "60"])
    yield proc.pid
    proc.kill()
    proc.wait()


def test_owner_is_read_from_proc():
    me = netns.this_process()
    assert me.pid == os.getpid() and me.pidns == (os.stat("/proc/self/ns/pid").st_dev,
                                                   os.stat("/proc/self/ns/pid").st_ino)
    # /proc/PID/stat's 22nd field, counted after the name in parentheses
    fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
    assert me.start == int(fields[19]) == netns.start_time(os.getpid())
    assert not netns.ended(me)
    assert netns.Owner.parse(me.text()) == me
    for bad in ("", "pid 1 start 2 pidns 3:4", "pid 0 start 2 pidns 3:4\n", "pid 1 start x pidns 3:4\n",
                me.text() + me.text()):
        assert netns.Owner.parse(bad) is None, bad


def test_only_namespaces_an_ended_process_of_this_pid_namespace_marked_are_removed(monkeypatch, capsys, live):
    dead, dead2 = ended_pid(), ended_pid()
    removed = [f"ukl-{dead}-0", f"ukl-{live}-1", f"ukl-{dead}-12"]
    mark(f"ukl-{dead}-0", owner(dead))                     # its owner ended
    mark(f"ukl-{live}-1", owner(live, start=1))            # its PID is another process's now
    mark(f"ukl-{dead}-12", owner(dead))
    mark(f"ukl-{live}-0", owner(live))                     # its owner runs
    mark(f"ukl-{dead}-2", owner(dead, pidns=(0, 1)))       # made in another PID namespace
    mark(f"ukl-{dead}-3", owner(dead2))                    # a marker of another PID than the name's
    mark(f"ukl-{dead}-4", "pid 1 start\n")                 # not a marker ukl wrote
    (netns.MARKERS / f"ukl-{dead}-6").write_bytes(b"\xff" + owner(dead).text().encode())
    (netns.MARKERS / f"ukl-{dead}-7").mkdir()
    (netns.MARKERS.parent / "elsewhere").write_text(owner(dead).text())
    (netns.MARKERS / f"ukl-{dead}-5").symlink_to(netns.MARKERS.parent / "elsewhere")   # never followed
    mark(f"myukl-{dead}-0", owner(dead))                   # not a name of the tool's
    mark(f"ukl-{dead}-01", owner(dead))
    kept_marked = marked() - set(removed)
    others = [f"ukl-{live}-0", f"ukl-{dead}-1",            # no marker: made elsewhere, or by an older ukl
              f"ukl-{dead}-2", f"ukl-{dead}-3", f"ukl-{dead}-4", f"ukl-{dead}-5", f"ukl-{dead}-6", f"ukl-{dead}-7",
              "cni-1234", f"myukl-{dead}-0",
              f"ukl-{dead}", f"ukl-{dead}-0-x", f"ukl-0{dead}-0", f"ukl-{dead}-01", f"ukl-{dead}-a", "ukl-1-0"]
    ip = FakeIp([removed[0], *others[:3], removed[1], *others[3:], removed[2]])
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == removed
    assert ip.deleted == removed and ip.names == others
    assert marked() == kept_marked   # the removed ones' markers went with them
    err = capsys.readouterr().err
    assert f"removed network namespace ukl-{dead}-0, left by ukl process {dead} that ended" in err
    assert f"removed network namespace ukl-{live}-1, left by ukl process {live} that ended" in err
    assert f"ukl-{dead}-12" in err and f"ukl-{live}-0" not in err and "warning" not in err


def test_markers_left_without_their_namespace_are_removed_if_their_owner_ended(monkeypatch, live):
    dead = ended_pid()
    mark(f"ukl-{dead}-0", owner(dead))                     # killed between its marker and `ip netns add`
    mark(f"ukl-{live}-0", owner(live))                     # making its namespace now
    mark(f"ukl-{dead}-1", owner(dead, pidns=(0, 1)))
    monkeypatch.setattr(netns, "run", FakeIp([]))
    assert netns.remove_stale() == []
    assert marked() == {f"ukl-{live}-0", f"ukl-{dead}-1"}


def test_a_namespace_with_processes_in_it_is_kept_and_named(monkeypatch, capsys):
    dead = ended_pid()
    mark(f"ukl-{dead}-0", owner(dead))
    ip = FakeIp([f"ukl-{dead}-0"], inside={f"ukl-{dead}-0": "4242\n4243\n"})
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == [] and ip.names == [f"ukl-{dead}-0"]
    assert "processes 4242, 4243 still run in it: kept" in capsys.readouterr().err
    assert marked() == {f"ukl-{dead}-0"}   # for the next time


def test_one_another_ukl_removed_first_is_no_error(monkeypatch, capsys):
    dead = ended_pid()
    for how in ("gone", "vanish"):
        # removed just before the del, or between the listing and the look at the processes in it
        for name in (f"ukl-{dead}-0", f"ukl-{dead}-1"):
            mark(name, owner(dead))
        ip = FakeIp([f"ukl-{dead}-0", f"ukl-{dead}-1"], **{how: {f"ukl-{dead}-0"}})
        monkeypatch.setattr(netns, "run", ip)
        assert netns.remove_stale() == [f"ukl-{dead}-1"]
        assert "warning" not in capsys.readouterr().err
        assert marked() == set()


def test_a_failed_listing_is_not_in_the_way_of_a_new_network(monkeypatch, capsys):
    dead = ended_pid()
    mark(f"ukl-{dead}-0", owner(dead))
    ip = FakeIp([f"ukl-{dead}-0"], list_fails=True)
    monkeypatch.setattr(netns, "run", ip)
    assert netns.remove_stale() == []
    err = capsys.readouterr().err
    assert "warning: listing the network namespaces failed" in err
    assert "namespaces left by ended ukl runs are not removed this time" in err
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    with netns.private_network() as ns:
        assert ns.name in ip.names and ns.name in marked()
    assert ip.names == [f"ukl-{dead}-0"] and marked() == {f"ukl-{dead}-0"}


def test_a_new_private_network_removes_stale_ones_and_records_its_owner(monkeypatch):
    dead = ended_pid()
    mark(f"ukl-{dead}-0", owner(dead))
    ip = FakeIp([f"ukl-{dead}-0"])
    monkeypatch.setattr(netns, "run", ip)
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    with netns.private_network(bridged=2) as ns:
        assert ns.name == f"ukl-{os.getpid()}-{ns.name.rsplit('-', 1)[1]}"
        assert netns.NAME.fullmatch(ns.name)
        assert netns.Owner.parse((netns.MARKERS / ns.name).read_text()) == netns.this_process()
        assert ip.names == [ns.name]
    assert ip.calls[:4] == ["ip netns list", f"ip netns pids ukl-{dead}-0", f"ip netns del ukl-{dead}-0",
                            f"ip netns add {ns.name}"]
    assert ip.calls[-1] == f"ip netns del {ns.name}"
    assert ip.names == [] and marked() == set()
    # the markers' directory is root's (here: the user's) alone
    for d in (netns.MARKERS, netns.MARKERS.parent):
        assert d.stat().st_mode & 0o777 == 0o700


def test_a_name_in_use_is_passed_over_unless_it_is_stale(monkeypatch, capsys):
    """This process's PID was a killed ukl's (PID reuse), or is another
    PID namespace's ukl's: ukl-PID-N exists already. Stale (marked by a
    process of this PID namespace with another start time), it is removed
    and taken; not the tool's, the next N is."""
    me = os.getpid()
    n = 1000
    monkeypatch.setattr(netns, "_serial", itertools.count(n))
    monkeypatch.setattr(netns, "remove_stale", lambda: [])   # claim's own judgement
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    mark(f"ukl-{me}-{n}", owner(me, pidns=(0, 1)))        # another PID namespace's ukl with this PID
    mark(f"ukl-{me}-{n + 2}", owner(me, pidns=(0, 1)))    # ... making its namespace now
    mark(f"ukl-{me}-{n + 3}", owner(me, start=1))         # a killed ukl's that had this PID
    taken = [f"ukl-{me}-{n}", f"ukl-{me}-{n + 1}"]        # the second without a marker
    ip = FakeIp([*taken, f"ukl-{me}-{n + 3}"])
    monkeypatch.setattr(netns, "run", ip)
    with netns.private_network() as ns:
        assert ns.name == f"ukl-{me}-{n + 3}"
        assert netns.Owner.parse((netns.MARKERS / ns.name).read_text()) == netns.this_process()
    assert ip.deleted == [ns.name, ns.name] and ip.added == [ns.name] and ip.names == taken
    assert f"removed network namespace ukl-{me}-{n + 3}, left by ukl process {me}" in capsys.readouterr().err
    assert marked() == {f"ukl-{me}-{n}", f"ukl-{me}-{n + 2}"}   # not this process's to remove


def test_a_failed_add_is_an_error_and_leaves_no_marker(monkeypatch):
    monkeypatch.setattr(netns, "run", FakeIp([], add_fails=True))
    monkeypatch.setattr(netns, "unavailable", lambda: None)
    with pytest.raises(UklError, match="creating network namespace ukl-.* failed"):
        with netns.private_network():
            pass
    assert marked() == set()


def test_a_markers_directory_others_could_write_or_a_link_is_refused(monkeypatch, tmp_path):
    monkeypatch.setattr(netns, "run", FakeIp([]))
    ukl = netns.MARKERS.parent
    ukl.mkdir(mode=0o700)
    ukl.chmod(0o777)
    with pytest.raises(UklError) as e:
        netns.remove_stale()
    assert e.value.message == (f"{ukl}, the directory of network namespace owners, is not this user's alone "
                               f"(owner {os.geteuid()}, mode 0777)")
    assert e.value.hint == f"remove it (rm -r {ukl}); ukl makes it again"
    ukl.rmdir()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    ukl.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(UklError) as e:
        netns.remove_stale()
    assert e.value.message.startswith(f"cannot open {ukl}, the directory of network namespace owners: ")
    assert list((tmp_path / "elsewhere").iterdir()) == []
