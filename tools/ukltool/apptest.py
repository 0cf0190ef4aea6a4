"""`ukl apptest NAME`: an application's own test suite, run on the host in
its source tree against the application running in the guest (a
forwarded port), as Redis's `./runtest --host H --port P` does. What runs
is the [tests] section of the recipe (apps/NAME/recipe.toml): the command,
the units CI runs (`--all`: the whole suite), and how the suite reports
each test."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ukltool import image, kernel, logscan, recipes, ui
from ukltool.errors import UklError
from ukltool.paths import REPO, cache_dir

ANSI = re.compile(r"\x1b\[[0-9;]*m")
READY_TIMEOUT = 600.0


@dataclass
class Outcome:
    config: str
    counts: dict[str, int] = field(default_factory=dict)   # verdict -> number of tests
    failed: list[str] = field(default_factory=list)        # the failing tests' lines
    log: Path = Path()
    finished: bool = False                                  # the suite reached its end


def count(lines: list[str], verdicts: dict[str, str]) -> tuple[dict[str, int], list[str]]:
    """Tests per verdict (each verdict a regular expression on a line
    without colour codes), and the lines of the failed ones (verdict err)."""
    pats = {v: re.compile(p) for v, p in verdicts.items()}
    counts = dict.fromkeys(verdicts, 0)
    failed = []
    for raw in lines:
        line = ANSI.sub("", raw)
        for v, pat in pats.items():
            if pat.search(line):
                counts[v] += 1
                if v == "err":
                    failed.append(line.strip())
                break
    return counts, failed


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, probe: str, vm_proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Until the server in the guest answers PROBE on the forwarded port
    (QEMU accepts the host's connection before the guest has a server)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if vm_proc.poll() is not None:
            raise UklError(f"the VM stopped before the server was ready (status {vm_proc.returncode})",
                           "see its console log")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.settimeout(5)
                s.sendall(probe.encode())
                if s.recv(64):
                    return
        except OSError:
            pass
        time.sleep(1)
    raise UklError(f"the server did not answer on port {port} within {timeout:.0f}s", "see the console log")


def _suite(cmd: list[str], cwd: Path, log: Path, on_line: Callable[[str], None], timeout: float) -> int:
    """Run the suite (its own process group, killed after TIMEOUT seconds),
    all output to LOG; its exit status (negative: killed)."""
    with open(log, "w") as fh:
        p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             text=True, errors="replace", start_new_session=True)
        timer = threading.Timer(timeout, lambda: os.killpg(p.pid, signal.SIGKILL))
        timer.start()
        try:
            assert p.stdout is not None
            for line in p.stdout:
                fh.write(line)
                on_line(line.rstrip("\n"))
            return p.wait()
        finally:
            timer.cancel()
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def run(name: str, config: str, run_all: bool, timeout: float, units: list[str] | None = None) -> Outcome:
    r = recipes.load(name)
    t = r.tests
    if t is None:
        raise UklError(f"apps/{name}/recipe.toml has no [tests] section",
                       "apptest suites: " + ", ".join(n for n in recipes.names() if recipes.load(n).tests))
    kernel.fragments(config)
    out = cache_dir() / "apptest" / f"{name}-{config}"
    image.build(recipes.image_spec(r, config, out))
    tree = recipes.fetch(r)
    port = free_port()
    log = out / "suite.log"
    outcome = Outcome(config, log=log)
    cmd = [a.replace("{port}", str(port)) for a in t.command]
    if not run_all:
        for unit in units or t.units:
            cmd += [t.unit_option, unit]
    vm_cmd = [str(REPO / "ukl"), "run", str(out), "--forward", f"{port}:{t.port}", "--timeout", str(timeout + 600),
              "--", *t.server_args]
    with open(out / "vm.log", "w") as vm_log:
        vm_proc = subprocess.Popen(vm_cmd, stdout=vm_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with ui.step(f"starting {name} under '{config}' (port {port})"):
            wait_ready(port, t.probe, vm_proc, READY_TIMEOUT)
        with ui.step(f"{name}'s own tests against the server under '{config}'; log: {log}") as st:
            lines: list[str] = []

            def on_line(line: str) -> None:
                lines.append(line)
                clean = ANSI.sub("", line)
                if clean.startswith("["):
                    st.update(clean[:70])
            rc = _suite(cmd, tree, log, on_line, timeout)
        outcome.counts, outcome.failed = count(lines, t.verdicts)
        # a suite with failures exits non-zero: finished is having reached its end
        outcome.finished = rc >= 0 and any(re.search(t.finished, ANSI.sub("", x)) for x in lines)
    finally:
        if vm_proc.poll() is None:
            os.killpg(vm_proc.pid, signal.SIGTERM)
        vm_proc.wait()
    bad = logscan.failure_lines((out / "console.log").read_text(errors="replace"))
    if bad:
        raise UklError(f"the kernel reported failures while {name}'s tests ran: {bad[:3]}",
                       f"see {out / 'console.log'}")
    return outcome


def markdown(name: str, outcomes: list[Outcome], run_all: bool, units: list[str], path: Path) -> str:
    r = recipes.load(name)
    assert r.tests is not None
    ran = "the whole suite" if run_all else "the units " + ", ".join(f"`{u}`" for u in (units or r.tests.units))
    verdicts = list(outcomes[0].counts) if outcomes else []
    cmd = " ".join(r.tests.command)
    lines = [f"# {name}'s own tests against the application", "",
             f"Generated by `./ukl apptest {name} --configs {','.join(o.config for o in outcomes)}"
             + (" --all" if run_all else "") + "".join(f" --unit {u}" for u in units)
             + f" --markdown {path}`; do not edit by hand.", "",
             f"`{cmd}` ({ran}), run on the host in the unmodified source tree against "
             f"{r.build.program} in the guest (its port forwarded by QEMU), started with "
             f"`{' '.join(r.tests.server_args)}`.", "",
             "| configuration | " + " | ".join(verdicts) + " | finished |", "|---|" + "---|" * (len(verdicts) + 1)]
    for o in outcomes:
        lines.append(f"| {o.config} | " + " | ".join(str(o.counts[v]) for v in verdicts)
                     + f" | {'yes' if o.finished else 'no'} |")
    failed = [f"* {o.config}: {line}" for o in outcomes for line in o.failed]
    if failed:
        lines += ["", "Failed tests:", "", *failed]
    return "\n".join(lines) + "\n"
