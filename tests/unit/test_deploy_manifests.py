"""docs/deploy.md's Kubernetes manifests (deploy/k8s/) parse, and say what
the page says: a RuntimeClass whose handler is the urunc runtime that
scripts/install-urunc configures, and a Pod running the UKL Redis image
under it, with its port and a Service. No cluster is run here."""

from __future__ import annotations

import re

import yaml

from conftest import REPO

K8S = REPO / "deploy" / "k8s"


def docs(name: str) -> list[dict]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d is not None]


def test_the_runtimeclass_names_containerds_urunc_runtime():
    (rc,) = docs("runtimeclass.yaml")
    assert rc["apiVersion"] == "node.k8s.io/v1" and rc["kind"] == "RuntimeClass"
    assert rc["metadata"]["name"] == "urunc" and rc["handler"] == "urunc"
    # the handler is the runtime's name in containerd's CRI configuration
    script = (REPO / "scripts" / "containerd-runtimes").read_text()
    assert re.search(r'\[plugins\."io\.containerd\.grpc\.v1\.cri"\]?\.containerd\.runtimes\.urunc\]', script)
    assert 'runtime_type = "io.containerd.urunc.v2"' in script
    # and the default runtime beside it, without which the CRI plugin does not load
    assert 'containerd.runtimes.runc]\n  runtime_type = "io.containerd.runc.v2"' in script


def test_the_pod_runs_the_ukl_redis_image_under_urunc():
    pod, svc = docs("redis.yaml")
    assert pod["apiVersion"] == "v1" and pod["kind"] == "Pod"
    spec = pod["spec"]
    assert spec["runtimeClassName"] == docs("runtimeclass.yaml")[0]["metadata"]["name"]
    (c,) = spec["containers"]
    # the tag docs/deploy.md packages it with; imported on the node, not pulled
    assert c["image"] == "localhost/ukl/redis:latest" and c["imagePullPolicy"] == "Never"
    assert c["ports"] == [{"containerPort": 6379, "protocol": "TCP"}]
    assert "command" not in c and "args" not in c  # the image's /init and Redis's arguments apply
    assert re.fullmatch(r"\d+Mi", c["resources"]["limits"]["memory"])
    assert svc["kind"] == "Service" and svc["spec"]["selector"] == pod["metadata"]["labels"]
    assert svc["spec"]["ports"][0]["targetPort"] == 6379
    assert spec["enableServiceLinks"] is False  # urunc passes each variable as a kernel word


def test_the_hello_pod_runs_once_with_its_arguments():
    (pod,) = docs("hello.yaml")
    spec = pod["spec"]
    assert spec["runtimeClassName"] == "urunc" and spec["restartPolicy"] == "Never"
    assert spec["enableServiceLinks"] is False
    (c,) = spec["containers"]
    assert c["image"] == "localhost/ukl/hello:latest" and c["imagePullPolicy"] == "Never" and c["args"]


def test_deploy_md_shows_the_way_from_ukl_pkg_to_ctr_run_and_kubectl():
    text = (REPO / "docs" / "deploy.md").read_text()
    for want in ("./ukl pkg out/redis --oci redis.tar --tag localhost/ukl/redis:latest",
                 "ctr image import", "ctr run --rm --runtime io.containerd.urunc.v2",
                 "scripts/install-urunc", "kubectl apply -f deploy/k8s/runtimeclass.yaml",
                 "kubectl apply -f deploy/k8s/redis.yaml", "ctr -n k8s.io image import redis.tar"):
        assert want in text, want


def test_the_job_runs_its_pod_once_and_fails_with_it():
    (job,) = docs("job.yaml")
    assert job["apiVersion"] == "batch/v1" and job["kind"] == "Job" and job["spec"]["backoffLimit"] == 0
    spec = job["spec"]["template"]["spec"]
    assert spec["runtimeClassName"] == "urunc" and spec["restartPolicy"] == "Never"
    assert spec["enableServiceLinks"] is False
    (c,) = spec["containers"]
    assert c["image"] == "localhost/ukl/hello:latest" and c["imagePullPolicy"] == "Never"
