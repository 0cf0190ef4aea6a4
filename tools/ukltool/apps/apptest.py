"""`ukl apptest NAME`: an application's own test suite, run on the host in
its source tree against the application running in the guest (on a tap
device in a private network namespace where the host allows one, else
behind a port QEMU's user network forwards), as Redis's `./runtest --host
H --port P` does. What runs
is the [tests] section of the recipe (apps/NAME/recipe.toml): the command,
the units CI runs (`--all`: the whole suite), and how the suite reports
each test."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.apps import recipes
from ukltool.build import image
from ukltool.linux import kernel
from ukltool.run import logscan, netns, vm
from ukltool.util import lock, reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NETWORKS = {"tap": "reached through a tap device in a private network namespace",
            "user": "its port forwarded by QEMU's user network"}
READY_TIMEOUT = 600.0


@dataclass
class Outcome:
    config: str
    counts: dict[str, int] = field(default_factory=dict)   # verdict -> number of tests
    failed: list[str] = field(default_factory=list)        # the failing tests' lines
    log: Path = Path()
    finished: bool = False                                  # the suite reached its end
    network: str = ""                                       # tap (private namespace) or user (forwarded port)
    pid1: bool = False                                      # the kernel started the server as PID 1 (no init)


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


def prepare(name: str, cmd: list[str], tree: Path, log: Path) -> Path:
    """What the whole suite needs built on the host first (Redis: the
    redis-cli and redis-benchmark its integration tests run), in a copy of
    the source tree kept for it: host objects must never reach the tree the
    application's own builds mirror. The copy, where the suite then runs."""
    host_tree = cache_dir() / "apptest" / f"{tree.name}-host-tree"  # per source version
    with lock.held(f"apptest-tree-{name}", f"{name}'s host tools"), \
            ui.step(f"building what {name}'s whole suite runs on the host; log: {log}"):
        if not host_tree.is_dir():
            partial = host_tree.with_name(host_tree.name + ".partial")
            shutil.rmtree(partial, ignore_errors=True)
            shutil.copytree(tree, partial, symlinks=True)
            partial.rename(host_tree)
        res = subprocess.run(cmd, cwd=host_tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             errors="replace", stdin=subprocess.DEVNULL)
        log.write_text(res.stdout)
    if res.returncode != 0:
        raise UklError(f"{' '.join(cmd[:3])} in {host_tree} failed (exit {res.returncode})", f"see {log}")
    return host_tree


def _network(stack: contextlib.ExitStack, network: str) -> netns.Netns | None:
    """A private tap network (entered on STACK) or None for QEMU's user
    network; with auto, a host where making one fails falls back."""
    if not use_tap(network):
        return None
    try:
        return stack.enter_context(netns.private_network())
    except UklError as e:
        if network == "tap":
            raise
        ui.warn(f"no private tap network ({e.message}); using QEMU's user network")
        return None


def use_tap(network: str) -> bool:
    """NETWORK auto: a private tap network where one can be made (root,
    /dev/net/tun), else QEMU's user network with a forwarded port."""
    if network == "tap":
        why = netns.unavailable()
        if why:
            raise UklError(why, "use --network user (QEMU's user network, a forwarded port)")
        return True
    return network == "auto" and netns.unavailable() is None


def check_config(config: str, pid1: bool) -> None:
    """CONFIG is a configuration (or profile) apptest can run, with PID1 a UKL one."""
    kernel.fragments(config)
    if pid1 and not kernel.is_ukl(config):
        raise UklError(f"--pid1 with '{config}': the application is PID 1 only under UKL configurations",
                       "leave out --pid1 for linux configurations, or run them apart")


def run(name: str, config: str, run_all: bool, timeout: float, units: list[str] | None = None,
        network: str = "auto", pid1: bool = False) -> Outcome:
    """PID1: the kernel starts the server as PID 1 and configures its
    network (`ukl run --pid1`), instead of init."""
    r = recipes.load(name)
    t = r.tests
    if t is None:
        raise UklError(f"apps/{name}/recipe.toml has no [tests] section",
                       "apptest suites: " + ", ".join(n for n in recipes.names() if recipes.load(n).tests))
    check_config(config, pid1)
    out = cache_dir() / "apptest" / f"{name}-{config}"
    outcome = Outcome(config, log=out / "suite.log", pid1=pid1)
    # one run at a time per image directory: its image, logs and console
    with lock.held(f"apptest-{name}-{config}", f"{name}'s tests under '{config}'"):
        image.build(recipes.image_spec(r, config, out))
        tree = recipes.fetch(r)
        if run_all and t.prepare:
            tree = prepare(name, t.prepare, tree, out / "prepare.log")
        with contextlib.ExitStack() as stack:
            ns = _network(stack, network)
            outcome.network = "tap" if ns else "user"
            _run_suite(name, t, out, tree, ns, run_all, units, timeout, outcome)
        bad = logscan.failure_lines((out / "console.log").read_text(errors="replace"))
    if bad:
        raise UklError(f"the kernel reported failures while {name}'s tests ran: {bad[:3]}",
                       f"see {out / 'console.log'}")
    return outcome


def _run_suite(name: str, t: recipes.Tests, out: Path, tree: Path, ns: netns.Netns | None, run_all: bool,
               units: list[str] | None, timeout: float, outcome: Outcome) -> None:
    """Start the server (on NS's tap device, else behind a forwarded
    port), run the suite against it, stop it."""
    vm_cmd = [str(REPO / "ukl"), "run", str(out), "--timeout", str(timeout + 600)]
    if outcome.pid1:
        vm_cmd.append("--pid1")
    if ns:
        host, port = netns.GUEST_IP, t.port
        vm_cmd = ns.exec([*vm_cmd, "--tap", netns.TAP])
    else:
        host, port = "127.0.0.1", free_port()
        vm_cmd += ["--forward", f"{port}:{t.port}"]
    vm_cmd += ["--", *t.server_args]
    recipe_dir = str(recipes.APPS_DIR / name)
    cmd = [a.replace("{host}", host).replace("{port}", str(port)).replace("{recipe}", recipe_dir) for a in t.command]
    if not run_all:
        for unit in units or t.units:
            cmd += [t.unit_option, unit]
    if ns:
        cmd = ns.exec(cmd)
    log = outcome.log
    with open(out / "vm.log", "w") as vm_log:
        vm_proc = subprocess.Popen(vm_cmd, stdout=vm_log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        with ui.step(f"starting {name} under '{outcome.config}' ({host}:{port}, {outcome.network} network)"):
            netns.wait_for_server(ns, host, port, t.probe, vm_proc, READY_TIMEOUT)
        with ui.step(f"{name}'s tests against the server under '{outcome.config}'; log: {log}") as st:
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
        vm.stop_run(vm_proc)


def save_json(outcomes: list[Outcome], path: Path) -> None:
    reporting.save_json([{"config": o.config, "counts": o.counts, "failed": o.failed, "finished": o.finished,
                          "network": o.network, "pid1": o.pid1, "log": str(o.log)} for o in outcomes], path)


def load_json(paths: list[Path]) -> list[Outcome]:
    """The outcomes saved by --json, one file per earlier run (for example
    one per configuration, run side by side), in order."""
    def decode(data: list[dict]) -> list[Outcome]:
        return [Outcome(d["config"], dict(d["counts"]), list(d["failed"]), Path(d["log"]), bool(d["finished"]),
                        d.get("network", ""), bool(d.get("pid1", False))) for d in data]

    return [o for path in paths for o in reporting.load_json(path, decode, "apptest results",
                                                            "give files written by `ukl apptest NAME --json`")]


def markdown(name: str, outcomes: list[Outcome], run_all: bool, units: list[str], path: Path) -> str:
    r = recipes.load(name)
    assert r.tests is not None
    chosen = units or r.tests.units
    ran = "the whole suite" if run_all or not chosen else "the units " + ", ".join(f"`{u}`" for u in chosen)
    verdicts = list(outcomes[0].counts) if outcomes else []
    cmd = " ".join(r.tests.command).replace("{recipe}", f"apps/{name}")
    network = NETWORKS.get(outcomes[0].network if outcomes else "", NETWORKS["user"])
    lines = [f"# {name}: tests against the application", "",
             reporting.generated_by(f"./ukl apptest {name} --configs {','.join(o.config for o in outcomes)}"
                                    + (" --all" if run_all else "") + (f" --units {','.join(units)}" if units else "")
                                    + (" --pid1" if outcomes and outcomes[0].pid1 else "")
                                    + f" --markdown {path}"), "",
             f"`{cmd}` ({ran}), run on the host in the unmodified source tree against "
             f"{r.build.program} in the guest ({network}"
             + ("; the kernel started it as PID 1 and configured its network, no init" if outcomes and outcomes[0].pid1
                else "") + "), "
             + (f"started with `{' '.join(r.tests.server_args)}`." if r.tests.server_args
                else "started without arguments (its configuration file)."), "",
             "| configuration | " + " | ".join(verdicts) + " | finished |", "|---|" + "---|" * (len(verdicts) + 1)]
    for o in outcomes:
        lines.append(f"| {o.config} | " + " | ".join(str(o.counts[v]) for v in verdicts)
                     + f" | {'yes' if o.finished else 'no'} |")
    failed = [f"* {o.config}: {line}" for o in outcomes for line in o.failed]
    if failed:
        lines += ["", "Failed tests:", "", *failed]
    if r.tests.notes:
        lines += ["", r.tests.notes.strip()]
    return "\n".join(lines) + "\n"
