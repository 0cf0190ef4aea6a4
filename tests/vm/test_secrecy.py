"""Secrecy (apps/secrecy, issue 45) as three guests under `ukl cluster`:
its own GROUP-BY test opens every result to rank 0 and checks it, and
the opened results are the same in ring 0 with the TCP shortcut as on
stock Linux; its GROUP-BY experiment completes in both."""

from __future__ import annotations

import re

import pytest

from conftest import assert_clean, ukl

CASES = ["linux", "base+ret+byp+shortcut"]
OKS = ["GROUP_BY_COUNT_SEL", "GROUP_BY_COUNT", "GROUP_BY_SUM_SEL_RCA", "GROUP_BY_SUM_RCA", "GROUP_BY_AVG"]


def _opts(case: str) -> list[str]:
    return ["--opts", case.split("+", 1)[1].replace("+", ",")] if "+" in case else []


@pytest.fixture(scope="module")
def images(outdir):
    built = {}
    for name in ("secrecy", "secrecy-tests"):
        for config in sorted({c.split("+")[0] for c in CASES}):
            out = outdir / f"{name}-{config}"
            res = ukl("build", name, "--config", config, "-o", out)
            assert res.returncode == 0, res.stdout[-3000:]
            built[name, config] = out
    return built


def node0(stdout: str) -> list[str]:
    return [line[4:] for line in stdout.splitlines() if line.startswith("[0] ")]


@pytest.fixture(scope="module")
def opened(images):
    """Each case's run of the test: node 0's lines."""
    out = {}
    for case in CASES:
        image = images["secrecy-tests", case.split("+")[0]]
        res = ukl("cluster", image, "--nodes", "3", "--timeout", "600", *_opts(case), timeout=900)
        assert res.returncode == 0, res.stdout[-3000:]
        for i in range(3):
            assert f"ukl: node {i} (10.0.3.{11 + i}): exit 0" in res.stdout
            assert_clean(image / "cluster" / f"node{i}.log")
        out[case] = node0(res.stdout)
    return out


@pytest.mark.parametrize("case", CASES)
def test_secrecy_s_group_by_test_passes_on_three_guests(opened, case):
    for name in OKS:
        assert f"TEST {name} (ODD-EVEN): OK." in opened[case], opened[case]


def test_the_opened_results_are_linux_s(opened):
    rows = {case: [line for line in lines if re.fullmatch(r"\(-?\d+ -?\d+ -?\d+\) (-?\d+ )?", line)]
            for case, lines in opened.items()}
    assert len(rows["linux"]) == 5 * 16, opened["linux"]
    assert rows["base+ret+byp+shortcut"] == rows["linux"]


@pytest.mark.parametrize("case", CASES)
def test_the_group_by_experiment_completes(images, case):
    image = images["secrecy", case.split("+")[0]]
    res = ukl("cluster", image, "--timeout", "600", *_opts(case), "--", "128", "1", timeout=900)
    assert res.returncode == 0, res.stdout[-3000:]
    assert any(re.fullmatch(r"128\tGROUP-BY\t\d+\.\d{3}", line) for line in node0(res.stdout)), res.stdout
