"""containerd and urunc for the container tests (test_oci_urunc.py,
test_cri_urunc.py, test_kubelet_urunc.py): a private containerd (its own
root, state and socket, optionally its own configuration and network
namespace), importing a `ukl pkg --oci` archive, the pod sandbox's image,
crictl, and what a test may leave behind."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import REPO, ukl
from ukltool.run import ocipkg

TCG_BIN = Path("/usr/lib/ukl-urunc/bin")
RUNTIME = "io.containerd.urunc.v2"
CNI_BIN = Path("/usr/lib/cni")
K8S = REPO / "deploy" / "k8s"
PAUSE = "localhost/ukl/pause:test"
CRICTL = Path("/usr/local/bin/crictl")


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
    """OUT packaged by `ukl pkg --oci` as TAG and imported into CTD; once
    per containerd (tests that share an image share its import)."""
    tar = out.parent / f"{out.name}.tar"
    if tar.is_file() and tag in ctd.ctr("image", "ls", "-q").stdout.split():
        return tar
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


CAP_SYS_RESOURCE = 24


def has_cap(cap: int) -> bool:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def pause_archive(work: Path) -> Path:
    """An OCI image of tests/apps/pause.c for the pod sandbox."""
    exe = work / "pause"
    subprocess.run(["gcc", "-static", "-O2", "-Wall", "-Werror", "-o", exe, REPO / "tests" / "apps" / "pause.c"],
                   check=True)
    raw = ocipkg._tar([("pause", exe.read_bytes(), 0o755)])
    layer = ocipkg.Blob(ocipkg.MEDIA_LAYER, ocipkg._gzip(raw))
    config = ocipkg.Blob(ocipkg.MEDIA_CONFIG, ocipkg._json({
        "architecture": "amd64", "os": "linux", "config": {"Entrypoint": ["/pause"]},
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(raw).hexdigest()]}}))
    manifest = ocipkg.Blob(ocipkg.MEDIA_MANIFEST, ocipkg._json({
        "schemaVersion": 2, "mediaType": ocipkg.MEDIA_MANIFEST, "config": config.descriptor(),
        "layers": [layer.descriptor()]}), annotations={ocipkg.REF_NAME: PAUSE, ocipkg.CONTAINERD_NAME: PAUSE})
    index = ocipkg._json({"schemaVersion": 2, "mediaType": ocipkg.MEDIA_INDEX, "manifests": [manifest.descriptor()]})
    tar = work / "pause.tar"
    tar.write_bytes(ocipkg.archive_bytes(ocipkg.Package(PAUSE, layer, config, manifest, index, {})))
    return tar


class Cri:
    def __init__(self, ctd: Containerd) -> None:
        self.ctd = ctd

    def __call__(self, *args: str | Path, timeout: float = 600, check: bool = True) -> str:
        ep = f"unix://{self.ctd.sock}"
        res = subprocess.run([CRICTL, "--runtime-endpoint", ep, "--image-endpoint", ep, "--timeout", "300s",
                              *map(str, args)], capture_output=True, text=True, timeout=timeout,
                             stdin=subprocess.DEVNULL)
        if check:
            assert res.returncode == 0, f"crictl {' '.join(map(str, args))}: {res.stdout}{res.stderr}"
        return res.stdout

    def inspect(self, cid: str) -> dict:
        return json.loads(self("inspect", cid))["status"]


def cri_plugin(work: Path, name: str, subnet: str, runtimes: str = "") -> str:
    """The CRI plugin's part of a containerd configuration, and under WORK
    the CNI configuration it names: one bridge network NAME on SUBNET
    (addresses kept in WORK/ipam), its bridge NAME0. RUNTIMES: more TOML
    tables of the plugin (its runtimes), or none."""
    assert len(f"{name}0") <= 15, name  # a network interface's name
    (work / "net.d").mkdir()
    (work / "net.d" / "10-ukl.conflist").write_text(json.dumps({
        "cniVersion": "1.0.0", "name": name, "plugins": [
            {"type": "bridge", "bridge": f"{name}0", "isGateway": True, "ipMasq": False,
             "ipam": {"type": "host-local", "subnet": subnet, "routes": [{"dst": "0.0.0.0/0"}],
                      "dataDir": str(work / "ipam")}}]}))
    return ('[plugins."io.containerd.grpc.v1.cri"]\n'
            f'  sandbox_image = "{PAUSE}"\n'
            # The kubelet asks for oom_score_adj -998 for a pod sandbox;
            # lowering it needs CAP_SYS_RESOURCE, which some hosts (this
            # project's machines) do not give root: there the CRI keeps it
            # at containerd's own
            f'  restrict_oom_score_adj = {"false" if has_cap(CAP_SYS_RESOURCE) else "true"}\n'
            + runtimes +
            '  [plugins."io.containerd.grpc.v1.cri".cni]\n'
            f'    bin_dir = "{CNI_BIN}"\n    conf_dir = "{work / "net.d"}"\n')


@contextmanager
def network_namespace(name: str) -> Iterator[str]:
    """A network namespace NAME with its loopback up, removed on leaving."""
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "set", "lo", "up"], check=True)
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name])
    assert name not in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


def remove_pods(ctd: Containerd) -> None:
    """Stop and remove every pod of CTD's CRI, whatever state it is in."""
    cri = Cri(ctd)
    for pod in cri("pods", "-q", check=False).split():
        cri("stopp", pod, check=False)
        cri("rmp", "-f", pod, check=False)
