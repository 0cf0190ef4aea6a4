"""The load generators' output, as the real tools print it (tests/unit/data/clients/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ukltool.apps import clients
from ukltool.run import netns
from ukltool.util.errors import UklError

DATA = Path(__file__).parent / "data" / "clients"


def sample(name: str) -> str:
    return (DATA / name).read_text()


def test_ab():
    [s] = clients.parse("ab", sample("ab.out"))
    assert s == clients.Sample("GET", 690.99, 6.0, 28.0)


def test_ab_refuses_failed_requests():
    text = sample("ab.out").replace("Failed requests:        0", "Failed requests:        3")
    with pytest.raises(UklError, match="failed"):
        clients.parse("ab", text)


def test_wrk_units():
    [s] = clients.parse("wrk", sample("wrk.out"))
    assert s.rps == 713.97 and s.p50_ms == pytest.approx(6.24) and s.p99_ms == pytest.approx(236.38)
    assert clients._wrk_ms("870.00us") == pytest.approx(0.87)
    assert clients._wrk_ms("1.50s") == pytest.approx(1500.0)


def test_wrk_refuses_socket_errors():
    errors = "  Socket errors: connect 0, read 3, write 0, timeout 0\n"
    text = sample("wrk.out").replace("Requests/sec", errors + "Requests/sec")
    with pytest.raises(UklError, match="socket errors"):
        clients.parse("wrk", text)


def test_memcaslap_total_histogram():
    [s] = clients.parse("memcaslap", sample("memcaslap.out"))
    assert s.op == "get/set" and s.rps == 39343
    # 5000 events: 270 in (8,16], 3047 in (16,32]: the 2500th is in (16,32]
    assert 16 / 1000 < s.p50_ms <= 32 / 1000
    # the 4950th: 4922 up to 2048 us, 63 in (2048,4096]; the maximum, 4734 us, is in bucket 13
    assert 2.048 < s.p99_ms <= 4.096


def test_log2_percentile_interpolates():
    assert clients._log2_percentile({5: 10}, 0.5) == pytest.approx(24.0)  # halfway through (16, 32]
    assert clients._log2_percentile({0: 1, 1: 1}, 1.0) == pytest.approx(2.0)


def test_memcaslap_without_statistics():
    with pytest.raises(UklError, match="Total Statistics"):
        clients.parse("memcaslap", "Run time: 0.1s Ops: 5000 TPS: 71370 Net_rate: 79.9M/s\n")


def test_redis_benchmark_csv():
    out = clients.parse("redis-benchmark", sample("redis-benchmark.out"))
    assert [s.op for s in out] == ["SET", "GET"]
    assert all(s.rps > 0 and 0 < s.p50_ms <= s.p99_ms for s in out)


def test_redis_benchmark_odd_rows():
    header = '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms"\n'
    with pytest.raises(UklError, match="not a number"):
        clients.parse("redis-benchmark", header + '"GET","12.5"\n')
    with pytest.raises(UklError, match="not a number"):
        clients.parse("redis-benchmark", header + '"","1","1","1","1","1","1"\n')


def test_unknown_tool():
    with pytest.raises(UklError, match="no parser"):
        clients.parse("siege", "")


def test_netns_commands_name_the_namespace():
    cmds = netns.setup_commands("ukl-1-0")
    assert cmds[0] == ["ip", "netns", "add", "ukl-1-0"]
    assert all(c[:3] == ["ip", "-n", "ukl-1-0"] for c in cmds[1:])
    assert ["ip", "-n", "ukl-1-0", "addr", "add", f"{netns.HOST_IP}/24", "dev", netns.TAP] in cmds
    assert netns.Netns("x").exec(["true"]) == ["ip", "netns", "exec", "x", "true"]


def test_netbench_section_is_checked():
    from ukltool.apps import recipes
    nb = recipes._netbench({"port": 80, "probe": "x", "loads": [{"name": "ab", "command": ["ab", "http://{host}/"]}]},
                           "r [netbench]")
    assert nb.loads[0].timeout == 300 and nb.args == []
    with pytest.raises(UklError, match="must start with one of"):
        recipes._netbench({"port": 80, "probe": "x", "loads": [{"name": "c", "command": ["curl"]}]}, "r")
    with pytest.raises(UklError, match="unknown key"):
        recipes._netbench({"port": 80, "probe": "x", "loads": [{"name": "c", "command": ["ab"], "n": 1}]}, "r")
    with pytest.raises(UklError, match="at least one load"):
        recipes._netbench({"port": 80, "probe": "x", "loads": []}, "r")


def test_apptest_outcomes_round_trip(tmp_path):
    from ukltool.apps import apptest
    outs = [apptest.Outcome("linux", {"ok": 3, "err": 1}, ["[err]: x"], tmp_path / "l.log", True, "tap")]
    apptest.save_json(outs, tmp_path / "a.json")
    apptest.save_json([apptest.Outcome("base", {"ok": 4, "err": 0}, [], tmp_path / "b.log", False, "tap")],
                      tmp_path / "b.json")
    got = apptest.load_json([tmp_path / "a.json", tmp_path / "b.json"])
    assert [o.config for o in got] == ["linux", "base"] and got[0] == outs[0] and not got[1].finished
    with pytest.raises(UklError, match="cannot read apptest results"):
        apptest.load_json([tmp_path / "missing.json"])


def test_appload_open_loop_line():
    [s] = clients.parse("appload", "APPRATE memcache get 3000 4 2000 2042 2041 68441 524418 5228163 0 1958673853\n")
    assert s == clients.Sample("GET", 2041.0, 0.068441, 0.524418, 2042.0)
    with pytest.raises(UklError, match="no APPRATE line"):
        clients.parse("appload", "appload: connect: Connection refused\n")


def test_a_netbench_appload_command_is_the_loader_built_on_the_host(monkeypatch, tmp_path):
    from ukltool.bench import appbench, hostbench
    monkeypatch.setattr(appbench, "loader", lambda: tmp_path / "appload-x")
    assert hostbench._expand(["appload", "rate", "memcache", "{host}:{port}", "get", "-", "10", "4", "100"], 11211) \
        == [str(tmp_path / "appload-x"), "rate", "memcache", f"{netns.GUEST_IP}:11211", "get", "-", "10", "4", "100"]
    assert hostbench._expand(["ab", "http://{host}:{port}/"], 80) == ["ab", f"http://{netns.GUEST_IP}:80/"]


def test_open_loop_rows_compare_p99_and_stay_out_of_the_throughput_plot(tmp_path, monkeypatch):
    from ukltool.bench import hostbench
    rep = hostbench.WallReport("memcached", "m", "x", ["linux", "base"], 1)
    rep.results = {"linux": [hostbench.Result("get/set c=4", 4000, 0.4, 4.0),
                             hostbench.Result("GET open 2,000/s", 2000, 0.5, 2.0, 2040)],
                   "base": [hostbench.Result("get/set c=4", 5000, 0.3, 3.0),
                            hostbench.Result("GET open 2,000/s", 2001, 0.6, 3.0, 2040)]}
    rows = hostbench.rows(rep)
    assert rows[0][:4] == ["get/set c=4", "4,000", "5,000", "1.25"]
    assert rows[1][:4] == ["GET open 2,000/s", "2,000", "2,001", "p99 1.50"]
    md = hostbench.markdown([rep], [])
    assert "| GET open 2,000/s | 2,000 | 2,001 | p99 1.50 |" in md and "appload" in md
    path = tmp_path / "w.json"
    hostbench.save_json([rep], [], path)
    (back,), _ = hostbench.load_json(path)
    assert back.results == rep.results
    from ukltool.bench import appbench
    seen: list[list[str]] = []
    monkeypatch.setattr(appbench, "plot_ratios", lambda labels, *a, **k: seen.append(labels))
    hostbench.plot([rep], [], tmp_path / "w.png")
    assert seen == [["memcached get/set c=4"]]
