"""What real load generators print, read: redis-benchmark --csv, memcaslap
(libmemcached-tools' memaslap), ab, wrk --latency, and our open-loop
guest/bench/appload.c `rate` (latency against offered load, which none of
Debian's clients measures: memaslap's --tps throttle never engages). Each parser returns
one Sample per operation the tool reports. Pure functions of the text, so
that they are unit-tested on the tools' real output."""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass

from ukltool.util.errors import UklError


@dataclass(frozen=True)
class Sample:
    op: str            # "GET", "SET", "get/set" ...
    rps: float         # completed requests per second of wall time
    p50_ms: float
    p99_ms: float
    offered: float = 0.0  # an open loop's arrival rate (appload); 0: a closed loop


def _fail(tool: str, why: str) -> UklError:
    return UklError(f"cannot read {tool}'s output: {why}", "see the client's log next to the results")


def redis_benchmark(text: str) -> list[Sample]:
    """`redis-benchmark --csv`: a header, then one row per test."""
    rows = list(csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if line.startswith('"')))))
    try:
        out = [Sample(r["test"].split()[0], float(r["rps"]), float(r["p50_latency_ms"]), float(r["p99_latency_ms"]))
               for r in rows]
    except KeyError as e:
        raise _fail("redis-benchmark", f"no {e} column") from None
    except (ValueError, TypeError, IndexError, AttributeError):
        raise _fail("redis-benchmark", "a row without a test name or with a value that is not a number") from None
    if not out:
        raise _fail("redis-benchmark", "no result rows (is it redis-benchmark 7 with --csv?)")
    return out


def _log2_percentile(buckets: dict[int, int], q: float) -> float:
    """The q-quantile of memaslap's log2 histogram, interpolated linearly
    inside its bucket. Bucket k counts values v with 2^(k-1) < v <= 2^k
    (ms_local_log2(): the smallest k with 2^k >= v)."""
    total = sum(buckets.values())
    want, seen = q * total, 0
    for k in sorted(buckets):
        n = buckets[k]
        if n and seen + n >= want:
            low = 0.0 if k == 0 else float(2 ** (k - 1))
            return low + (2 ** k - low) * (want - seen) / n
        seen += n
    raise ValueError("empty histogram")


def memcaslap(text: str) -> list[Sample]:
    """memcaslap's final report: the "Total Statistics" block's log2
    histogram of latencies in microseconds, and the last line's TPS."""
    m = re.search(r"^Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", text, re.M)
    block = re.search(r"^Total Statistics \(\d+ events\)\n(.*?)(?:\n\s*\n|\Z)", text, re.M | re.S)
    if not m or not block:
        raise _fail("memcaslap", "no final 'Total Statistics' and 'Run time' report")
    buckets: dict[int, int] = {}
    in_dist = False
    for line in block.group(1).splitlines():
        if "Log2 Dist:" in line:
            in_dist = True
        elif in_dist and (d := re.match(r"\s*(\d+):((?:\s+\d+)+)\s*$", line)):
            for i, n in enumerate(d.group(2).split()):
                buckets[int(d.group(1)) + i] = int(n)
    if not sum(buckets.values()):
        raise _fail("memcaslap", "no latency histogram")
    return [Sample("get/set", float(m.group(2)), _log2_percentile(buckets, 0.5) / 1000,
                   _log2_percentile(buckets, 0.99) / 1000)]


def ab(text: str) -> list[Sample]:
    """ApacheBench: requests per second and the percentile table (ms);
    failed requests or non-2xx answers are an error, not a result."""
    rps = re.search(r"^Requests per second:\s+([\d.]+)", text, re.M)
    pct = dict(re.findall(r"^\s+(\d+)%\s+(\d+)", text, re.M))
    if not rps or "50" not in pct or "99" not in pct:
        raise _fail("ab", "no 'Requests per second' or percentile table")
    failed = re.search(r"^Failed requests:\s+(\d+)", text, re.M)
    non2xx = re.search(r"^Non-2xx responses:\s+(\d+)", text, re.M)
    if (failed and int(failed.group(1))) or non2xx:
        raise _fail("ab", "some requests failed or were not answered 2xx")
    return [Sample("GET", float(rps.group(1)), float(pct["50"]), float(pct["99"]))]


_WRK_UNIT = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60000.0}


def _wrk_ms(value: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", value)
    if not m:
        raise _fail("wrk", f"latency '{value}'")
    return float(m.group(1)) * _WRK_UNIT[m.group(2)]


def wrk(text: str) -> list[Sample]:
    """`wrk --latency`: Requests/sec and the latency distribution; socket
    errors or non-2xx/3xx answers are an error."""
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.M)
    dist = dict(re.findall(r"^\s+(\d+)%\s+(\S+)\s*$", text, re.M))
    if not rps or "50" not in dist or "99" not in dist:
        raise _fail("wrk", "no 'Requests/sec' or latency distribution (was --latency given?)")
    if re.search(r"^\s+(Socket errors|Non-2xx or 3xx responses):", text, re.M):
        raise _fail("wrk", "socket errors or non-2xx/3xx responses")
    return [Sample("GET", float(rps.group(1)), _wrk_ms(dist["50"]), _wrk_ms(dist["99"]))]


def appload(text: str) -> list[Sample]:
    """`appload rate`'s APPRATE line: the rate answered, and p50/p99 from
    each request's scheduled arrival (ns)."""
    m = re.search(r"^APPRATE \S+ (get|set) \d+ \d+ \d+ ([\d.]+) ([\d.]+) (\d+) (\d+) ", text, re.M)
    if not m:
        raise _fail("appload", "no APPRATE line")
    return [Sample(m[1].upper(), float(m[3]), int(m[4]) / 1e6, int(m[5]) / 1e6, float(m[2]))]


PARSERS = {"redis-benchmark": redis_benchmark, "memcaslap": memcaslap, "ab": ab, "wrk": wrk, "appload": appload}
# The Debian package each client comes from; appload is ours (guest/bench/appload.c,
# built by the tool)
PACKAGES = {"redis-benchmark": "redis-tools", "memcaslap": "libmemcached-tools", "ab": "apache2-utils",
            "wrk": "wrk"}


def parse(tool: str, text: str) -> list[Sample]:
    if tool not in PARSERS:
        raise UklError(f"no parser for the load generator '{tool}'", "clients: " + ", ".join(PARSERS))
    return PARSERS[tool](text)
