"""LTP's system-call tests as UKL applications (`ukl conformance ltp`), the
CI subset (tests/ltp/ci.txt) under linux and base: every test that passes
under linux passes under base or is listed in tests/ltp/divergences.toml,
and the report has one complete row per test and configuration."""

from __future__ import annotations

import json

from conftest import ukl
from ukltool.apps import ltp

CONFIGS = ["linux", "base"]


def test_ltp_ci_subset_under_linux_and_base(tmp_path):
    tests = ltp.parse_list(ltp.list_path("ci").read_text())
    res = ukl("conformance", "ltp", "--configs", ",".join(CONFIGS), "--tests", "ci", "-o", tmp_path,
              "--json", tmp_path / "r.json", "--markdown", tmp_path / "r.md", timeout=1800)
    assert res.returncode == 0, res.stdout[-4000:]
    rows = json.loads((tmp_path / "r.json").read_text())
    # Complete: each test once per configuration, each with one of the four results
    assert sorted((r["test"], r["config"]) for r in rows) == sorted((t, c) for t in tests for c in CONFIGS)
    assert all(r["result"] in ltp.RESULTS for r in rows), rows
    outcomes = ltp.load_json(tmp_path / "r.json")
    assert ltp.unexplained(outcomes, ltp.load_divergences()) == []
    # The subset is chosen to pass under linux: a test that stops passing
    # there is a change of the environment, not of UKL
    broken = [r for r in rows if r["config"] == "linux" and r["result"] != "TPASS"]
    assert not broken, broken
    assert "| read01 | TPASS |" in (tmp_path / "r.md").read_text()
