"""`ukl conformance ltp` without a VM: reading LTP's output from a console
log, summarising a test's results, the data files, the divergence check
and the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REPO, ukl
from ukltool.apps import ltp
from ukltool.util.errors import UklError

# A console as a boot writes it: kernel messages, init, the dispatcher's
# markers around LTP's own output (absolute source paths, as the
# out-of-tree build compiles them), a test whose output lacks a final
# newline, and a test the VM ended in.
CONSOLE = """\
[    0.000000] Linux version 6.1.192-ukl
ukl-init: starting /ukl/ltp\r
ukl-ltp: begin read01
/src/ltp/lib/tst_test.c:2048: TINFO: LTP version: 20260529
/src/ltp/testcases/kernel/syscalls/read/read01.c:24: TPASS: read(2) returned 512

Summary:
passed   1
failed   0
broken   0
skipped  0
warnings 0

ukl-ltp: end read01 exit 0 in 0.1s
ukl-ltp: begin dup01
/src/ltp/testcases/kernel/syscalls/dup/dup01.c:20: TPASS: dup() returned 4
/src/ltp/testcases/kernel/syscalls/dup/dup01.c:22: TFAIL: dup() returned 5, expected 4
[    3.123456] random: crng init done
Summary:
passed   1
failed   1
broken   0
skipped  0
warnings 0
ukl-ltp: end dup01 exit 1 in 0.4s
ukl-ltp: begin fcntl40
/src/ltp/lib/tst_test.c:1000: TCONF: kernel lacks something
Summary:
passed   0
failed   0
broken   0
skipped  1
warnings 0
ukl-ltp: end fcntl40 exit 32 in 0.0s
ukl-ltp: begin kill03
partial line without newline
ukl-ltp: end kill03 signal 11 in 1.5s
ukl-ltp: begin pipe01
ukl-ltp: end pipe01 timeout 300 in 300.0s
ukl-ltp: begin fork01
/src/ltp/testcases/kernel/syscalls/fork/fork01.c:45: TPASS: correct child status returned 42
[    9.000000] BUG: kernel NULL pointer dereference, address: 0000000000000000
"""


def test_console_gives_each_tests_counts_end_and_seconds():
    con = ltp.parse_console(CONSOLE, "base")
    assert list(con.done) == ["read01", "dup01", "fcntl40", "kill03", "pipe01"]
    r = con.done["read01"]
    assert (r.result, r.passed, r.failed, r.end, r.seconds, r.config) == ("TPASS", 1, 0, "exit 0", 0.1, "base")
    d = con.done["dup01"]
    assert (d.result, d.passed, d.failed) == ("TFAIL", 1, 1)
    assert d.notes == ["testcases/kernel/syscalls/dup/dup01.c:22: TFAIL: dup() returned 5, expected 4"]
    assert con.done["fcntl40"].result == "TCONF"
    assert (con.done["kill03"].result, con.done["kill03"].end) == ("TBROK", "signal 11")
    assert (con.done["pipe01"].result, con.done["pipe01"].end) == ("TBROK", "timeout 300")
    assert con.unfinished == "fork01"
    assert any("TPASS" in line for line in con.unfinished_lines)


def test_a_kernel_failure_during_a_test_breaks_it():
    text = ("ukl-ltp: begin a\n[    2.000000] WARNING: CPU: 0 PID: 40 at mm/x.c:1 f+0x1/0x2\n"
            "x.c:1: TPASS: fine\nSummary:\npassed 1\nukl-ltp: end a exit 0 in 0.1s\n")
    o = ltp.parse_console(text, "base").done["a"]
    assert o.result == "TBROK" and o.notes[0].startswith("kernel: [    2.000000] WARNING")


def test_a_marker_of_another_test_does_not_end_the_current_one():
    text = "ukl-ltp: begin a\nukl-ltp: end b exit 0 in 0.1s\n"
    con = ltp.parse_console(text, "linux")
    assert con.done == {} and con.unfinished == "a"


@pytest.mark.parametrize("counts,how,code,want", [
    ({"passed": 3}, "exit", 0, "TPASS"),
    ({}, "exit", 0, "TPASS"),                                  # no summary, status 0
    ({"passed": 2, "skipped": 1}, "exit", 0, "TPASS"),         # some variants not supported
    ({"skipped": 2}, "exit", 32, "TCONF"),
    ({"passed": 2, "failed": 1}, "exit", 1, "TFAIL"),
    ({"passed": 2, "warnings": 1}, "exit", 4, "TFAIL"),        # a warning is a failure
    ({"passed": 1, "failed": 1, "broken": 1}, "exit", 3, "TBROK"),
    ({}, "exit", 2, "TBROK"),                                   # tst_brk before any summary
    ({}, "exit", 1, "TFAIL"),
    ({"passed": 1}, "exit", 139, "TBROK"),                      # not an LTP status
    ({"passed": 1}, "signal", 9, "TBROK"),
    ({"passed": 1}, "timeout", 300, "TBROK"),
    ({"passed": 1}, "no end", None, "TBROK"),
])
def test_a_tests_result_is_the_worst_it_reported(counts, how, code, want):
    assert ltp.summarize(counts, how, code) == want


def test_results_are_the_four_words():
    assert set(ltp.RESULTS) == {"TPASS", "TFAIL", "TBROK", "TCONF"} == set(ltp.WORST_FIRST)


def test_lists_parse_and_select():
    assert ltp.parse_list("# c\nread01\n\nwrite01  # x\nread01\n") == ["read01", "write01"]
    assert ltp.selection("read01,ci,read01")[0] == "read01"
    ci = ltp.parse_list(ltp.list_path("ci").read_text())
    assert ltp.selection("ci") == ci
    with pytest.raises(UklError, match="not a test name"):
        ltp.selection("read01,../etc")
    with pytest.raises(UklError, match="names no test"):
        ltp.selection(" , ")


def test_data_files_are_consistent():
    quick = ltp.parse_list(ltp.list_path("quick").read_text())
    ci = ltp.parse_list(ltp.list_path("ci").read_text())
    assert len(quick) >= 30
    assert set(ci) <= set(quick), "the CI subset is part of the quick list"
    listed = {t for name in ltp.list_names() for t in ltp.parse_list(ltp.list_path(name).read_text())}
    assert len(ltp.parse_list(ltp.list_path("syscalls").read_text())) >= 300
    for d in ltp.load_divergences():
        assert d.test in listed and d.reason and d.configs, d
    src = ltp.load_source()
    assert len(src.commit) == 40 and len(src.sha256) == 64 and src.tarball.endswith(".tar.xz")


def test_unknown_and_old_api_tests_are_refused(tmp_path):
    tree = tmp_path / "ltp"
    d = tree / ltp.SYSCALLS / "foo"
    d.mkdir(parents=True)
    (d / "foo01.c").write_text('#include "tst_test.h"\nstatic struct tst_test test;\n')
    (d / "foo02.c").write_text('#include "test.h"\nchar *TCID = "foo02";\n')
    index = ltp.test_index(tree)
    assert index["foo01"] == Path(ltp.SYSCALLS) / "foo" / "foo01.c"
    ltp.check_tests(["foo01"], index, tree)
    with pytest.raises(UklError, match="unknown LTP test: bar01"):
        ltp.check_tests(["foo01", "bar01"], index, tree)
    with pytest.raises(UklError, match="old API"):
        ltp.check_tests(["foo02"], index, tree)


def test_a_missing_tarball_says_where_to_get_it(monkeypatch, tmp_path):
    monkeypatch.setenv("UKL_CACHE", str(tmp_path))
    monkeypatch.delenv("UKL_LTP_TARBALL", raising=False)
    src = ltp.Source("https://github.com/linux-test-project/ltp", "0" * 40, "ltp-none.tar.xz", "0" * 64)
    with pytest.raises(UklError) as e:
        ltp.find_tarball(src)
    assert "ltp-none.tar.xz is missing" in e.value.message
    assert e.value.hint and "git clone https://github.com/linux-test-project/ltp" in e.value.hint


def test_dispatcher_table_names_each_tests_renamed_main():
    assert ltp.tests_header(["read01", "dup3_01"]) == ('LTP_TEST("read01", ltp_main_read01)\n'
                                                       'LTP_TEST("dup3_01", ltp_main_dup3_01)\n')
    text = ltp.DISPATCHER.read_text()
    for marker in ("ukl-ltp: begin %s", "ukl-ltp: end %s exit %d in %.1fs", "ukl-ltp: end %s signal %d in %.1fs",
                   "ukl-ltp: end %s timeout %.0f in %.1fs"):
        assert marker in text, marker


def _o(test: str, config: str, result: str) -> ltp.Outcome:
    return ltp.Outcome(test, config, result)


def test_divergences_are_those_passing_under_linux_only():
    rows = [_o("a", "linux", "TPASS"), _o("a", "base", "TFAIL"),
            _o("b", "linux", "TPASS"), _o("b", "base", "TPASS"),
            _o("c", "linux", "TCONF"), _o("c", "base", "TBROK"),   # not a pass under linux: not counted
            _o("d", "linux", "TPASS"), _o("d", "base", "TCONF"), _o("d", "base+ret", "TBROK")]
    assert [(o.test, o.config) for o in ltp.divergent(rows)] == [("a", "base"), ("d", "base"), ("d", "base+ret")]
    divs = [ltp.Divergence("a", ("base",), "bug", "x"), ltp.Divergence("d", ("*",), "model", "y")]
    assert ltp.unexplained(rows, divs) == []
    assert [o.test for o in ltp.unexplained(rows, divs[:1])] == ["d", "d"]


def test_divergence_file_errors_name_the_entry(tmp_path):
    f = tmp_path / "d.toml"
    f.write_text('[[divergence]]\ntest = "a"\nconfigs = ["base"]\nkind = "maybe"\nreason = "r"\n')
    with pytest.raises(UklError, match="kind 'maybe'"):
        ltp.load_divergences(f)
    f.write_text('[[divergence]]\ntest = "a"\n')
    with pytest.raises(UklError, match="lacks 'configs'"):
        ltp.load_divergences(f)


def test_report_rows_and_markdown(tmp_path):
    rows = [_o("a", "linux", "TPASS"), _o("a", "base", "TFAIL"), _o("b", "linux", "TCONF"),
            _o("b", "base", "TCONF")]
    path = tmp_path / "r.json"
    ltp.save_json(rows, path)
    data = json.loads(path.read_text())
    assert all({"test", "config", "result"} <= set(r) and r["result"] in ltp.RESULTS for r in data)
    assert ltp.load_json(path) == rows
    md = ltp.markdown(rows, ["linux", "base"], [ltp.Divergence("a", ("base",), "bug", "why")], "ukl conformance ltp")
    assert "| a | TPASS | TFAIL | base: bug: why |" in md
    assert "| linux | 1 | 0 | 0 | 1 |" in md


def test_cli_refuses_a_baseline_other_than_linux_and_unknown_configs():
    res = ukl("conformance", "ltp", "--configs", "base,linux", "--from-json", "/nonexistent")
    assert res.returncode == 2 and "must be linux" in res.stdout
    res = ukl("conformance", "ltp", "--configs", "linux,nosuch", "--from-json", "/nonexistent")
    assert res.returncode == 2 and "unknown configuration 'nosuch'" in res.stdout


def test_cli_reports_saved_rows_and_fails_on_an_unexplained_divergence(tmp_path):
    path = tmp_path / "r.json"
    ltp.save_json([_o("zz99", "linux", "TPASS"), _o("zz99", "base", "TFAIL")], path)
    res = ukl("conformance", "ltp", "--from-json", path, "--markdown", tmp_path / "r.md")
    assert res.returncode == 1, res.stdout
    assert "zz99 (base TFAIL)" in res.stdout and (tmp_path / "r.md").is_file()
    assert str(REPO / "tests" / "ltp" / "divergences.toml") in res.stdout


def test_every_break_under_linux_in_the_report_has_a_reason():
    """docs/results/conformance-ltp.md explains each TBROK under linux from
    tests/ltp/environment.toml; a test named there is in the selection."""
    outcomes = ltp.load_json(REPO / "docs" / "results" / "conformance-ltp.json")
    gaps = ltp.load_gaps()
    named = [t for g in gaps for t in g.tests]
    assert len(named) == len(set(named)) and all(g.reason for g in gaps)
    assert set(named) <= set(ltp.selection("syscalls"))
    broken = {o.test for o in outcomes if o.config == "linux" and o.result == "TBROK"}
    assert broken and broken <= set(named), broken - set(named)
    lines = ltp.gap_lines(outcomes, "linux", gaps)
    assert "## Why tests break under linux too" in lines and not any("no reason recorded" in x for x in lines)
    fake = [ltp.Outcome(**{**vars(outcomes[0]), "test": "new01", "config": "linux", "result": "TBROK"})]
    assert ltp.gap_lines(fake, "linux", gaps)[-1] == "- new01: no reason recorded yet."
