"""`ukl libc`: the C library tree and glibc's own tests."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ukltool.apps import glibctests
from ukltool.cli.common import Deprecated, add_command, list_arg, report_options, timeout_option, tree_actions
from ukltool.glibc import libc
from ukltool.source import sources
from ukltool.util import ui


def libc_parser(sub: argparse._SubParsersAction) -> None:
    lb = add_command(sub, "libc", "the glibc port: its tree, patches and glibc's own tests",
                     "Work on the glibc port (libc/) and run glibc's tests in ring 0 (docs/design/glibc-port.md).",
                     ("ukl libc build", "ukl libc tests --tests tst-atexit,tst-cleanup0"), listed=False)
    ls_ = lb.add_subparsers(dest="lcmd", metavar="ACTION", required=True)
    add_command(ls_, "build", "build glibc for UKL (incremental) and print its build directory",
                examples=("ukl libc build",)).set_defaults(func=lambda a: print(libc.build().objdir))
    tree_actions(ls_, libc.SERIES, lambda: sources.glibc_tree()[1], libc.TREE_LOCK, "libc")
    lt = add_command(ls_, "tests", "run a selection of glibc's own tests linked into the kernel",
                     "Build glibc's tests (listed in tools/ukltool/apps/glibctests.py) into one UKL image, run each "
                     "in its own boot under --config base, and report pass/fail per test.",
                     ("ukl libc tests", "ukl libc tests --tests tst-atexit --logs out/gt",
                      "ukl libc tests --markdown docs/results/glibc-tests.md"))
    lt.add_argument("--tests", type=list_arg, default=None, metavar="LIST",
                    help="comma-separated: run only these tests")
    lt.add_argument("--only", nargs="+", dest="tests", action=Deprecated, use="--tests A,B",
                    convert=lambda ns, v: list_arg(",".join(v)))
    lt.add_argument("--logs", type=Path, default=Path("out/glibc-tests"), metavar="DIR",
                    help="where each test's console log goes (default out/glibc-tests)")
    timeout_option(lt, 300.0)
    report_options(lt, from_json=False)
    lt.set_defaults(func=cmd_libc_tests)


def cmd_libc_tests(a: argparse.Namespace) -> int:
    outcomes = glibctests.run_all(a.logs, a.timeout, a.tests)
    table = Table("directory", "test", "result", "status", "seconds", title="glibc tests in ring 0")
    for o in outcomes:
        table.add_row(o.subdir, o.test, o.verdict, "-" if o.status is None else str(o.status), f"{o.seconds:.0f}")
    ui.report_console().print(table)
    unexplained = [o.test for o in outcomes if o.verdict == "FAIL" and o.test not in glibctests.EXPLAINED]
    n_pass = sum(o.verdict == "PASS" for o in outcomes)
    ui.info(f"{n_pass} of {len(outcomes)} pass; logs in {a.logs / 'logs'}")
    if a.json:
        glibctests.save_json(outcomes, a.json)
    if a.markdown:
        a.markdown.write_text(glibctests.markdown(outcomes, libc.build().version))
    if unexplained:
        ui.err.print("ukl: failures without an explanation: " + ", ".join(unexplained), markup=False)
        return 1
    return 0
