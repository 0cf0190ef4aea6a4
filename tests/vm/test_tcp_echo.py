"""examples/tcp-echo, linked into the kernel, reached from the host through
`ukl run --forward` (QEMU user networking, host side bound to 127.0.0.1)."""

from __future__ import annotations

import os
import random
import socket
import subprocess
import time
from contextlib import contextmanager

import pytest

from conftest import BASIC_CONFIGS, REPO, UKL, assert_clean, build

SRC = REPO / "examples" / "tcp-echo" / "tcp-echo.c"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def connect(port: int, deadline: float) -> socket.socket:
    while True:
        try:
            # A long timeout: a connection the guest accepted must not be
            # retried (the server counts its clients), however slow it is.
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            # QEMU accepts on the host side before the guest does; a
            # round trip proves the guest server is there.
            s.sendall(b"ping")
            got = b""
            while len(got) < 4:
                chunk = s.recv(4 - len(got))
                if not chunk:
                    break
                got += chunk
            if got == b"ping":
                return s
            s.close()
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"no echo on 127.0.0.1:{port}")
        time.sleep(0.5)


@contextmanager
def booted(*args: str):
    """`ukl run ARGS` in the background; the VM is killed if the test fails."""
    proc = subprocess.Popen([str(UKL), "run", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, stdin=subprocess.DEVNULL, env=dict(os.environ))
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.mark.parametrize("config,how", [*((c, ()) for c in BASIC_CONFIGS),
                                        ("base", ("--machine", "microvm", "--direct"))],
                         ids=[*BASIC_CONFIGS, "base-microvm-direct"])
def test_echo_from_the_host(outdir, config, how):
    """Under -M microvm the network card is a virtio-mmio device."""
    out = build(SRC, config, outdir / f"tcp-echo-{config}")
    port = free_port()
    clients = 3
    with booted(str(out), *how, "--timeout", "240", "--forward", f"{port}:7777", "--", "7777",
                str(clients + 1)) as proc:
        first = connect(port, time.monotonic() + 180)
        first.close()
        rnd = random.Random(1)
        for n in range(clients):
            payload = bytes(rnd.getrandbits(8) for _ in range(200_000 + n))
            with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                got = b""
                while len(got) < len(payload):
                    chunk = s.recv(65536)
                    if not chunk:
                        break
                    got += chunk
            if got != payload:
                proc.kill()
                output, _ = proc.communicate()
                where = "a prefix" if payload.startswith(got) else "not a prefix"
                pytest.fail(f"client {n}: {len(got)} of {len(payload)} bytes came back ({where} of what was sent); "
                            f"the server said:\n{output[-3000:]}")
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    assert "tcp-echo: listening on port 7777" in output
    assert f"served {clients + 1} clients" in output
    assert_clean(out / "console.log")


def test_echo_in_a_userspace_image_while_a_shell_inspects_it(outdir):
    """The ring-0 server, started from a shell, serves the host while the
    shell sees its listening socket (netstat, /proc/net/tcp)."""
    out = build(SRC, "base", outdir / "tcp-echo-userspace", "--userspace")
    port = free_port()
    script = ("$UKL_APP 7777 2 & pid=$!; sleep 2; netstat -tln | grep ':7777 '; "
              "grep -c ':1E61 00000000:0000 0A' /proc/net/tcp; "
              "ls -l /proc/$pid/fd | grep -c socket; wait $pid; echo server=$?")
    with booted(str(out), "--timeout", "240", "--forward", f"{port}:7777", "--sh", script) as proc:
        first = connect(port, time.monotonic() + 180)
        first.close()
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(b"hello ring 0\n")
            assert s.recv(100) == b"hello ring 0\n"
        output, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0, output
    lines = output.splitlines()
    assert any("0.0.0.0:7777" in l and "LISTEN" in l for l in lines), output
    assert "server=0" in output and "served 2 clients" in output
    assert_clean(out / "console.log")
