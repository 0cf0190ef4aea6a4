"""Real clients on the host against a server in the guest (issue 12):
`ukl bench app NAME --clients host` puts the guest's eth0 on a tap device in a
private network namespace and runs Debian's load generators there, in
wall-clock time. Needs root and /dev/net/tun (CI has both); elsewhere
these tests say why they cannot run."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import REPO, ukl
from ukltool.run import netns

pytestmark = pytest.mark.skipif(netns.unavailable() is not None,
                                reason=f"no private tap network here: {netns.unavailable()}")


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def logs_of_the_run() -> str:
    """The guest's console and the clients' log of each configuration, so
    that a failure shows them before a later run replaces them (an
    intermittent hang, docs/dev/testing.md)."""
    from ukltool.util.paths import cache_dir
    text = ""
    for log in sorted(p for p in (cache_dir() / "bench" / "host").glob("redis-*/*.log") if p.name != "build.log"):
        text += f"\n--- {log} (its end)\n" + log.read_text(errors="replace")[-1500:]
    return text


def test_redis_benchmark_from_the_host(outdir):
    """redis-benchmark, with and without pipelining, against redis-server
    under linux and base: every load completes with a throughput and
    latencies, and the namespace is gone afterwards."""
    before = namespaces()
    out = outdir / "hostbench-redis.json"
    res = ukl("bench", "app", "redis", "--clients", "host", "--configs", "linux,base", "--json", out)
    assert res.returncode == 0, res.stdout[-3000:] + logs_of_the_run()
    [rep] = json.loads(out.read_text())
    assert rep["configs"] == ["linux", "base"]
    for config in ("linux", "base"):
        labels = [r["label"] for r in rep["results"][config]]
        assert labels == ["SET c=30 P=1", "GET c=30 P=1", "SET c=30 P=16", "GET c=30 P=16"], labels
        for r in rep["results"][config]:
            assert r["rps"] > 0 and 0 < r["p50_ms"] <= r["p99_ms"], r
    # pipelining 16 requests per round trip must raise throughput
    by = {r["label"]: r["rps"] for r in rep["results"]["base"]}
    assert by["GET c=30 P=16"] > by["GET c=30 P=1"], by
    assert namespaces() == before


def test_host_clients_refuse_icount(outdir):
    res = ukl("bench", "app", "redis", "--clients", "host", "--icount")
    assert res.returncode == 2 and "--icount does not apply to --clients host" in res.stdout, res.stdout
    assert "Traceback" not in res.stdout


def test_run_names_a_missing_tap_device(outdir):
    image = outdir / "tap-basics"
    assert ukl("build", REPO / "tests" / "apps" / "basics.c", "--config", "base", "-o", image).returncode == 0
    res = ukl("run", image, "--tap", "nosuchtap0")
    assert res.returncode == 2 and "no tap device of that name" in res.stdout, res.stdout
    assert "Traceback" not in res.stdout
