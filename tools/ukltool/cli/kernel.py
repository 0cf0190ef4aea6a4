"""`ukl kernel` and `ukl configs`: the kernel tree, its builds and configurations."""

from __future__ import annotations

import argparse

from rich.markup import escape
from rich.table import Table

from ukltool.cli.common import add_command, count_arg, tree_actions
from ukltool.linux import kernel, prefixes, profiles, seriesstat
from ukltool.source import sources
from ukltool.util import ui


def cmd_configs(a: argparse.Namespace) -> None:
    """The kernel configurations, each with the first line of its fragment's
    comment, then the UKL options that make profiles of them."""
    con = ui.report_console()
    t = Table("configuration", "what it is", box=None, pad_edge=False)
    for name in kernel.config_names():
        t.add_row(name, escape(kernel.summary(name)))
    con.print(t)
    t = Table("option", "what it does (CONFIG+OPTION, or `ukl run --opts`)", box=None, pad_edge=False)
    for name, opt in profiles.options().items():
        t.add_row(f"{name}=N" if opt.param else name, escape(opt.summary))
    con.print()
    con.print(t)


def kernel_parser(sub: argparse._SubParsersAction) -> None:
    k = add_command(sub, "kernel", "the kernel tree and patch series",
                    "Work on the patched kernel tree in the cache (docs/dev/kernel.md).",
                    ("ukl kernel tree", "ukl kernel build --config base", "ukl kernel export"), listed=False)
    ks = k.add_subparsers(dest="kcmd", metavar="ACTION", required=True)
    tree_actions(ks, kernel.SERIES, lambda: sources.linux_tree()[1], kernel.TREE_LOCK, "kernel")
    kb = add_command(ks, "build", "build a kernel configuration and print its bzImage",
                     examples=("ukl kernel build --config base",))
    kb.add_argument("--config", default="linux", metavar="NAME", help="kernel configuration (default linux)")
    kb.set_defaults(func=cmd_kernel_build)
    add_command(ks, "checkpatch", "run scripts/checkpatch.pl --strict on every patch",
                examples=("ukl kernel checkpatch",)).set_defaults(func=lambda a: kernel.checkpatch())
    add_command(ks, "stat", "the series by concern: patches and changed lines (docs/dev/kernel.md's table)",
                "Count each concern's patches and changed lines (kernel/concerns.toml) in the patch files, "
                "Documentation/ apart, and print the table docs/dev/kernel.md carries.",
                ("ukl kernel stat",)).set_defaults(func=cmd_kernel_stat)
    kp = add_command(ks, "build-prefixes", "build vmlinux after every patch of the series (bisectability)",
                     "Commit kernel/patches onto the pristine tree and build vmlinux at every prefix of the series, "
                     "in a work tree and build directory of their own. Long: one kernel build per patch, mostly "
                     "incremental.", ("ukl kernel build-prefixes --config base --from 30",))
    kp.add_argument("--config", default="base", metavar="NAME", help="kernel configuration (default base)")
    kp.add_argument("--from", dest="first", type=count_arg, default=1, metavar="N",
                    help="start with the prefix of N patches (default 1)")
    kp.set_defaults(func=lambda a: prefixes.build_prefixes(a.config, a.first))


def cmd_kernel_stat(a: argparse.Namespace) -> int:
    print(seriesstat.markdown_table(seriesstat.concerns(kernel.series())), end="")
    return 0


def cmd_kernel_build(a: argparse.Namespace) -> int:
    kernel.need_compressor(a.config)
    print(kernel.build(a.config).bzimage)
    return 0
