"""`ukl`: build and run applications linked into Linux (UKL)."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from rich.markup import escape

import ukltool
from ukltool.apps import recipes
from ukltool.cli.apptest import apptest_parser
from ukltool.cli.bench import bench_parser
from ukltool.cli.build import build_parser
from ukltool.cli.cluster import cluster_parser
from ukltool.cli.common import BENCH_SUITES, Formatter, add_command, cmd_sources, deprecated
from ukltool.cli.conformance import conformance_parser
from ukltool.cli.kernel import cmd_configs, kernel_parser
from ukltool.cli.libc import libc_parser
from ukltool.cli.pkg import pkg_parser
from ukltool.cli.run import run_parser
from ukltool.util import ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, repo_problem


def version() -> str:
    v = ukltool.__version__
    where = f"checkout {REPO}" if repo_problem() is None else "no checkout found (set UKL_REPO)"
    return f"ukl {v} ({where})"


GROUPS = (("build and run", ("build", "run", "cluster", "pkg", "configs")),
          ("measure and test", ("bench", "apptest", "conformance")),
          ("develop", ("kernel", "libc", "sources")))


def old_spellings(argv: list[str]) -> list[str]:
    """Old command spellings, rewritten to the new ones with a warning:
    `ukl bench apps` and `ukl bench NAME` are `ukl bench app [NAME]`;
    `ukl bench syscalls --by-function OP,...` (a list there, a switch in the
    other benchmarks) is `--by-function --points OP,...`."""
    if argv[:2] == ["bench", "syscalls"] and "--by-function" in argv:
        i = argv.index("--by-function")
        if i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            deprecated(f"--by-function {argv[i + 1]}", f"--by-function --points {argv[i + 1]}")
            return [*argv[:i + 1], "--points", *argv[i + 1:]]
    if len(argv) >= 2 and argv[0] == "bench" and not argv[1].startswith("-") and argv[1] not in BENCH_SUITES:
        old = argv[1]
        if old == "apps":
            deprecated("`ukl bench apps`", "`ukl bench app` (every application) or `ukl bench app NAME...`")
            return ["bench", "app", *argv[2:]]
        if repo_problem() is None and old in recipes.names():
            deprecated(f"`ukl bench {old}`", f"`ukl bench app {old}`")
            return ["bench", "app", old, *argv[2:]]
    return argv


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ukl", formatter_class=Formatter, usage="ukl [-h] [--version] COMMAND ...")
    p.add_argument("--version", action="version", version=version())
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True, help=argparse.SUPPRESS, prog="ukl")
    build_parser(sub)
    run_parser(sub)
    cluster_parser(sub)
    pkg_parser(sub)
    c = add_command(sub, "configs", "list the kernel configurations and the UKL options",
                    "The kernel configurations (kernel/configs) and the UKL options (kernel/options.toml) that make "
                    "profiles of them, such as base+ret+byp.", ("ukl configs",), listed=False)
    c.set_defaults(func=cmd_configs)
    bench_parser(sub)
    apptest_parser(sub)
    conformance_parser(sub)
    kernel_parser(sub)
    libc_parser(sub)
    add_command(sub, "sources", "install, verify and unpack the pinned Linux and glibc sources",
                "Check the sources pinned in sources.lock against their hashes, unpack them into the cache and print "
                "where each tree is.", ("ukl sources",), listed=False).set_defaults(func=cmd_sources)
    shorts = {name: sp.get_default("_short") for name, sp in sub.choices.items()}
    width = max(map(len, shorts))
    p.description = "\n\n".join([
        (__doc__ or "").strip(),
        *(f"{title}:\n" + "\n".join(f"  {n:<{width}}  {shorts[n]}" for n in names) for title, names in GROUPS),
        "Run `ukl COMMAND --help` for a command's options and examples."])
    p.epilog = ("examples:\n  ukl build examples/hello/hello.c --config base -o out/hello\n"
                "  ukl run out/hello -- x y\n  ukl bench syscalls --configs linux,base --icount\n  ukl configs")
    return p


class Terminated(BaseException):
    """SIGTERM, raised so that cleanups (QEMU's included) run."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # Everything after the first "--" belongs to the application, whatever
    # options come before it.
    app_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, app_args = argv[:i], argv[i + 1:]
    argv = old_spellings(argv)
    args = parser().parse_args(argv)
    if hasattr(args, "args"):
        args.args = args.args + app_args
    elif app_args:
        parser().error("arguments after -- are only taken by `ukl run`")
    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGHUP, _terminate)   # a closed terminal stops VMs and removes namespaces too
    problem = repo_problem()
    if problem:
        ui.err.print(f"ukl: error: {problem}", markup=False)
        return 2
    try:
        rc = args.func(args)
        return 0 if rc is None else int(rc)
    except UklError as e:
        ui.err.print(f"[bold red]ukl: error:[/] {escape(e.message)}", markup=True, highlight=False)
        if e.hint:
            ui.err.print(f"  hint: {e.hint}", markup=False)
        return e.code
    except KeyboardInterrupt:
        ui.err.print("ukl: interrupted")
        return 130
    except Terminated:
        ui.err.print("ukl: terminated")
        return 143
    except BrokenPipeError:
        # The reader of our output went away (`ukl run ... | head`): stop
        # quietly, without a second error when Python flushes stdout.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141
    except subprocess.SubprocessError as e:
        ui.err.print(f"ukl: error: {e}")
        return 2
