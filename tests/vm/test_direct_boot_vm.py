"""`ukl run --machine microvm` and `--direct`: the same application, its
output and exit status, through QEMU's microvm (no PCI) and through the
kernel's PVH entry (no firmware under microvm, no decompression)."""

from __future__ import annotations

import pytest

from conftest import REPO, assert_clean, build, ukl


@pytest.fixture(scope="module")
def hello_base(outdir):
    return build(REPO / "examples" / "hello" / "hello.c", "base", outdir / "hello-direct")


@pytest.mark.parametrize("how", [["--machine", "microvm"], ["--machine", "microvm", "--direct"],
                                 ["--direct"]])
def test_hello_boots_each_way(hello_base, how):
    res = ukl("run", hello_base, *how, "--", "a", "b")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Hello from hello" in res.stdout and "running in ring 0" in res.stdout
    assert "argv[2] = b" in res.stdout
    assert_clean(hello_base / "console.log")
    cmd = (hello_base / "console.cmd").read_text()
    assert ("-M microvm" in cmd) == ("microvm" in how)
    assert ("/vmlinux " in cmd) == ("--direct" in how)


@pytest.mark.parametrize("args,status", [(["segv"], 139), (["abort"], 134), (["sleep", "1"], 0)])
def test_faults_and_timers_under_microvm(outdir, args, status):
    """A sleep ends (the guest has a timer interrupt) under --icount, where
    idle time passes only by timer deadlines."""
    out = build(REPO / "tests" / "apps" / "basics.c", "base", outdir / "basics-direct")
    res = ukl("run", out, "--machine", "microvm", "--direct", "--icount", "--timeout", "120", "--", *args)
    assert res.returncode == status, res.stdout


def test_microvm_refuses_remote_calls(hello_base, tmp_path):
    res = ukl("run", hello_base, "--machine", "microvm", "--remote", tmp_path)
    assert res.returncode != 0 and "ivshmem" in res.stdout and "Traceback" not in res.stdout
