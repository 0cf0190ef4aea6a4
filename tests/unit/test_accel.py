"""Choosing KVM or TCG: a test boot with a fake QEMU (no VM needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ukltool.run import vm
from ukltool.util.errors import UklError

# A fake qemu-system-x86_64: --version, and a "boot" that writes what the
# guest's init would to the second serial port (the status channel).
FAKE = """#!/bin/sh
[ "$1" = --version ] && {{ echo "QEMU emulator version 7.2.99 (fake)"; exit 0; }}
echo "$@" >> {log}
n=0
for a in "$@"; do
  case "$a" in file:*) n=$((n+1)); [ $n = 1 ] && status=${{a#file:}} ;; esac
done
{body}
"""


def fake_qemu(tmp_path: Path, body: str) -> str:
    q = tmp_path / "qemu-system-x86_64"
    q.write_text(FAKE.format(log=tmp_path / "calls", body=body))
    q.chmod(0o755)
    return str(q)


@pytest.fixture
def probe_env(tmp_path, monkeypatch):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("UKL_ACCEL", raising=False)
    monkeypatch.setattr(vm, "_kvm_usable_quick", lambda: (None, ""))
    monkeypatch.setattr(vm, "probe_initrd", lambda: tmp_path / "probe.cpio")
    return tmp_path


@pytest.mark.parametrize("body,accel", [
    ('echo "status 127" > "$status"; exit 255', "kvm"),       # init without an application
    ('echo "status 0" > "$status"; exit 1', "kvm"),           # any status is a boot
    ('echo "status 3" > "$status"; exit 7', "kvm"),
    ('echo "Could not access KVM kernel module" >&2; exit 1', "tcg"),
    ("exit 0", "tcg"),                                         # no status: the guest never ran init
])
def test_kvm_is_chosen_when_a_test_boot_reports_any_status(probe_env, body, accel):
    qemu = fake_qemu(probe_env, body)
    assert vm.choose_accel(qemu, probe_env / "bzImage") == accel
    calls = (probe_env / "calls").read_text()
    assert "-accel kvm" in calls and str(probe_env / "probe.cpio") in calls
    # decided once: the second choice boots nothing
    assert vm.choose_accel(qemu, probe_env / "bzImage") == accel
    assert (probe_env / "calls").read_text() == calls
    cached = json.loads((probe_env / "cache" / "accel.json").read_text())
    assert [v["accel"] for v in cached.values()] == [accel]


def test_a_hanging_test_boot_means_tcg(probe_env, monkeypatch):
    qemu = fake_qemu(probe_env, "sleep 30")
    real = vm.probe_kvm
    monkeypatch.setattr(vm, "probe_kvm", lambda q, k, i: real(q, k, i, timeout=1))
    assert vm.choose_accel(qemu, probe_env / "bzImage") == "tcg"


def test_forced_choices_boot_nothing(probe_env, monkeypatch):
    qemu = fake_qemu(probe_env, "exit 99")
    assert vm.choose_accel(qemu, probe_env / "bzImage", "kvm") == "kvm"
    monkeypatch.setenv("UKL_ACCEL", "tcg")
    assert vm.choose_accel(qemu, probe_env / "bzImage") == "tcg"
    assert vm.choose_accel(qemu, probe_env / "bzImage", "kvm") == "kvm"  # --accel wins
    assert not (probe_env / "calls").exists()
    monkeypatch.setenv("UKL_ACCEL", "hvf")
    with pytest.raises(UklError, match="unknown accelerator 'hvf'"):
        vm.choose_accel(qemu, probe_env / "bzImage")


def test_a_damaged_cache_is_asked_again(probe_env):
    qemu = fake_qemu(probe_env, 'echo "status 127" > "$status"; exit 255')
    (probe_env / "cache").mkdir()
    (probe_env / "cache" / "accel.json").write_text("{not json")
    assert vm.choose_accel(qemu, probe_env / "bzImage") == "kvm"


def test_qemu_command_matches_the_accelerator(tmp_path):
    spec = vm.RunSpec(bzimage=tmp_path / "bzImage", initrds=[], log=tmp_path / "log", icount=True, smp=1)
    tcg = vm.qemu_command("qemu", spec, "tcg", tmp_path / "i", tmp_path / "s")
    assert tcg[tcg.index("-accel") + 1] == "tcg" and tcg[tcg.index("-cpu") + 1] == "max"
    assert "-icount" in tcg and "-netdev" not in tcg and "norandmaps" in tcg[tcg.index("-append") + 1]
    # no host randomness and no host date under icount
    assert tcg[tcg.index("-seed") + 1] == vm.ICOUNT_SEED
    assert tcg[tcg.index("-rtc") + 1] == f"base={vm.ICOUNT_DATE},clock=vm"
    spec = vm.RunSpec(bzimage=tmp_path / "bzImage", initrds=[], log=tmp_path / "log", forwards=[(8080, 80)])
    kvm = vm.qemu_command("qemu", spec, "kvm", tmp_path / "i", tmp_path / "s")
    assert kvm[kvm.index("-accel") + 1] == "kvm" and kvm[kvm.index("-cpu") + 1] == "host"
    assert "user,id=n0,hostfwd=tcp:127.0.0.1:8080-:80" in kvm and f"file:{tmp_path / 's'}" in kvm
    assert "-seed" not in kvm and "-rtc" not in kvm
