"""Real applications (issue 12): each recipe in apps/ builds Debian's
unmodified source package with `ukl build NAME`, for every basic
configuration, and passes its smoke test (a shell script run in the guest
beside the application) with a clean kernel log. Run-to-completion
applications also run with the recipe's default arguments."""

from __future__ import annotations

import socket
import subprocess

import pytest

from conftest import BASELINE, BASIC_CONFIGS, UKL, assert_clean, ukl
from ukltool.apps import recipes
from ukltool.bench.bootbench import server_probe
from ukltool.build import image, initramfs
from ukltool.run import netns, vm


def app_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]


# Variants (`extends`, e.g. redis-explicit) are the same program with a few
# changed lines: their own tests below run them where the change matters.
APPS = [n for n in recipes.names() if not recipes.load(n).build.library and not recipes.load(n).extends]


# Under linux the smoke test checks the recipe and its test on stock Linux;
# the applications' own suites below run there in every tier.
@pytest.mark.parametrize("config", [pytest.param(c, marks=pytest.mark.test_all) if c == BASELINE else c
                                    for c in BASIC_CONFIGS])
@pytest.mark.parametrize("name", APPS)
def test_recipe_builds_runs_and_passes_its_smoke_test(outdir, name, config):
    r = recipes.load(name)
    out = outdir / f"app-{name}-{config}"
    res = ukl("build", name, "--config", config, "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    assert (out / "build.log").is_file()
    # what ships is the application's: the smoke test's tools come with the test layer
    assert initramfs.read_member((out / "initramfs.cpio").read_bytes(), "bin/busybox") is None
    assert r.smoke is not None, f"apps/{name}/recipe.toml has no [smoke] test"
    res = ukl("run", out, "--timeout", str(r.smoke.timeout), "--sh", r.smoke.sh)
    lines = app_lines(res.stdout)
    assert res.returncode == 0, res.stdout[-3000:]
    for want in r.smoke.expect:
        assert any(want in l for l in lines), (want, lines[-40:])
    assert_clean(out / "console.log")
    if r.nodes > 1:  # several guests: the default run is a cluster's
        res = ukl("cluster", out, "--timeout", str(r.smoke.timeout))
        assert res.returncode == 0, res.stdout[-3000:]
        for i in range(r.nodes):
            assert_clean(out / "cluster" / f"node{i}.log")
    elif not r.forwards:  # not a server: the default run completes
        res = ukl("run", out, "--timeout", str(r.smoke.timeout))
        assert res.returncode == 0, res.stdout[-3000:]
        assert_clean(out / "console.log")


SERVERS = [n for n in APPS if recipes.load(n).forwards and server_probe(recipes.load(n)) is not None]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("name", SERVERS)
def test_a_server_boots_as_pid_1_with_its_network(outdir, name):
    """Issue 47, item 2: no init program; the kernel configures eth0 from
    ip= (IP_PNP) and the server answers through the forwarded port. One
    that reads no file boots with no initramfs at all."""
    r = recipes.load(name)
    probe = server_probe(r)
    assert probe is not None
    out = outdir / f"app-{name}-pid1"
    res = ukl("build", name, "--config", "base", "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    assert not image.load(out).userspace
    bare = [] if r.needs_initramfs else ["--no-initramfs", "--machine", "microvm", "--direct"]
    port = free_port()
    with open(out / "run.log", "w") as log:
        proc = subprocess.Popen([str(UKL), "run", str(out), "--pid1", *bare, "--forward", f"{port}:{probe[0]}",
                                 "--timeout", "900"], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        netns.wait_for_server(None, "127.0.0.1", port, probe[1].decode(), proc, 600)
    finally:
        vm.stop_run(proc)
    console = (out / "console.log").read_text(errors="replace")
    assert "ukl-init" not in console and "ip=10.0.2.15::10.0.2.2:" in (out / "console.cmd").read_text()
    assert_clean(out / "console.log")


def test_an_unknown_name_lists_the_recipes(outdir):
    res = ukl("build", "no-such-app", "--config", "base", "-o", outdir / "none")
    assert res.returncode == 2 and "neither a file, a directory nor a recipe" in res.stdout
    assert all(n in res.stdout for n in recipes.names()) and "Traceback" not in res.stdout


def test_a_library_recipe_is_built_only_as_a_dependency(outdir):
    res = ukl("build", "libevent", "--config", "base", "-o", outdir / "libevent")
    assert res.returncode == 2 and "library recipe" in res.stdout and "memcached" in res.stdout, res.stdout
    assert not (outdir / "libevent").exists()


def test_application_benchmark_counts_instructions_per_request(outdir):
    """`ukl bench app redis --icount --model cycles`: the server's guest
    instructions per request, from the in-guest load generator, for both
    configurations (CI-sized); and the costly instructions the whole guest
    executes per request, which our QEMU plugin counts in the region
    guest/bench/appload.c marks around each load."""
    import json
    out = outdir / "bench-redis.json"
    res = ukl("bench", "app", "redis", "--configs", "linux,base", "--icount", "--model", "cycles", "--requests", "300",
              "--by-function", "--json", out, "--markdown", outdir / "bench-redis.md")
    assert res.returncode == 0, res.stdout[-3000:]
    (report,) = json.loads(out.read_text())
    assert report["configs"] == ["linux", "base"] and report["icount"]
    per = {c: {(p["op"], p["conns"], p["pipeline"]): p["instructions_per_request"] for p in pts}
           for c, pts in report["results"].items()}
    assert set(per["linux"]) == set(per["base"]) and len(per["base"]) == 8
    for load, linux in per["linux"].items():
        base = per["base"][load]
        assert 1_000 < linux < 1_000_000 and 0.8 < base / linux < 1.2, (load, linux, base)
    # pipelining amortizes the system calls: fewer instructions per request
    assert per["base"][("get", 1, 16)] < per["base"][("get", 1, 1)] / 2
    model = report["model"]
    assert model["cpu"] == "skylake-sp" and set(model["results"]) == {"linux", "base"}
    for config, loads in model["results"].items():
        assert len(loads) == 8
        for lc, p in zip(loads, report["results"][config], strict=True):
            # the region holds the server's work and the client's
            assert lc["requests"] == 300 and lc["insns"] > p["server_ns"], (config, lc, p)
    syscalls = {c: {lc["label"]: lc["counts"].get("syscall", 0) / lc["requests"] for lc in loads}
                for c, loads in model["results"].items()}
    for label in ("GET c=1 P=1", "SET c=1 P=1"):
        # Under linux the server and the client execute SYSCALL (read, write,
        # epoll_wait each); in ring 0 the server calls the kernel instead.
        assert syscalls["linux"][label] - syscalls["base"][label] >= 2.5, syscalls
    md = (outdir / "bench-redis.md").read_text()
    assert "modelled cycles (instructions)" in md and "| syscall | 50 |" in md
    # --by-function: each load's instructions per request, by function. Both
    # kernels run the same TCP code; under base the server's own functions
    # are named (ukl_ prefix), under linux they are user space's.
    assert "--by-function" in md.splitlines()[2] and "#### GET c=1 P=1" in md
    for config, loads in model["results"].items():
        profiles = {p["op"]: p for p in report["profiles"][config]}
        for lc in loads:
            fns = profiles[lc["label"]]["functions"]
            assert profiles[lc["label"]]["iterations"] == 300
            # the profile is the region, per request
            assert abs(sum(fns.values()) - lc["insns"] / 300) < 0.01 * lc["insns"] / 300, (config, lc["label"])
            assert fns["tcp_sendmsg_locked"] > 20 and fns.get("(user space)", 0) > 100, (config, lc["label"])
            if config == "base":
                assert fns["ukl_processCommand"] > 50 and "entry_SYSCALL_64" in fns, lc["label"]  # the client's
            else:
                assert not any(f.startswith("ukl_") for f in fns), lc["label"]


# The applications' own tests also run under every option at once, TCP
# shortcuts included (issue 14): the same results as linux and base.
PROFILE = "base+ret+byp+shortcut"
APPTEST_CONFIGS = ("linux", "base", PROFILE)


def apptest_outcomes(outdir, name: str, *extra: str) -> dict:
    """`ukl apptest NAME` under APPTEST_CONFIGS: each configuration's outcome."""
    import json
    out = outdir / f"apptest-{name}.json"
    res = ukl("apptest", name, "--configs", ",".join(APPTEST_CONFIGS), *extra, "--json", out)
    assert res.returncode == 0, res.stdout[-3000:]
    return {o["config"]: o for o in json.loads(out.read_text())}


def test_redis_own_tests_pass_against_the_ukl_server(outdir):
    """Redis's own suite in external-server mode, from the host, against
    redis-server in ring 0 and as an ordinary process (one unit here; the
    recipe's units run with `ukl apptest redis`)."""
    got = apptest_outcomes(outdir, "redis", "--units", "unit/type/incr")
    for config in APPTEST_CONFIGS:
        assert got[config]["finished"] and got[config]["counts"]["err"] == 0, got[config]
        assert got[config]["counts"]["ok"] >= 20, got[config]
        assert got[config]["counts"] == got["linux"]["counts"], config


def test_redis_calling_the_tcp_shortcuts_explicitly_passes_its_tests(outdir):
    """apps/redis-explicit: Redis with ukl_tcp_read()/ukl_tcp_write() in
    its connection layer (the dissertation's way, 3 changed lines), built
    from the patched source, passes the same unit under `base+ret+byp`."""
    import json
    out = outdir / "apptest-redis-explicit.json"
    res = ukl("apptest", "redis-explicit", "--configs", "base+ret+byp", "--units", "unit/type/incr", "--json", out)
    assert res.returncode == 0, res.stdout[-3000:]
    (got,) = json.loads(out.read_text())
    assert got["finished"] and got["counts"]["err"] == 0 and got["counts"]["ok"] >= 20, got


def test_memcached_protocol_tests_pass_against_the_ukl_server(outdir):
    """memcached's own suite starts its own binaries; libmemcached's protocol
    conformance tests (memccapable) run from the host against memcached in
    ring 0 and as an ordinary process: every ascii and binary command."""
    got = apptest_outcomes(outdir, "memcached")
    for config in APPTEST_CONFIGS:
        assert got[config]["finished"] and got[config]["counts"]["err"] == 0, got[config]
        assert got[config]["counts"]["ok"] >= 50, got[config]
        assert got[config]["counts"] == got["linux"]["counts"], config


def test_nginx_http_checks_pass_against_the_ukl_server(outdir):
    """nginx's own suite is not in Debian's source: HTTP protocol checks of
    ours (apps/nginx/http-checks.sh) from the host, against nginx in ring 0
    and as an ordinary process."""
    got = apptest_outcomes(outdir, "nginx")
    for config in APPTEST_CONFIGS:
        assert got[config]["finished"] and got[config]["counts"] == {"ok": 27, "err": 0}, got[config]


def test_memcached_latency_rises_with_offered_load(outdir):
    """`ukl bench app memcached --icount`: the recipe's open-loop loads (Poisson
    arrivals at each offered rate, guest/bench/appload.c `rate`) give p50 and p99
    latency in guest instructions under linux and under every option."""
    import json
    rates = recipes.load("memcached").bench.latency.rates
    out = outdir / "bench-memcached.json"
    res = ukl("bench", "app", "memcached", "--configs", f"linux,{PROFILE}", "--icount", "--requests", "300",
              "--json", out, "--markdown", outdir / "bench-memcached.md", "--plot", outdir / "bench-memcached.png")
    assert res.returncode == 0, res.stdout[-3000:]
    (report,) = json.loads(out.read_text())
    for config in ("linux", PROFILE):
        pts = report["latency"][config]
        assert [p["rate"] for p in pts] == rates and all(p["requests"] == 300 for p in pts), pts
        for p in pts:
            assert 0 < p["p50_ns"] <= p["p99_ns"] <= p["max_ns"] <= p["elapsed_ns"], p
        low, high = pts[0], pts[-1]
        # the lowest rate is far below what the guest can serve: answered as
        # offered, each request in well under a millisecond of guest time
        assert 0.7 * low["rate"] < low["achieved"] < 1.3 * low["rate"] and low["p50_ns"] < 1_000_000, low
        assert high["p99_ns"] > low["p99_ns"] and high["server_ns"] > 0, (low, high)
    md = (outdir / "bench-memcached.md").read_text()
    assert "### Latency against offered load" in md and f"{PROFILE} p99 / linux" in md
    assert (outdir / "bench-memcached-latency.png").stat().st_size > 0
