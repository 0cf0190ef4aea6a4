"""`ukl bench remote --quick` end to end (CI-sized): guest/bench/remote.c on the
host, in a linux guest and in a base guest with --remote; every row and
jitter run is there, the report and the plot are written. Wall-clock
values under TCG are noisy, so only what must hold in any run is asserted:
a remote call costs more than a local getppid, and sleeping for the answer
more than spinning for it."""

from __future__ import annotations

import json

from conftest import ukl


def test_bench_remote_quick(tmp_path):
    out = tmp_path / "remote.json"
    res = ukl("bench", "remote", "--quick", "--json", out, "--markdown", tmp_path / "results-remote.md",
              "--plot", tmp_path / "remote.png", timeout=2400)
    assert res.returncode == 0, res.stdout
    rep = json.loads(out.read_text())
    med = {w: {(r["op"], r["size"]): r["median"] for r in rows} for w, rows in rep["results"].items()}
    assert set(med) == {"host", "linux", "base"}
    sizes = [1, 64, 1024, 4096, 16384, 65536]
    for kind in ("read", "write"):
        for s in sizes:
            assert (f"{kind}-local", s) in med["linux"] and (f"{kind}-local", s) in med["host"]
            for suffix in ("local", "poll", "irq"):
                assert med["base"][f"{kind}-{suffix}", s] > 0, (kind, suffix, s)
    # remote rows only where there is a host to call
    assert ("null-poll", 0) not in med["linux"] and ("null-poll", 0) not in med["host"]
    assert med["base"]["null-poll", 0] > med["base"]["getppid", 0]
    assert med["base"]["null-irq", 0] > med["base"]["null-poll", 0]
    loads = {c: [j["load"] for j in js] for c, js in rep["jitter"].items()}
    assert loads == {"linux": ["none", "local-io"], "base": ["none", "local-io", "remote-io"]}
    md = (tmp_path / "results-remote.md").read_text()
    assert "## Null calls" in md and "Seed 002" in md and "| base | 1 | remote-io |" in md
    assert (tmp_path / "remote.png").stat().st_size > 10000
