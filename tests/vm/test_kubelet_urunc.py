"""UKL pods run by Kubernetes' own kubelet (issue 46, item 1): no crictl
standing in for it, but the kubelet of Kubernetes v1.34.0, built from its
Go module by scripts/build-kubelet (no cluster can be brought up here:
kind's and k3s's images come from registries these machines cannot
reach). It runs standalone, as a node without an API server runs: it
starts the static pods of a directory, here deploy/k8s/'s hello and Job
pods, through the CRI of a private containerd (in a network namespace the
test makes, CNI's bridge joining the pods) whose default runtime is urunc.

Standalone, the kubelet has no RuntimeClass to resolve a pod's
runtimeClassName, and v1.34.0 crashes on a pod that names one (a nil
*runtimeclass.Manager stored in an interface: a nil-pointer dereference
in NamespacesForPod); the static pods here therefore name none, and the
handler is containerd's default. The RuntimeClass itself is what
test_cri_urunc.py exercises. Marked test_all: the kubelet's first build
takes about 10 minutes on 2 cores."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from containerd_support import (
    K8S,
    Containerd,
    Cri,
    cri_plugin,
    install_urunc,
    leftovers,
    network_namespace,
    package,
    pause_archive,
    remove_pods,
)

from conftest import REPO, build

pytestmark = pytest.mark.test_all

KUBELET = Path("/var/lib/ukl-urunc/bin/kubelet")
DIGESTS = Path("/var/lib/ukl-urunc/sha256sums")
NODE = "ukl-node"


@dataclass
class Node:
    cri: Cri
    manifests: Path
    log: Path
    proc: subprocess.Popen[bytes]


def built_kubelet() -> Path:
    res = subprocess.run([REPO / "scripts" / "build-kubelet"], capture_output=True, text=True, timeout=3600)
    assert res.returncode == 0, res.stderr
    digest = hashlib.sha256(KUBELET.read_bytes()).hexdigest()
    assert f"{digest} kubelet-v1.34.0" in DIGESTS.read_text().splitlines()  # what the script built
    return KUBELET


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> Iterator[Node]:
    install_urunc("containerd, urunc and CNI")
    kubelet = built_kubelet()
    work = tmp_path_factory.mktemp("kubelet")
    netns = f"ukl-kubelet-{os.getpid()}"
    # urunc the default: a standalone kubelet resolves no RuntimeClass.
    # urunc hands containers that are not UKL images (the sandbox) to runc.
    ctd = Containerd(work / "containerd", netns=netns, cri=cri_plugin(work, "ukl-kubelet", "10.213.0.0/24", (
        '  [plugins."io.containerd.grpc.v1.cri".containerd]\n'
        '    default_runtime_name = "urunc"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]\n'
        '    runtime_type = "io.containerd.runc.v2"\n'
        '  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.urunc]\n'
        '    runtime_type = "io.containerd.urunc.v2"\n')))
    manifests = work / "manifests"
    manifests.mkdir()
    config = work / "kubelet.json"
    config.write_text(json.dumps({
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "staticPodPath": str(manifests), "containerRuntimeEndpoint": f"unix://{ctd.sock}",
        # a node of its own: no API server, no node registration
        "registerNode": False, "authentication": {"anonymous": {"enabled": True}, "webhook": {"enabled": False}},
        "authorization": {"mode": "AlwaysAllow"}, "port": 10299, "readOnlyPort": 0, "healthzPort": 0,
        # this host: cgroup v1 under cgroupfs, swap, and no QoS cgroups of
        # the kubelet's own beside the test's containerd
        "cgroupDriver": "cgroupfs", "failCgroupV1": False, "failSwapOn": False, "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [], "localStorageCapacityIsolation": False, "resolvConf": ""}))
    proc = None
    with network_namespace(netns):
        try:
            ctd.start()
            cri = Cri(ctd)
            assert ctd.ctr("image", "import", pause_archive(work)).returncode == 0
            log = work / "kubelet.log"
            with open(log, "wb") as fh:
                proc = subprocess.Popen(["nsenter", f"--net=/var/run/netns/{netns}", kubelet, "--config", config,
                                         "--root-dir", work / "root", "--hostname-override", NODE],
                                        stdout=fh, stderr=fh, start_new_session=True)
            yield Node(cri, manifests, log, proc)
        finally:
            if proc:
                proc.terminate()
                proc.wait(timeout=60)
            remove_pods(ctd)
            ctd.stop()
            unmount_under(work)
    assert not leftovers(ctd.root)


def unmount_under(top: Path) -> None:
    """Unmount what the kubelet mounted under TOP (its root directory, bound
    onto itself), deepest first, so that the test leaves no mounts behind."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    for m in sorted((m for m in mounts if m == str(top) or m.startswith(f"{top}/")), key=len, reverse=True):
        subprocess.run(["umount", "-l", m], check=False)


def static_pod(pod: dict, node: Node, image: str | None = None, args: list[str] | None = None) -> str:
    """Put POD (without its runtimeClassName, see above) in the node's
    static pod directory; the kubelet's name for it."""
    pod = json.loads(json.dumps(pod))
    del pod["spec"]["runtimeClassName"]
    (c,) = pod["spec"]["containers"]
    c.update({k: v for k, v in (("image", image), ("args", args)) if v is not None})
    (node.manifests / f"{pod['metadata']['name']}.yaml").write_text(yaml.safe_dump(pod))
    return f"{pod['metadata']['name']}-{NODE}"


def exited(node: Node, pod_name: str) -> dict:
    """The pod's one container once it has exited, as the CRI lists it."""
    deadline = time.monotonic() + 300
    while True:
        listed = json.loads(node.cri("ps", "-a", "--label", f"io.kubernetes.pod.name={pod_name}", "-o", "json"))
        cs = listed["containers"]
        if cs and all(c["state"] == "CONTAINER_EXITED" for c in cs):
            return {**cs[0], "count": len(cs), "status": node.cri.inspect(cs[0]["id"])}
        assert node.proc.poll() is None, node.log.read_text()[-5000:]
        assert time.monotonic() < deadline, (cs, node.log.read_text()[-5000:])
        time.sleep(2)


def remove(node: Node, name: str, pod_name: str) -> None:
    """Take the static pod away: the kubelet stops its sandbox."""
    (node.manifests / f"{name}.yaml").unlink()
    deadline = time.monotonic() + 120
    while node.cri("pods", "--name", pod_name, "--state", "ready", "-q").strip():
        assert time.monotonic() < deadline, node.log.read_text()[-5000:]
        time.sleep(2)


def test_the_kubelet_runs_the_hello_pod_in_ring0(node, outdir):
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "kubelet-hello")
    package(out, "localhost/ukl/hello:latest", node.cri.ctd)
    (pod,) = [d for d in yaml.safe_load_all((K8S / "hello.yaml").read_text()) if d]
    name = static_pod(pod, node)
    c = exited(node, name)
    logs = node.cri("logs", c["id"])
    assert "running in ring 0" in logs and "argv[1] = from" in logs and "argv[2] = a pod" in logs, logs[-3000:]
    assert c["status"]["exitCode"] == 0 and c["status"]["reason"] == "Completed", c["status"]
    # the CRI request was the kubelet's: its labels and the pod's limits
    assert c["labels"]["io.kubernetes.pod.namespace"] == "default" and c["metadata"]["attempt"] == 0
    remove(node, pod["metadata"]["name"], name)


def test_the_kubelet_sees_a_job_pod_fail_with_the_application_s_status(node, outdir):
    out = outdir / "kubelet-basics"
    build(REPO / "tests" / "apps" / "basics.c", "base", out)
    package(out, "localhost/ukl/basics:latest", node.cri.ctd)
    (job,) = [d for d in yaml.safe_load_all((K8S / "job.yaml").read_text()) if d]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": job["metadata"]["name"], "namespace": "default"},
           "spec": job["spec"]["template"]["spec"]}
    name = static_pod(pod, node, "localhost/ukl/basics:latest", ["exit", "3"])
    c = exited(node, name)
    assert c["status"]["exitCode"] == 3 and c["status"]["reason"] == "Error", c["status"]
    # restartPolicy: Never: the kubelet leaves it failed, one container
    time.sleep(10)
    assert exited(node, name)["count"] == 1
    remove(node, job["metadata"]["name"], name)
