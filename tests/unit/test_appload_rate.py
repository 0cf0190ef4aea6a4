"""guest/bench/appload.c `rate`, the open-loop load generator, run on the host
against fake memcache servers on loopback (no VM): latencies run from the
scheduled arrival, answers are matched to requests byte for byte, and a
load far beyond what the server can take still ends."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from ukltool.bench import appbench, applatency

GET_ANSWER = b"VALUE ukl:k1 0 32\r\n0123456789abcdef0123456789abcdef\r\nEND\r\n"


def serve_conn(conn: socket.socket, answer: Callable[[bytes], bytes]) -> None:
    """Answer each request line (a set's data line is taken with it)."""
    buf = b""
    with conn:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
            while b"\r\n" in buf:
                line, buf = buf.split(b"\r\n", 1)
                if line.startswith(b"set "):
                    while b"\r\n" not in buf:
                        buf += conn.recv(65536)
                    buf = buf.split(b"\r\n", 1)[1]
                    conn.sendall(b"STORED\r\n")
                elif line:
                    conn.sendall(answer(line))


@contextmanager
def fake_memcache(answer: Callable[[bytes], bytes]) -> Iterator[int]:
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(64)

    def accept() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=serve_conn, args=(conn, answer), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield srv.getsockname()[1]
    finally:
        srv.close()


def appload(port: int, requests: int, conns: int, rate: int, timeout: float = 60,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(appbench.loader()), "rate", "memcache", f"127.0.0.1:{port}", "get", "-",
                           str(requests), str(conns), str(rate)], capture_output=True, text=True, timeout=timeout,
                          env=env)


def answer_after(seconds: float) -> Callable[[bytes], bytes]:
    """A server thread that takes SECONDS per answer."""
    def slow(line: bytes) -> bytes:
        time.sleep(seconds)
        return GET_ANSWER
    return slow


def test_latency_is_the_servers_delay_at_a_light_load():
    with fake_memcache(answer_after(0.005)) as port:
        res = appload(port, 100, 2, 50)
    assert res.returncode == 0, res.stderr
    (p,) = applatency.parse(res.stdout)
    assert (p.op, p.requests, p.conns, p.rate) == ("get", 100, 2, 50)
    # 5 ms per answer, arrivals 20 ms apart on average: little queueing
    # (the upper bound leaves room for a loaded machine)
    assert 5_000_000 <= p.p50_ns < 100_000_000 and p.p50_ns <= p.p99_ns <= p.max_ns, p
    assert 0.7 * 50 < p.offered < 1.3 * 50 and not p.saturated, p


def test_a_late_server_is_charged_from_the_arrival_not_the_send():
    """Arrivals far faster than one server thread answers: the queue, and
    so the latency, grows with the load (open loop: no coordinated
    omission), and the run is marked as fallen behind."""
    with fake_memcache(answer_after(0.002)) as port:
        res = appload(port, 200, 1, 5000)
    assert res.returncode == 0, res.stderr
    (p,) = applatency.parse(res.stdout)
    # 200 answers take >= 400 ms; the last arrived after about 40 ms
    assert p.achieved < 600 and p.saturated and p.max_ns > 300_000_000, p
    assert p.p50_ns > 100_000_000, p


def test_far_beyond_saturation_the_load_still_ends():
    with fake_memcache(lambda line: GET_ANSWER) as port:
        res = appload(port, 50_000, 2, 100_000_000)
    assert res.returncode == 0, res.stderr
    (p,) = applatency.parse(res.stdout)
    assert p.requests == 50_000 and p.p99_ns <= p.max_ns <= p.elapsed_ns, p


@pytest.mark.parametrize("answer,message", [
    (lambda line: GET_ANSWER.replace(b"END", b"EMD"), "not the expected bytes"),
    (lambda line: GET_ANSWER * 2, "an answer to no request"),
])
def test_a_wrong_answer_fails_the_load(answer, message):
    with fake_memcache(answer) as port:
        res = appload(port, 20, 1, 1000, timeout=30)
    assert res.returncode == 1 and message in res.stderr and "APPRATE" not in res.stdout, res


def test_a_seed_draws_another_arrival_sequence():
    with fake_memcache(lambda line: GET_ANSWER) as port:
        runs = [appload(port, 200, 2, 100000, 30, {"APPLOAD_SEED": seed} if seed else {}) for seed in ("", "", "7")]
    offered = [applatency.parse(r.stdout)[0].offered for r in runs]
    assert offered[0] == offered[1] != offered[2], offered


def test_bad_arguments_are_refused_with_usage():
    for args in (["rate", "http", "80", "get", "-", "10", "1", "5"], ["rate", "memcache", "1.2.3:80", "get", "-",
                                                                       "10", "1", "5"],
                 ["rate", "memcache", "80", "get", "-", "10", "65", "5"],
                 ["rate", "memcache", "80", "get", "-", "10", "1", "0"],
                 ["rate", "memcache", "127.0.0.1:80", "get", "memcached", "10", "1", "5"]):
        res = subprocess.run([str(appbench.loader()), *args], capture_output=True, text=True, timeout=10)
        assert res.returncode == 2 and "appload:" in res.stderr, (args, res)
