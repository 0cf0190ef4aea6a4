"""Latency against offered load (no VM): the open-loop loads' guest
commands, reading appload's APPRATE lines, combining runs, the report and
its JSON, and the recipe section."""

from __future__ import annotations

import json

import pytest

from ukltool.apps import recipes
from ukltool.bench import appbench, applatency
from ukltool.util.errors import UklError

# What guest/bench/appload.c printed against a memcached on the host
LINE = "APPRATE memcache get 4000 4 20000 20423 20419 66864 377142 1192184 76208836 195897202"


def point(rate: int, p99: int, achieved: float | None = None) -> applatency.RatePoint:
    return applatency.RatePoint("get", 4, rate, 1000, rate * 1.02, float(rate if achieved is None else achieved),
                                p99 // 4, p99, 2 * p99, 10**7, 10**9)


def test_appload_rate_lines_are_read_field_by_field():
    (p,) = applatency.parse(f"noise\n{LINE}\r\nAPPLOAD memcache get 300 1 1 5 6\n")
    assert p == applatency.RatePoint("get", 4, 20000, 4000, 20423.0, 20419.0, 66864, 377142, 1192184, 76208836,
                                     195897202)
    assert p.label == "GET 20,000/s" and not p.saturated
    # saturation is judged against the arrivals' own rate, not the nominal one
    assert point(40000, 10, achieved=30000).saturated and not point(40000, 10, achieved=0.97 * 40800).saturated


def test_the_guest_runs_one_open_loop_load_per_rate_capped_by_requests():
    b = recipes.load("memcached").bench
    assert b is not None and b.latency is not None
    lines = applatency.script_lines(b, None)
    assert len(lines) == len(b.latency.rates)
    assert lines[0] == (f"/bin/appload rate memcache 11211 get memcached {b.latency.requests} {b.latency.conns} "
                        f"{b.latency.rates[0]} || echo APPLOAD-FAILED")
    assert all(f" get memcached 300 {b.latency.conns} " in line for line in applatency.script_lines(b, 300))
    assert all(f" {b.latency.requests} " in line for line in applatency.script_lines(b, 10**6))
    # each run of --repeat draws its own arrival sequence
    assert all(line.startswith("APPLOAD_SEED=2 /bin/appload rate ") for line in applatency.script_lines(b, 10, 2))
    assert "APPLOAD_SEED=1 /bin/appload rate" in appbench.script(recipes.load("memcached"), 100, 1)
    assert "APPLOAD_SEED" not in appbench.script(recipes.load("memcached"), 100, 0)
    # the open-loop loads come after the closed-loop ones (the regions) and before the server stops
    sh = appbench.script(recipes.load("memcached"), 100).splitlines()
    rate_at = [i for i, line in enumerate(sh) if "/bin/appload rate " in line]
    region_at = [i for i, line in enumerate(sh) if line.startswith("APPLOAD_REGION=")]
    assert rate_at and max(region_at) < min(rate_at) < max(rate_at) < sh.index("kill $pid; wait $pid")
    assert applatency.script_lines(recipes.load("nginx").bench, None) == []


def test_every_rate_must_be_measured_in_order(tmp_path):
    b = recipes.load("memcached").bench
    assert b is not None and b.latency is not None
    applatency.check([point(r, 100) for r in b.latency.rates], b, "t", tmp_path / "console.log")
    with pytest.raises(UklError, match="measured the offered rates none") as e:
        applatency.check([], b, "t", tmp_path / "console.log")
    assert "console.log" in str(e.value.hint)
    with pytest.raises(UklError, match="not the recipe's"):
        applatency.check([point(r, 100) for r in reversed(b.latency.rates)], b, "t", tmp_path / "console.log")


def test_runs_combine_field_by_field_to_the_lower_median():
    runs = [[point(1000, v)] for v in (300, 100, 200, 400)]
    (p,) = applatency.combine(runs)
    assert p.p99_ns == 200 and p.p50_ns == 50 and p.max_ns == 400
    with pytest.raises(UklError, match="different open-loop loads"):
        applatency.combine([[point(1000, 1)], [point(2000, 1)]])


def test_rows_give_p50_p99_in_microseconds_and_the_p99_ratio():
    lat = {"linux": [point(10000, 200_000), point(40000, 8_000_000, achieved=30000)],
           "base": [point(10000, 180_000), point(40000, 4_000_000)]}
    assert applatency.heading(["linux", "base"], "linux") == [
        "offered load", "linux p50 / p99", "base p50 / p99", "base p99 / linux"]
    rows = applatency.rows(lat, ["linux", "base"], "linux")
    assert rows[0] == ["GET 10,000/s (4 conns)", "50.0 / 200.0", "45.0 / 180.0", "0.900"]
    assert rows[1] == ["GET 40,000/s (4 conns)", "2,000.0 / 8,000.0 * (30,000/s)", "1,000.0 / 4,000.0", "0.500"]
    md = "\n".join(applatency.markdown(lat, ["linux", "base"], "linux", True))
    assert "### Latency against offered load" in md and "a thousand guest instructions" in md
    assert "| GET 10,000/s (4 conns) | 50.0 / 200.0 | 45.0 / 180.0 | 0.900 |" in md
    assert applatency.markdown({"linux": []}, ["linux"], "linux", True) == []


def test_reports_keep_their_latencies_through_json_and_markdown(tmp_path):
    lat = {"linux": [point(10000, 200_000)], "base": [point(10000, 180_000)]}
    pts = [appbench.Point("get", 1, 1, 100, 1000, 2000)]
    rep = appbench.AppReport("memcached", "memcached", True, "tcg", "m", ["linux", "base"],
                             {"linux": "6.1", "base": "6.1"}, {"linux": pts, "base": pts}, latency=lat)
    path = tmp_path / "r.json"
    appbench.save_json([rep], path)
    (back,) = appbench.load_json(path)
    assert back.latency == lat
    md = appbench.markdown([back], tmp_path / "r.png")
    assert "| GET 10,000/s (4 conns) | 50.0 / 200.0 | 45.0 / 180.0 | 0.900 |" in md
    assert "![latency against offered load](r-latency.png)" in md
    appbench.plot([back], tmp_path / "r.png")
    assert (tmp_path / "r-latency.png").stat().st_size > 0
    # files written before the open-loop loads existed have none
    data = json.loads(path.read_text())
    del data[0]["latency"]
    path.write_text(json.dumps(data))
    (old,) = appbench.load_json(path)
    assert old.latency == {} and "Latency against offered load" not in appbench.markdown([old])


@pytest.mark.parametrize("section,message", [
    ('protocol = "http"\nport = 80\ncomm = "x"\n[bench.latency]\nrates = [1]\n', "fixed-size answers"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = []\n', "non-empty list"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [0]\n', "rates 1..10"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [5]\nconns = 65\n', "conns 1..64"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [5]\nop = "del"\n', "op get or set"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [5]\nqps = 1\n', "unknown key"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nop = "get"\n', "lacks 'rates'"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [5000.5]\n', "whole numbers"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = ["5k"]\n', "whole numbers"),
    ('protocol = "redis"\nport = 1\ncomm = "x"\n[bench.latency]\nrates = [5]\nconns = true\n', "are numbers"),
])
def test_recipe_latency_sections_are_checked(tmp_path, monkeypatch, section, message):
    monkeypatch.setattr(recipes, "APPS_DIR", tmp_path)
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "recipe.toml").write_text(
        'schema = 1\ndescription = "x"\n[source]\npackage = "x"\nversion = "1"\ndsc_sha256 = "' + "0" * 64 + '"\n'
        '[build]\nprogram = "x"\n[bench]\n' + section)
    with pytest.raises(UklError, match=message):
        recipes.load("x")
