"""UKL images as containers (issue 33): `ukl pkg --oci`, `ctr image import`
and `ctr run --runtime io.containerd.urunc.v2`, for real. The fixture runs
scripts/install-urunc (containerd, the CNI plugins, urunc built from its
pinned source, and on a host without usable KVM the TCG adapter) and
starts a private containerd (its own root, state and socket in pytest's
temporary directory) with the adapter first on its PATH, as the script
says. The container network is a pair of namespaces the test makes and
removes: CNI's ptp plugin joins them, redis-cli runs in one, the
container in the other."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from containerd_support import CNI_BIN, RUNTIME, Containerd, app_output, install_urunc, leftovers, package

from conftest import REPO, build, ukl


@pytest.fixture(scope="module")
def containerd(tmp_path_factory) -> Iterator[Containerd]:
    install_urunc("containerd and urunc")
    c = Containerd(tmp_path_factory.mktemp("containerd"))
    try:
        c.start()
        yield c
    finally:
        c.stop()
    assert not leftovers(c.root)


def test_hello_prints_from_ring0_in_a_container(containerd, outdir):
    out = build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "oci-hello")
    package(out, "localhost/ukl/hello:test", containerd)
    # ctr's arguments replace the image's entrypoint and command: /init first
    res = containerd.ctr("run", "--rm", "--runtime", RUNTIME, "--env", "GREETING=hi",
                         "localhost/ukl/hello:test", "oci-hello", "/init", "x", "y z", timeout=300)
    text = app_output(res.stdout)
    assert "running in ring 0" in text and "argv[1] = x" in text and "argv[2] = y z" in text, res.stdout[-3000:]
    assert "ukl-init: application exited with status 0" in text
    # urunc's Linux command line (its rdinit=, ip=, environment) reached init
    assert "rdinit=/init -- x 'y z'" in res.stdout and "GREETING=hi" in res.stdout
    assert res.returncode == 0, res.stdout[-3000:]


@pytest.mark.parametrize("case,status", [(("exit", "0"), 0), (("exit", "3"), 3), (("segv",), 139)],
                         ids=["exit0", "exit3", "segv"])
def test_the_application_s_status_is_the_container_s_and_nothing_is_left(containerd, outdir, case, status):
    out = outdir / "oci-basics"
    if not (out / "bzImage").is_file():
        build(REPO / "tests" / "apps" / "basics.c", "base", out)
    package(out, "localhost/ukl/basics:test", containerd)
    name = f"oci-status-{case[0]}{status}"
    res = containerd.ctr("run", "--rm", "--runtime", RUNTIME, "localhost/ukl/basics:test", name,
                         "/init", *case, timeout=300)
    text = app_output(res.stdout)
    # Linux's status (139 for SIGSEGV), as under `ukl run` and as a process
    # on Linux, reported by ukl-init on ttyS1, read by urunc
    # (deploy/urunc/patches/0003) and made the container's
    assert f"ukl-init: application exited with status {status}" in text, res.stdout[-3000:]
    assert res.returncode == status, res.stdout[-3000:]
    if case == ("segv",):
        assert "dereferencing NULL" in text
    assert "Kernel panic" not in res.stdout and "Oops" not in res.stdout
    assert containerd.ctr("container", "ls", "-q").stdout.strip() == ""
    assert not leftovers(containerd.root)


@contextmanager
def container_network(tag: str, work: Path) -> Iterator[tuple[str, str, str]]:
    """Two namespaces joined by CNI's ptp plugin, run in the first (the
    "host" side, where clients run): (client namespace, container
    namespace, the container's address). Both are removed on leaving."""
    client, ctr_ns = f"ukloci-{tag}-h{os.getpid()}", f"ukloci-{tag}-c{os.getpid()}"
    conf = json.dumps({"cniVersion": "1.0.0", "name": f"ukl-oci-{tag}", "type": "ptp", "ipMasq": False,
                       "ipam": {"type": "host-local", "subnet": "10.211.0.0/24",
                                "routes": [{"dst": "0.0.0.0/0"}], "dataDir": str(work / "ipam")}})
    env = dict(os.environ, CNI_CONTAINERID=tag, CNI_NETNS=f"/var/run/netns/{ctr_ns}", CNI_IFNAME="eth0",
               CNI_PATH=str(CNI_BIN))
    made: list[str] = []
    try:
        for ns in (client, ctr_ns):
            subprocess.run(["ip", "netns", "add", ns], check=True)
            made.append(ns)
        subprocess.run(["ip", "-n", client, "link", "set", "lo", "up"], check=True)
        res = subprocess.run(["ip", "netns", "exec", client, CNI_BIN / "ptp"], input=conf, capture_output=True,
                             text=True, env=dict(env, CNI_COMMAND="ADD"), check=True)
        addr = json.loads(res.stdout)["ips"][0]["address"].split("/")[0]
        yield client, ctr_ns, addr
    finally:
        if len(made) == 2:
            subprocess.run(["ip", "netns", "exec", client, CNI_BIN / "ptp"], input=conf, capture_output=True,
                           text=True, env=dict(env, CNI_COMMAND="DEL"))
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns])
        shutil.rmtree(work / "ipam", ignore_errors=True)


def test_redis_answers_through_the_container_network(containerd, outdir, tmp_path):
    for tool in ("redis-cli", "ip"):
        assert shutil.which(tool), f"{tool} is missing (scripts/install-host-deps installs it)"
    out = outdir / "oci-redis"
    # the kernel cut to Redis (issue 47: specialized Redis as PID 1 under urunc)
    res = ukl("build", "redis", "--config", "base", "--specialize", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    tar = package(out, "localhost/ukl/redis:test", containerd)
    cfg = json.loads(subprocess.run(["skopeo", "inspect", "--config", f"oci-archive:{tar}"], capture_output=True,
                                    text=True, check=True).stdout)["config"]
    assert cfg["ExposedPorts"] == {"6379/tcp": {}} and "--protected-mode" in cfg["Cmd"]
    # a server: the kernel starts it as PID 1 and configures eth0 from urunc's ip= (issue 47)
    assert cfg["Entrypoint"] == ["/ukl/redis-server"]
    log = tmp_path / "redis.log"
    with container_network("redis", tmp_path) as (client, ctr_ns, addr):
        with open(log, "w") as fh:
            run = subprocess.Popen(["ctr", "--address", str(containerd.sock), "run", "--rm", "--runtime", RUNTIME,
                                    "--with-ns", f"network:/var/run/netns/{ctr_ns}", "localhost/ukl/redis:test",
                                    "oci-redis"], stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            # a SYN the booting guest does not answer yet waits: each try is bounded
            cli = ["ip", "netns", "exec", client, "timeout", "3", "redis-cli", "-h", addr]
            deadline = time.monotonic() + 180
            while subprocess.run([*cli, "ping"], capture_output=True, text=True, timeout=30).stdout.strip() != "PONG":
                assert run.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(1)
            assert subprocess.run([*cli, "set", "k", "from-the-client"], capture_output=True, text=True,
                                  timeout=30).stdout.strip() == "OK"
            assert subprocess.run([*cli, "get", "k"], capture_output=True, text=True,
                                  timeout=30).stdout.strip() == "from-the-client"
            links = subprocess.run(["ip", "-n", ctr_ns, "-br", "link"], capture_output=True, text=True).stdout
            assert "tap0_urunc" in links, links  # urunc's tap device, in the test's namespace only
        finally:
            containerd.ctr("task", "kill", "-s", "SIGKILL", "oci-redis")
            run.wait(timeout=120)
    text = log.read_text()
    assert f"ip={addr}::" in text and "Ready to accept connections" in text, text[-3000:]
    assert "ukl-init" not in text and "IP-Config: Complete" in text and "pid=1," in text, text[-3000:]
    assert containerd.ctr("container", "ls", "-q").stdout.strip() == ""
    assert not leftovers(containerd.root)
