"""Kubernetes' own path (issue 46, item 1): the CRI calls the kubelet makes,
through crictl, to a containerd whose CRI plugin has the runc (default) and
urunc runtimes as scripts/containerd-runtimes declares them. The Pods are
deploy/k8s/'s manifests, turned into CRI requests here as the kubelet
turns them, with the RuntimeClass's handler. containerd runs in a network
namespace the test makes, where CNI's bridge joins the pods; a client
there reaches Redis on its pod's IP. The pod sandbox's image (registry.k8s.io
/pause cannot be pulled here) is tests/apps/pause.c, built and imported.
Afterwards nothing is left: containers, pods, VMs, tap devices, mounts,
network namespaces, snapshots of containers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from containerd_support import (
    CRICTL,
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

from conftest import REPO, build, ukl

MiB = 1 << 20
# The CRI's enumerations, as numbers (crictl reads its JSON files with Go's
# encoding/json): runtime.v1 Protocol and NamespaceMode
PROTOCOL = {"TCP": 0, "UDP": 1, "SCTP": 2}
POD, CONTAINER = 0, 1


def manifests(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def handler() -> str:
    (rc,) = [d for d in manifests("runtimeclass.yaml") if d["kind"] == "RuntimeClass"]
    return rc["handler"]


def quantity(q: str) -> int:
    units = {"Ki": 1 << 10, "Mi": MiB, "Gi": 1 << 30}
    for u, f in units.items():
        if q.endswith(u):
            return int(q[:-2]) * f
    return int(q)


def millicores(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


def pod_requests(pod: dict, logs: Path) -> tuple[dict, list[dict]]:
    """The kubelet's RunPodSandbox and CreateContainer requests for POD
    (the fields that apply here; protobuf JSON names)."""
    meta, spec = pod["metadata"], pod["spec"]
    uid = str(uuid.uuid4())
    # the labels the kubelet adds, by which crictl and the kubelet find them
    kube = {"io.kubernetes.pod.name": meta["name"], "io.kubernetes.pod.namespace": "default",
            "io.kubernetes.pod.uid": uid}
    sandbox = {"metadata": {"name": meta["name"], "namespace": "default", "uid": uid, "attempt": 0},
               "hostname": meta["name"], "log_directory": str(logs), "labels": {**meta.get("labels", {}), **kube},
               "port_mappings": [{"protocol": PROTOCOL[p.get("protocol", "TCP")], "container_port": p["containerPort"]}
                                 for c in spec["containers"] for p in c.get("ports", [])],
               "linux": {"security_context": {"namespace_options": {"network": POD, "pid": CONTAINER}}}}
    containers = []
    for c in spec["containers"]:
        assert c.get("imagePullPolicy") == "Never"  # no registry: the image is imported
        limits = c.get("resources", {}).get("limits", {})
        resources = {"memory_limit_in_bytes": quantity(limits["memory"])} if "memory" in limits else {}
        if "cpu" in limits:  # as the kubelet sets a CPU limit: a CFS quota per 100 ms period
            resources |= {"cpu_period": 100000, "cpu_quota": millicores(limits["cpu"]) * 100}
        containers.append({
            "metadata": {"name": c["name"], "attempt": 0}, "image": {"image": c["image"]},
            "labels": {**kube, "io.kubernetes.container.name": c["name"]},
            "command": c.get("command", []), "args": c.get("args", []),
            "envs": [{"key": e["name"], "value": e["value"]} for e in c.get("env", [])],
            "log_path": f"{c['name']}.log",
            "linux": {"resources": resources}})
    return sandbox, containers


@pytest.fixture(scope="module")
def cri(tmp_path_factory) -> Iterator[Cri]:
    out = install_urunc("containerd, urunc and CNI")
    assert CRICTL.is_file(), out
    work = tmp_path_factory.mktemp("cri")
    ctd = Containerd(work / "containerd", netns=f"ukl-cri-{os.getpid()}",
                     cri=cri_plugin(work, "ukl-cri", "10.212.0.0/24"))
    # The configuration the installer's old version wrote: urunc only. The
    # CRI plugin does not load with it; containerd-runtimes adds runc.
    conf = work / "config.toml"
    conf.write_text(ctd.config() + '[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.urunc]\n'
                    '  runtime_type = "io.containerd.urunc.v2"\n')
    out = subprocess.run([REPO / "scripts" / "containerd-runtimes", conf], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "changed" and "the default runtime, runc" in out.stderr, out
    again = subprocess.run([REPO / "scripts" / "containerd-runtimes", conf], capture_output=True, text=True,
                           check=True)
    assert again.stdout == "", again  # idempotent
    with network_namespace(ctd.netns or ""):
        try:
            ctd.start(conf)
            c = Cri(ctd)
            info = json.loads(c("info"))
            runtimes = info["config"]["containerd"]["runtimes"]
            assert {"runc", handler()} <= set(runtimes), runtimes
            assert ctd.ctr("image", "import", pause_archive(work)).returncode == 0
            yield c
        finally:
            remove_pods(ctd)
            ctd.stop()
    assert not leftovers(ctd.root)


def nothing_left(c: Cri) -> None:
    assert c("pods", "-q").strip() == "" and c("ps", "-a", "-q").strip() == ""
    assert not leftovers(c.ctd.root)
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith("cni-")]
    snaps = c.ctd.ctr("snapshots", "ls").stdout.splitlines()[1:]
    assert all(s.split()[-1] == "Committed" for s in snaps), snaps  # the images' only


def run_pod(c: Cri, name: str | dict, work: Path) -> tuple[str, str, dict]:
    """Run the Pod of manifest NAME, or the pod NAME, as the kubelet would."""
    (pod,) = [d for d in manifests(name) if d["kind"] == "Pod"] if isinstance(name, str) else [name]
    assert pod["spec"]["runtimeClassName"] == "urunc" and pod["spec"].get("enableServiceLinks") is False
    logs = work / f"logs-{pod['metadata']['name']}"
    sandbox, (container,) = pod_requests(pod, logs)
    (work / "pod.json").write_text(json.dumps(sandbox))
    (work / "container.json").write_text(json.dumps(container))
    pid = c("runp", "--runtime", handler(), work / "pod.json").strip()
    cid = c("create", pid, work / "container.json", work / "pod.json").strip()
    c("start", cid)
    return pid, cid, container


def test_hello_runs_as_a_pod_and_ends(cri, outdir, tmp_path):
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "cri-hello")
    package(out, "localhost/ukl/hello:latest", cri.ctd)
    pid, cid, container = run_pod(cri, "hello.yaml", tmp_path)
    deadline = time.monotonic() + 300
    while (st := cri.inspect(cid))["state"] != "CONTAINER_EXITED":
        assert time.monotonic() < deadline, st
        time.sleep(2)
    logs = cri("logs", cid)
    text = logs[logs.index("ukl-init: starting"):] if "ukl-init: starting" in logs else logs
    assert "running in ring 0" in text and "argv[1] = from" in text and "argv[2] = a pod" in text, logs[-3000:]
    assert "ukl-init: application exited with status 0" in text
    assert st["exitCode"] == 0, st
    # the pod's memory limit is the VM's memory, and not more (urunc counted
    # decimal MB: -m 268M for 256Mi, until deploy/urunc/patches/0001)
    limit = container["linux"]["resources"]["memory_limit_in_bytes"]
    mem = re.search(r"^Memory: \d+K/(\d+)K available", logs, re.M)
    assert mem and limit - 16 * MiB < int(mem.group(1)) * 1024 <= limit, (limit, mem and mem.group(0))
    # and its CPU limit the VM's vCPUs (urunc passed no -smp until
    # deploy/urunc/patches/0004: one vCPU whatever the limit)
    cpus = -(-container["linux"]["resources"]["cpu_quota"] // container["linux"]["resources"]["cpu_period"])
    smp = re.search(r"smp: Brought up \d+ nodes?, (\d+) CPUs?", logs)
    assert cpus == 2 and smp and int(smp.group(1)) == cpus, smp and smp.group(0)
    cri("stopp", pid)
    cri("rmp", pid)
    nothing_left(cri)


def job_pod(image: str | None, args: list[str] | None) -> dict:
    """deploy/k8s/job.yaml's pod, as the Job controller makes it, with
    IMAGE and ARGS instead of the manifest's where given."""
    (job,) = manifests("job.yaml")
    tmpl = job["spec"]["template"]
    pod = {"kind": "Pod", "metadata": {"name": f"{job['metadata']['name']}-{uuid.uuid4().hex[:5]}",
                                       "labels": {**tmpl["metadata"]["labels"], "job-name": job["metadata"]["name"]}},
           "spec": tmpl["spec"]}
    (c,) = pod["spec"]["containers"]
    c.update({k: v for k, v in (("image", image), ("args", args)) if v is not None})
    return pod


@pytest.mark.parametrize("app,args,status", [("hello", None, 0), ("basics", ["exit", "3"], 3),
                                             ("basics", ["segv"], 139)], ids=["exit0", "exit3", "segv"])
def test_a_job_s_container_ends_with_the_application_s_status(cri, outdir, tmp_path, app, args, status):
    src = REPO / "examples" / "hello" / "hello.c" if app == "hello" else REPO / "tests" / "apps" / "basics.c"
    out = outdir / f"cri-{app}"
    if not (out / "bzImage").is_file():
        build(src, "base", out)
    package(out, f"localhost/ukl/{app}:latest", cri.ctd)
    pid, cid, _ = run_pod(cri, job_pod(None if app == "hello" else f"localhost/ukl/{app}:latest", args), tmp_path)
    deadline = time.monotonic() + 300
    while (st := cri.inspect(cid))["state"] != "CONTAINER_EXITED":
        assert time.monotonic() < deadline, st
        time.sleep(2)
    logs = cri("logs", cid)
    # what the Job controller reads: the container's exit code, the
    # application's status (Linux's 139 for SIGSEGV) through urunc
    # (deploy/urunc/patches/0003)
    assert f"ukl-init: application exited with status {status}" in logs, logs[-3000:]
    assert st["exitCode"] == status, st
    assert st["reason"] == ("Completed" if status == 0 else "Error"), st
    cri("stopp", pid)
    cri("rmp", pid)
    nothing_left(cri)


def test_a_pod_with_40_environment_variables_sees_them_all(cri, outdir, tmp_path):
    # urunc passes each as a word of the kernel command line, which the
    # kernel hands to init as its environment: 32 at most in stock Linux
    # (it panics beyond), 128 with CONFIG_UNIKERNEL_LINUX (kernel patch 0004)
    out = outdir / "cri-basics"
    if not (out / "bzImage").is_file():
        build(REPO / "tests" / "apps" / "basics.c", "base", out)
    package(out, "localhost/ukl/basics:latest", cri.ctd)
    pod = job_pod("localhost/ukl/basics:latest", ["env"])
    want = {f"UKL_VAR_{i:02}": f"value-{i}" for i in range(40)}
    pod["spec"]["containers"][0]["env"] = [{"name": k, "value": v} for k, v in want.items()]
    pid, cid, _ = run_pod(cri, pod, tmp_path)
    deadline = time.monotonic() + 300
    while (st := cri.inspect(cid))["state"] != "CONTAINER_EXITED":
        assert time.monotonic() < deadline, st
        time.sleep(2)
    logs = cri("logs", cid)
    seen = dict(m.groups() for m in re.finditer(r"^env: (UKL_VAR_\d+)=(\S*)\r?$", logs, re.M))
    assert seen == want, logs[-3000:]
    assert "Too many boot env vars" not in logs and st["exitCode"] == 0, st
    cri("stopp", pid)
    cri("rmp", pid)
    nothing_left(cri)


def test_redis_pod_answers_on_its_ip(cri, outdir, tmp_path):
    assert shutil.which("redis-cli"), "redis-cli is missing (scripts/install-host-deps installs it)"
    out = outdir / "cri-redis"
    res = ukl("build", "redis", "--config", "base", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    package(out, "localhost/ukl/redis:latest", cri.ctd)
    pid, cid, _ = run_pod(cri, "redis.yaml", tmp_path)
    try:
        ip = json.loads(cri("inspectp", pid))["status"]["network"]["ip"]
        assert ip.startswith("10.212.0."), ip
        cli = ["ip", "netns", "exec", cri.ctd.netns, "timeout", "3", "redis-cli", "-h", ip]
        # readiness as the kubelet's TCP probe sees it: a connection, then PONG
        deadline = time.monotonic() + 240
        while subprocess.run([*cli, "ping"], capture_output=True, text=True, timeout=30).stdout.strip() != "PONG":
            assert cri.inspect(cid)["state"] == "CONTAINER_RUNNING", cri("logs", cid)[-3000:]
            assert time.monotonic() < deadline, cri("logs", cid)[-3000:]
            time.sleep(1)
        assert subprocess.run([*cli, "set", "k", "through-the-cri"], capture_output=True, text=True,
                              timeout=30).stdout.strip() == "OK"
        assert subprocess.run([*cli, "get", "k"], capture_output=True, text=True,
                              timeout=30).stdout.strip() == "through-the-cri"
        assert "Ready to accept connections" in cri("logs", cid)
    finally:
        cri("stop", "--timeout", "10", cid, check=False)
        cri("stopp", pid, check=False)
        cri("rmp", "-f", pid, check=False)
    nothing_left(cri)
