"""`ukl apptest`: the applications' own test suites."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ukltool.apps import apptest
from ukltool.cli.common import (
    Deprecated,
    add_command,
    configs_arg,
    configs_option,
    list_arg,
    report_options,
    timeout_option,
)
from ukltool.util import ui


def apptest_parser(sub: argparse._SubParsersAction) -> None:
    at = add_command(sub, "apptest", "run an application's own test suite against it in the guest",
                     "Build the recipe's image, start the application in the guest (on a tap device or behind a "
                     "forwarded port), and run the application's own test suite on the host against it (the recipe's "
                     "[tests]: for redis, ./runtest --host --port).",
                     ("ukl apptest redis --configs linux,base",
                      "ukl apptest redis --configs base --units unit/type/incr,unit/type/list --json out/a.json",
                      "ukl apptest redis --from-json out/linux.json --from-json out/base.json"), listed=False)
    at.add_argument("name", metavar="NAME", help="a recipe with a [tests] section (redis, memcached)")
    configs_option(at)
    at.add_argument("--all", action="store_true", help="the whole suite, not the recipe's units")
    at.add_argument("--units", type=list_arg, default=[], metavar="LIST",
                    help="comma-separated: run these units instead of the recipe's")
    at.add_argument("--unit", dest="units", action=Deprecated, use="--units A,B",
                    convert=lambda ns, v: [*(getattr(ns, "units", None) or []), *list_arg(str(v))])
    timeout_option(at, 3600.0)
    at.add_argument("--network", choices=("auto", "tap", "user"), default="auto",
                    help="tap: the guest on a tap device in a private network namespace (root); user: QEMU's "
                    "user network and a forwarded port; auto (default): tap where it can be made")
    at.add_argument("--pid1", action="store_true",
                    help="the kernel starts the application as PID 1 and configures its network from ip= "
                    "(`ukl run --pid1`), with no init program (UKL configurations)")
    report_options(at)
    at.set_defaults(func=cmd_apptest)


def cmd_apptest(a: argparse.Namespace) -> int:
    configs = configs_arg(a.configs)
    if a.from_json:
        outcomes = apptest.load_json(a.from_json)
    else:
        for c in configs:   # every configuration checked before any suite runs
            apptest.check_config(c, a.pid1)
        outcomes = [apptest.run(a.name, c, a.all, a.timeout, a.units, a.network, a.pid1) for c in configs]
    verdicts = list(outcomes[0].counts) if outcomes else []
    table = Table("configuration", *verdicts, "finished", title=f"{a.name}: tests against the application")
    for o in outcomes:
        table.add_row(o.config, *(str(o.counts[v]) for v in verdicts), "yes" if o.finished else "no")
    ui.report_console().print(table)
    for o in outcomes:
        for line in o.failed:
            ui.warn(escape(f"{o.config}: {line}"))
    if a.json:
        apptest.save_json(outcomes, a.json)
    if a.markdown:
        a.markdown.write_text(apptest.markdown(a.name, outcomes, a.all, a.units, a.markdown))
    return 0 if all(o.finished for o in outcomes) else 1
