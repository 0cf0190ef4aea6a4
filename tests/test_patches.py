"""The kernel patch series: applies (the build tests prove it) and is clean."""

from __future__ import annotations

from conftest import ukl


def test_checkpatch_strict_reports_no_errors():
    res = ukl("kernel", "checkpatch")
    assert res.returncode == 0, res.stdout
    assert " 0 errors" in res.stdout
