"""ukl-mpi (guest/mpi), the MPI subset Secrecy's parties talk through, on
the host: tests/apps/mpicheck.c built against it runs as three processes
on 127.0.0.1 with the UKL_MPI_* environment, and prints what the same
program prints under Debian's MPICH (mpicc, mpiexec); MPI_Abort's status,
the setup's timeouts, bad values and the singleton world. No VM."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from ukltool.util.paths import REPO
from ukltool.util.proc import host_cc

MPI_DIR = REPO / "guest" / "mpi"
APP = REPO / "tests" / "apps" / "mpicheck.c"
CASES = ["ring", "waitall", "blocking", "tags", "order", "large", "empty", "self"]
# mpicheck's calls per rank: MPI_Send and MPI_Isend; MPI_Recv, MPI_Wait and MPI_Waitall
SEND_CALLS, RECV_CALLS = 19, 21
STATS = re.compile(r"ukl-mpi: rank (\d+) stats send (\d+) (\d+) (\d+) recv (\d+) (\d+) (\d+) polls (\d+) sleeps (\d+) "
                   r"vcsw (\d+) ivcsw (\d+)")


@dataclass
class Rank:
    rc: int
    out: str
    err: str


@pytest.fixture(scope="module")
def mpicheck(tmp_path_factory) -> Path:
    """mpicheck linked with libukl-mpi.a, made and installed by
    guest/mpi/Makefile as apps/ukl-mpi does, all warning-free."""
    d = tmp_path_factory.mktemp("ukl-mpi")
    shutil.copytree(MPI_DIR, d / "src")
    subprocess.run(["make", "-s", "-C", str(d / "src"), f"CC={host_cc()}", "CFLAGS=-O2 -Werror",
                    f"PREFIX={d / 'prefix'}", "install"], check=True)
    exe = d / "mpicheck"
    subprocess.run([host_cc(), "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(d / "prefix" / "include"),
                    "-o", str(exe), str(APP), "-L", str(d / "prefix" / "lib"), "-lukl-mpi"], check=True)
    return exe


def free_ports(n: int) -> list[int]:
    """N ports nothing listens on now (bound to port 0 at once, then closed)."""
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("UKL_MPI_") and k not in ("UKL_HOSTS", "UKL_RANK")}
    env.update(extra)
    return env


def run_all(exe: Path, args: tuple[str, ...], envs: list[dict[str, str]], timeout: float) -> list[Rank]:
    """EXE ARGS once per environment in ENVS, all at once; their statuses
    and output, in that order. None outlives the call."""
    procs = [subprocess.Popen([str(exe), *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for env in envs]
    results = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=timeout)
            results.append(Rank(p.returncode, out, err))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    return results


def run_ranks(exe: Path, *args: str, n: int = 3, ranks: list[int] | None = None, timeout: float = 30,
              **env: str) -> list[Rank]:
    """Ranks RANKS (default: all N) of EXE ARGS, one process each, on
    127.0.0.1 with free ports; their statuses and output, by rank."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(n))
    return run_all(exe, args, [clean_env(UKL_MPI_HOSTS=hosts, UKL_MPI_RANK=str(r), **env)
                               for r in (range(n) if ranks is None else ranks)], timeout)


def assert_all_ok(r: int, n: int, out: str, cases: list[str] = CASES) -> None:
    lines = out.splitlines()
    assert lines[0] == f"rank {r}: of {n}", out
    assert [line.split(" ok:")[0] for line in lines[1:-1]] == [f"rank {r}: {c}" for c in cases], out
    assert lines[-1] == f"rank {r}: all ok", out


@pytest.mark.parametrize("wait", ["block", "spin"])
def test_three_ranks_pass_every_case_and_count_their_calls(mpicheck, wait):
    ranks = run_ranks(mpicheck, UKL_MPI_WAIT=wait, UKL_MPI_STATS="1")
    for r, res in enumerate(ranks):
        assert res.rc == 0, res.err
        assert_all_ok(r, 3, res.out)
        m = STATS.fullmatch(res.err.strip())
        assert m, res.err
        rank, sends, send_ns, send_sq, recvs, recv_ns, recv_sq, polls, sleeps, vcsw, ivcsw = map(int, m.groups())
        assert (rank, sends, recvs) == (r, SEND_CALLS, RECV_CALLS)
        # Cauchy-Schwarz: the sum of squares is at least the square of the sum over N
        assert send_ns > 0 and send_sq * sends >= send_ns**2
        assert recv_ns > 0 and recv_sq * recvs >= recv_ns**2
        assert polls > 0
        assert sleeps == (polls if wait == "block" else 0)
        # a rank that blocks goes to sleep at least once waiting for its peers
        assert (vcsw > 0 or wait == "spin") and ivcsw >= 0


def test_send_progresses_while_every_rank_sends_4_mib(mpicheck):
    """Every rank's MPI_Send of 4 MiB comes before its MPI_Recv: MPI_Send
    reads what arrives while it writes, so the ring does not deadlock."""
    for r, res in enumerate(run_ranks(mpicheck, "sendall")):
        assert res.rc == 0, res.err
        assert_all_ok(r, 3, res.out, ["sendall"])
        assert res.err == ""


def test_ukl_cluster_variables_stand_in(mpicheck):
    """`ukl cluster` tells each node UKL_HOSTS and UKL_RANK: without
    UKL_MPI_HOSTS, they are the world (ports from UKL_MPI_PORT, or in
    the entries)."""
    hosts = ",".join(f"127.0.0.1:{p}" for p in free_ports(3))
    ranks = run_all(mpicheck, ("sendall",), [clean_env(UKL_HOSTS=hosts, UKL_RANK=str(r)) for r in range(3)], 30)
    for r, res in enumerate(ranks):
        assert res.rc == 0, res.err
        assert_all_ok(r, 3, res.out, ["sendall"])
    bad = subprocess.run([str(mpicheck)], capture_output=True, text=True, timeout=30,
                         env=clean_env(UKL_HOSTS="10.0.3.11,10.0.3.12", UKL_RANK="2"))
    assert (bad.returncode, bad.stderr) == (
        1, "ukl-mpi: rank ?: invalid value '2': expected an integer from 0 to 1 (UKL_RANK)\n")


def test_no_environment_is_a_world_of_one(mpicheck):
    res = subprocess.run([str(mpicheck)], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert res.returncode == 0, res.stderr
    assert_all_ok(0, 1, res.stdout)
    assert res.stderr == ""
    res = subprocess.run([str(mpicheck), "abort"], capture_output=True, text=True, env=clean_env(), timeout=30)
    assert (res.returncode, res.stderr) == (7, "ukl-mpi: rank 0: MPI_Abort(7)\n")


def test_abort_ends_the_rank_with_its_code_and_the_others_with_an_error(mpicheck):
    ranks = run_ranks(mpicheck, "abort")
    assert ranks[1].rc == 7
    assert ranks[1].err == "ukl-mpi: rank 1: MPI_Abort(7)\n"
    assert ranks[1].out.splitlines()[-1] == "rank 1: MPI_Abort with code 7"
    for r in (0, 2):
        assert ranks[r].rc == 1
        assert re.fullmatch(rf"ukl-mpi: rank {r}: the connection closed while waiting for a message with tag 99 "
                            r"\(rank 1 at 127\.0\.0\.1:\d+\)\n", ranks[r].err), ranks[r].err


def test_a_peer_that_never_comes_up_is_an_error_within_the_timeout(mpicheck):
    t0 = time.monotonic()
    (res,) = run_ranks(mpicheck, n=2, ranks=[1], UKL_MPI_TIMEOUT="1")
    assert time.monotonic() - t0 < 5
    assert res.rc == 1
    assert re.fullmatch(r"ukl-mpi: rank 1: no connection to rank 0 at 127\.0\.0\.1:\d+ within 1 s: "
                        r"Connection refused \(UKL_MPI_TIMEOUT\)\n", res.err), res.err
    t0 = time.monotonic()
    (res,) = run_ranks(mpicheck, n=3, ranks=[0], UKL_MPI_TIMEOUT="1")
    assert time.monotonic() - t0 < 5
    assert (res.rc, res.err) == (1, "ukl-mpi: rank 0: ranks 1, 2 did not connect within 1 s (UKL_MPI_TIMEOUT)\n")


def test_ranks_with_different_worlds_do_not_connect(mpicheck):
    p0, p1, p2 = free_ports(3)
    two = f"127.0.0.1:{p0},127.0.0.1:{p1}"
    r0, r1 = run_all(mpicheck, (), [clean_env(UKL_MPI_HOSTS=hosts, UKL_MPI_RANK=rank, UKL_MPI_TIMEOUT="5")
                                    for hosts, rank in ((two, "0"), (f"{two},127.0.0.1:{p2}", "1"))], 30)
    assert (r0.rc, r1.rc) == (1, 1)
    assert r0.err == "ukl-mpi: rank 0: rank 1 (127.0.0.1) has a world of 3 ranks, this rank 2 (UKL_MPI_HOSTS)\n"
    assert re.fullmatch(r"ukl-mpi: rank 1: the connection closed during the setup "
                        rf"\(rank 0 at 127\.0\.0\.1:{p0}\)\n", r1.err), r1.err


@pytest.mark.parametrize("env, message", [
    ({"UKL_MPI_RANK": "3"}, "invalid value '3': expected an integer from 0 to 1 (UKL_MPI_RANK)"),
    ({"UKL_MPI_RANK": "one"}, "invalid value 'one': expected an integer from 0 to 1 (UKL_MPI_RANK)"),
    ({"UKL_MPI_RANK": None}, "UKL_MPI_HOSTS is set but UKL_MPI_RANK is not (UKL_MPI_RANK)"),
    ({"UKL_MPI_WAIT": "fast"}, "invalid value 'fast': expected block or spin (UKL_MPI_WAIT)"),
    ({"UKL_MPI_TIMEOUT": "0"}, "invalid value '0': expected an integer from 1 to 86400 (UKL_MPI_TIMEOUT)"),
    ({"UKL_MPI_FINALIZE_TIMEOUT": "-1"},
     "invalid value '-1': expected an integer from 0 to 86400 (UKL_MPI_FINALIZE_TIMEOUT)"),
    ({"UKL_MPI_FINALIZE_TIMEOUT": "1m"},
     "invalid value '1m': expected an integer from 0 to 86400 (UKL_MPI_FINALIZE_TIMEOUT)"),
    ({"UKL_MPI_PORT": "70000"}, "invalid value '70000': expected an integer from 1 to 65535 (UKL_MPI_PORT)"),
    ({"UKL_MPI_STATS": "yes"}, "invalid value 'yes': expected 0 or 1 (UKL_MPI_STATS)"),
    ({"UKL_MPI_HOSTS": "10.0.0.1,10.0.0"}, "entry 1: '10.0.0' is not an IPv4 address (UKL_MPI_HOSTS)"),
    ({"UKL_MPI_HOSTS": "10.0.0.1,,10.0.0.3"},
     "entry 1 of '10.0.0.1,,10.0.0.3' is empty: expected ADDR or ADDR:PORT (UKL_MPI_HOSTS)"),
    ({"UKL_MPI_HOSTS": "10.0.0.1:0,10.0.0.2"}, "entry 0: '0' is not a port from 1 to 65535 (UKL_MPI_HOSTS)"),
    ({"UKL_MPI_HOSTS": ""}, "UKL_MPI_HOSTS is empty (unset it for a world of one rank) (UKL_MPI_HOSTS)"),
    ({"UKL_MPI_HOSTS": None, "UKL_MPI_RANK": "1"},
     "UKL_MPI_RANK=1 without UKL_MPI_HOSTS (a world of one rank) (UKL_MPI_RANK)"),
])
def test_bad_values_are_named(mpicheck, env, message):
    full = {"UKL_MPI_HOSTS": "10.0.0.1,10.0.0.2", "UKL_MPI_RANK": "0", **env}
    res = subprocess.run([str(mpicheck)], capture_output=True, text=True, timeout=30,
                         env=clean_env(**{k: v for k, v in full.items() if v is not None}))
    assert (res.returncode, res.stdout, res.stderr) == (1, "", f"ukl-mpi: rank ?: {message}\n")


def test_mpich_prints_the_same(mpicheck, tmp_path):
    """The same program under Debian's MPICH: the same lines on every rank,
    and MPI_Abort's code as mpiexec's status."""
    mpicc, mpiexec = shutil.which("mpicc"), shutil.which("mpiexec")
    if not mpicc or not mpiexec:
        pytest.skip("Debian's MPICH (mpicc, mpiexec) is not installed: apt-get install mpich libmpich-dev")
    exe = tmp_path / "mpicheck-mpich"
    subprocess.run([mpicc, "-O2", "-o", str(exe), str(APP)], check=True)

    def mpich(*args: str) -> tuple[int, list[str]]:
        res = subprocess.run([mpiexec, "-launcher", "fork", "-n", "3", "-outfile-pattern", str(tmp_path / "out.%r"),
                              str(exe), *args], capture_output=True, text=True, timeout=60, env=clean_env())
        return res.returncode, [(tmp_path / f"out.{r}").read_text() for r in range(3)]

    rc, outs = mpich()
    assert rc == 0, outs
    ours = run_ranks(mpicheck)
    for r in range(3):
        assert_all_ok(r, 3, outs[r])
        assert ours[r].out == outs[r]
    rc, _ = mpich("abort")
    assert rc != 0


# A program whose rank 1 fails its peers at the end: it returns without
# MPI_Finalize ("exit"), is killed ("kill"), stops (SIGSTOP, as a guest
# whose machine is gone: its connections stay open and nothing is read),
# or stops or is killed with a 64 MiB MPI_Isend from rank 0 still queued
# for it ("isend", "isendkill"; rank 0 never waits for it: MPI_Finalize
# must write it). Or it is only late ("late"): it reads that MPI_Isend and
# finalizes 3 s after the others.
ENDS = r"""
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BIG (64 << 20)

int main(int argc, char **argv)
{
	const char *how = argc > 1 ? argv[1] : "";
	static char big[BIG];
	int rank, token = 0;
	MPI_Request req;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	/* every rank is up and connected: a token from rank 0 to the others */
	if (rank == 0) {
		MPI_Send(&token, 1, MPI_INT, 1, 1, MPI_COMM_WORLD);
		MPI_Send(&token, 1, MPI_INT, 2, 1, MPI_COMM_WORLD);
	} else {
		MPI_Recv(&token, 1, MPI_INT, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	}
	if (rank == 0 && (strstr(how, "isend") || !strcmp(how, "late")))
		MPI_Isend(big, BIG, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req);
	if (rank == 1 && !strcmp(how, "late")) {
		sleep(3);
		MPI_Recv(big, BIG, MPI_BYTE, 0, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
	} else if (rank == 1) {
		printf("rank 1: %s\n", how);
		fflush(stdout);
		if (!strcmp(how, "exit"))
			return 0;
		raise(strstr(how, "kill") ? SIGKILL : SIGSTOP);
		return 0;
	}
	MPI_Finalize();
	printf("rank %d: finalized\n", rank);
	return 0;
}
"""


@pytest.fixture(scope="module")
def ends(mpicheck, tmp_path_factory) -> Path:
    """ENDS linked with the libukl-mpi.a mpicheck was."""
    exe = tmp_path_factory.mktemp("ends") / "ends"
    src = exe.with_suffix(".c")
    src.write_text(ENDS)
    prefix = mpicheck.parent / "prefix"
    subprocess.run([host_cc(), "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I", str(prefix / "include"),
                    "-o", str(exe), str(src), "-L", str(prefix / "lib"), "-lukl-mpi"], check=True)
    return exe


def start_ending(exe: Path, how: str, **env: str) -> tuple[list[subprocess.Popen[str]], int]:
    """Three ranks of EXE HOW with ENV; the processes and rank 1's port."""
    ports = free_ports(3)
    hosts = ",".join(f"127.0.0.1:{p}" for p in ports)
    return [subprocess.Popen([str(exe), how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=clean_env(UKL_MPI_HOSTS=hosts, UKL_MPI_RANK=str(r), **env))
            for r in range(3)], ports[1]


def run_ending(exe: Path, how: str, limit: int | None) -> tuple[list[Rank], float, int]:
    """Three ranks of EXE HOW, with UKL_MPI_FINALIZE_TIMEOUT=LIMIT if given;
    ranks 0 and 2 (rank 1 is killed after them, stopped or not), the
    seconds until both ended, and rank 1's port."""
    t0 = time.monotonic()
    procs, port = start_ending(exe, how, **({"UKL_MPI_FINALIZE_TIMEOUT": str(limit)} if limit else {}))
    try:
        done = []
        for p in (procs[0], procs[2]):
            out, err = p.communicate(timeout=(limit or 0) + 30)
            done.append(Rank(p.returncode, out, err))
        return done, time.monotonic() - t0, port
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def gone_message(r: int, port: int) -> str:
    return (f"ukl-mpi: rank {r}: MPI_Finalize: the connection closed without the peer's MPI_Finalize: it ended "
            f"without it, or was killed (rank 1 at 127.0.0.1:{port})\n")


@pytest.mark.parametrize("how", ["exit", "kill"])
def test_a_rank_that_ends_without_finalize_fails_the_others_finalize(ends, how):
    """Under mpiexec a rank that ends without MPI_Finalize fails the job;
    here the others' MPI_Finalize says so at once (its connection closed
    without its goodbye), instead of returning success. No limit is set:
    the end of file is the evidence."""
    ranks, seconds, port = run_ending(ends, how, None)
    assert seconds < 10
    for r, res in zip((0, 2), ranks, strict=True):
        assert (res.rc, res.out) == (1, ""), res
        assert res.err == gone_message(r, port), res.err


def test_a_peer_killed_while_finalize_writes_to_it_fails_it_at_once(ends):
    """Rank 0's MPI_Finalize still has most of a 64 MiB MPI_Isend to write
    to rank 1 when rank 1 is killed: the reset (or the end of file) ends it
    with an error naming rank 1, without any limit set."""
    ranks, seconds, port = run_ending(ends, "isendkill", None)
    assert seconds < 10
    r0, r2 = ranks
    assert (r0.rc, r0.out) == (1, ""), r0
    assert re.fullmatch(r"ukl-mpi: rank 0: (MPI_Finalize: the connection closed without the peer's MPI_Finalize: "
                        r"it ended without it, or was killed|MPI_Finalize: the connection was reset before the peer "
                        r"took this rank's last messages \(\d+ bytes unsent\): it ended, or was killed|sending a "
                        r"message with tag 2: (Broken pipe|Connection reset by peer)) "
                        rf"\(rank 1 at 127\.0\.0\.1:{port}\)\n", r0.err), r0.err
    assert (r2.rc, r2.err) == (1, gone_message(2, port))


def test_a_late_rank_is_waited_for_as_mpich_does(ends):
    """Rank 1 reads rank 0's 64 MiB MPI_Isend and finalizes 3 s after the
    others, longer than UKL_MPI_TIMEOUT (the setup's): ranks 0 and 2 wait
    for it in MPI_Finalize and every rank succeeds."""
    t0 = time.monotonic()
    ranks = run_ranks(ends, "late", UKL_MPI_TIMEOUT="1")
    assert time.monotonic() - t0 >= 3
    for r, res in enumerate(ranks):
        assert (res.rc, res.out, res.err) == (0, f"rank {r}: finalized\n", ""), res


def test_a_stopped_peer_is_waited_for_until_it_is_gone(ends):
    """Without UKL_MPI_FINALIZE_TIMEOUT a peer that is alive (here stopped)
    is waited for, past UKL_MPI_TIMEOUT; once it is killed, the others'
    MPI_Finalize fails at once, naming it."""
    procs, port = start_ending(ends, "stop", UKL_MPI_TIMEOUT="1")
    try:
        assert procs[1].stdout is not None
        assert procs[1].stdout.readline() == "rank 1: stop\n"
        time.sleep(3)
        assert procs[0].poll() is None and procs[2].poll() is None
        procs[1].kill()
        for r in (0, 2):
            out, err = procs[r].communicate(timeout=10)
            assert (procs[r].returncode, out, err) == (1, "", gone_message(r, port))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()


def test_a_peer_that_never_finalizes_is_an_error_within_the_limit(ends):
    """A peer that stops (or whose machine is gone: its connection stays
    open) before MPI_Finalize: with UKL_MPI_FINALIZE_TIMEOUT set, the
    others' MPI_Finalize ends with an error naming it after that limit."""
    ranks, seconds, port = run_ending(ends, "stop", 2)
    assert 2 <= seconds < 10
    for r, res in zip((0, 2), ranks, strict=True):
        assert (res.rc, res.out) == (1, ""), res
        assert res.err == (f"ukl-mpi: rank {r}: MPI_Finalize: rank 1 at 127.0.0.1:{port} did not finalize "
                           "within 2 s (UKL_MPI_FINALIZE_TIMEOUT)\n"), res.err


def test_finalize_writing_to_a_peer_that_reads_nothing_ends_within_the_limit(ends):
    """MPI_Finalize writes what is queued (here 64 MiB of an MPI_Isend) to a
    stopped peer: with UKL_MPI_FINALIZE_TIMEOUT set, it gives up then."""
    ranks, seconds, port = run_ending(ends, "isend", 2)
    assert 2 <= seconds < 10
    (r0, r2) = ranks
    assert (r0.rc, r0.out) == (1, ""), r0
    m = re.fullmatch(rf"ukl-mpi: rank 0: MPI_Finalize: rank 1 at 127\.0\.0\.1:{port} \((\d+) bytes unsent\) did not "
                     r"take this rank's last messages within 2 s \(UKL_MPI_FINALIZE_TIMEOUT\)\n", r0.err)
    assert m, r0.err
    assert 0 < int(m.group(1)) <= (64 << 20) + 2 * 16   # the message's rest and the goodbye
    assert (r2.rc, r2.err) == (1, f"ukl-mpi: rank 2: MPI_Finalize: rank 1 at 127.0.0.1:{port} did not finalize "
                                  "within 2 s (UKL_MPI_FINALIZE_TIMEOUT)\n")
