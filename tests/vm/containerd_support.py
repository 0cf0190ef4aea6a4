"""containerd and urunc for the container tests (test_oci_urunc.py,
test_cri_urunc.py): a private containerd (its own root, state and socket,
optionally its own configuration and network namespace), importing a `ukl
pkg --oci` archive, and what a test may leave behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import REPO, ukl

TCG_BIN = Path("/usr/lib/ukl-urunc/bin")
RUNTIME = "io.containerd.urunc.v2"
CNI_BIN = Path("/usr/lib/cni")


class Containerd:
    """A private containerd. CRI: the CRI plugin's part of the configuration
    (None: the plugin is off); NETNS: the network namespace it runs in."""

    def __init__(self, root: Path, cri: str | None = None, netns: str | None = None) -> None:
        self.root = root
        self.sock = root / "containerd.sock"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cri = cri
        self.netns = netns
        self.namespace = "k8s.io" if cri is not None else "default"

    def config(self) -> str:
        return (f'version = 2\nroot = "{self.root}/root"\nstate = "{self.root}/state"\n'
                f'[grpc]\n  address = "{self.sock}"\n[ttrpc]\n  address = "{self.sock}.ttrpc"\n' +
                (self.cri if self.cri is not None else '[plugins."io.containerd.grpc.v1.cri"]\n  disable = true\n'))

    def start(self, conf: Path | None = None) -> None:
        """Start it with CONF (default: config(), written to ROOT/config.toml)."""
        self.root.mkdir(parents=True, exist_ok=True)
        if conf is None:
            conf = self.root / "config.toml"
            conf.write_text(self.config())
        env = dict(os.environ)
        if TCG_BIN.is_dir():  # what scripts/install-urunc asks for on a host without usable KVM
            env["PATH"] = f"{TCG_BIN}:{env['PATH']}"
        cmd = ["containerd", "--config", str(conf)]
        if self.netns:
            # nsenter, not `ip netns exec`, which also remounts /sys (and so
            # hides the cgroup mounts runc needs)
            cmd = ["nsenter", f"--net=/var/run/netns/{self.netns}", *cmd]
        with open(self.root / "containerd.log", "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=log, env=env, start_new_session=True)
        deadline = time.monotonic() + 60
        while self.ctr("version").returncode != 0:
            assert self.proc.poll() is None and time.monotonic() < deadline, (self.root / "containerd.log").read_text()
            time.sleep(0.5)

    def ctr(self, *args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ctr", "--address", str(self.sock), "--namespace", self.namespace, *map(str, args)],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout, stdin=subprocess.DEVNULL)

    def stop(self) -> None:
        for cid in self.ctr("container", "ls", "-q").stdout.split():
            self.ctr("task", "kill", "-s", "SIGKILL", cid)
            self.ctr("task", "delete", "-f", cid)
            self.ctr("container", "delete", cid)
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def leftovers(root: Path) -> list[str]:
    """Mounts under ROOT and QEMU processes started from it."""
    mounts = [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if str(root) in line]
    qemus = subprocess.run(["pgrep", "-a", "qemu-system"], capture_output=True, text=True).stdout.splitlines()
    return mounts + [q for q in qemus if "/ukl/bzImage" in q]


def package(out: Path, tag: str, ctd: Containerd) -> Path:
    tar = out.parent / f"{out.name}.tar"
    res = ukl("pkg", out, "--oci", tar, "--tag", tag)
    assert res.returncode == 0, res.stdout
    info = json.loads(subprocess.run(["skopeo", "inspect", f"oci-archive:{tar}"], capture_output=True, text=True,
                                     check=True).stdout)
    assert info["Os"] == "linux" and len(info["Layers"]) == 1
    res = ctd.ctr("image", "import", tar)
    assert res.returncode == 0 and tag in res.stdout, res.stdout
    return tar


def app_output(out: str) -> str:
    """What follows init's first line: the application's output and init's."""
    return out[out.index("ukl-init: starting"):] if "ukl-init: starting" in out else out


def install_urunc(what: str) -> str:
    """Root, then scripts/install-urunc (idempotent); its output. Without
    root the test is skipped, or failed under CI."""
    if os.geteuid() != 0:
        if os.environ.get("CI"):
            pytest.fail(f"{what} need root")
        pytest.skip(f"{what} need root (scripts/install-urunc, docs/deploy.md)")
    res = subprocess.run([REPO / "scripts" / "install-urunc"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, timeout=1800)
    assert res.returncode == 0, res.stdout
    return res.stdout
