"""`ukl conformance ltp`: the Linux Test Project under UKL."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from ukltool.apps import ltp
from ukltool.cli.common import (
    Deprecated,
    add_command,
    configs_arg,
    configs_option,
    count_arg,
    positive_arg,
    report_options,
    safe_list,
)
from ukltool.util import ui
from ukltool.util.errors import UklError


def conformance_parser(sub: argparse._SubParsersAction) -> None:
    """`ukl conformance ltp` (ltp.py)."""
    cf = add_command(sub, "conformance", "suites written elsewhere (LTP), run under each configuration",
                     "Suites of other projects, run under each configuration against linux's results.",
                     ("ukl conformance ltp --configs linux,base",), listed=False)
    cs = cf.add_subparsers(dest="ccmd", metavar="SUITE", required=True)
    lp = add_command(cs, "ltp", "LTP's system-call tests as UKL applications",
                     "Build LTP's system-call tests (testcases/kernel/syscalls, the commit in tests/ltp/source.toml) "
                     "into one program per configuration behind a dispatcher, boot it under each configuration "
                     "running each test as its own process, and report TPASS, TFAIL, TBROK or TCONF per test (the "
                     "worst it reported). A test that passes under linux and not under another configuration must be "
                     "listed in tests/ltp/divergences.toml, or the command fails.",
                     ("ukl conformance ltp --configs linux,base --tests getpid01,read01",
                      "ukl conformance ltp --configs linux,base+byp --json out/ltp.json --markdown out/ltp.md"))
    configs_option(lp)
    lp.add_argument("--tests", default=ltp.DEFAULT_LIST, metavar="LIST",
                    help="comma-separated test names and lists of tests/ltp/ (default "
                    f"{ltp.DEFAULT_LIST}; lists: {safe_list(ltp.list_names)})")
    lp.add_argument("--batch", type=count_arg, default=ltp.DEFAULT_BATCH, metavar="N",
                    help=f"tests per boot (default {ltp.DEFAULT_BATCH})")
    lp.add_argument("--test-timeout", type=positive_arg, default=ltp.DEFAULT_TIMEOUT, metavar="S",
                    help=f"seconds each test may take, inside the guest (default {ltp.DEFAULT_TIMEOUT:.0f})")
    lp.add_argument("--timeout", type=positive_arg, dest="test_timeout", action=Deprecated, use="--test-timeout S")
    lp.add_argument("--logs", type=Path, default=Path("out/ltp"), metavar="DIR",
                    help="the suite's images and each boot's console log (default out/ltp)")
    # -o names an image's directory in `ukl build`; here it meant the logs
    lp.add_argument("-o", "--output", dest="logs", type=Path, action=Deprecated, use="--logs DIR")
    report_options(lp)
    lp.set_defaults(func=cmd_conformance_ltp)


def cmd_conformance_ltp(a: argparse.Namespace) -> int:
    configs = configs_arg(a.configs)
    if configs[0] != "linux":
        raise UklError(f"--configs {a.configs}: the first configuration is the baseline and must be linux",
                       "for example --configs linux,base")
    divergences = ltp.load_divergences()
    if a.from_json:
        outcomes = [o for f in a.from_json for o in ltp.load_json(f) if o.config in configs]
    else:
        outcomes = ltp.run_all(configs, ltp.selection(a.tests), a.logs, a.batch, a.test_timeout)
    table = Table("test", *configs, "divergence", title="LTP system-call tests")
    for test, row in ltp.by_test(outcomes).items():
        notes = [f"{o.config}: {d.kind}" if (d := ltp.explanation(test, o.config, divergences)) else
                 f"{o.config}: unexplained" for o in ltp.divergent(list(row.values()))]
        table.add_row(test, *(row[c].result if c in row else "-" for c in configs), ", ".join(notes))
    ui.report_console().print(table)
    for c in configs:
        ui.info(f"{c}: " + ", ".join(f"{n} {r}" for r, n in ltp.counts(outcomes, c).items()))
    if a.json:
        ltp.save_json(outcomes, a.json)
    if a.markdown:
        a.markdown.write_text(ltp.markdown(outcomes, configs, divergences,
                                           f"./ukl conformance ltp --configs {','.join(configs)} --tests {a.tests}"))
    bad = ltp.unexplained(outcomes, divergences)
    if bad:
        ui.err.print("ukl: pass under linux, not under: " + ", ".join(f"{o.test} ({o.config} {o.result})"
                                                                      for o in bad), markup=False)
        ui.err.print(f"  hint: explain each in {ltp.DIVERGENCES_FILE} or fix it; logs in {a.logs / 'logs'}",
                     markup=False)
        return 1
    return 0
