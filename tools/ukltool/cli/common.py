"""What the commands share: argument types, help texts, option groups."""

from __future__ import annotations

import argparse
import re
import shlex
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

from ukltool.build import flags as ukl_flags
from ukltool.build import image
from ukltool.linux import kernel, profiles
from ukltool.plugin import cyclemodel
from ukltool.source import series as series_mod
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError


def statuses_arg(text: str) -> list[int]:
    try:
        out = [int(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: exit statuses are numbers, e.g. 0,1 or 134") from None
    if not out or any(not 0 <= n <= 255 for n in out):
        raise argparse.ArgumentTypeError(f"{text!r}: exit statuses are 0 to 255")
    return out


def kconfig_arg(text: str) -> tuple[list[str], str]:
    opts, sep, why = text.partition(":")
    names = [o.strip() for o in opts.split(",")]
    if not sep or not why.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: say why after a colon, e.g. CONFIG_INOTIFY_USER:'watches "
                                         "its configuration file'")
    bad = [n for n in names if n != "nic" and not re.fullmatch(r"CONFIG_[A-Z0-9_]+", n)]
    if bad:
        raise argparse.ArgumentTypeError(f"{', '.join(bad) or repr(opts)}: not a kernel option (CONFIG_NAME, "
                                         "or nic for the network device)")
    return names, why.strip()


def forward_arg(text: str) -> tuple[int, int]:
    try:
        host, guest = (int(x) for x in text.split(":"))
        if not (0 < host < 65536 and 0 < guest < 65536):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not HOSTPORT:GUESTPORT (e.g. 5555:5555)") from None
    return host, guest


def cflags_arg(text: str) -> list[str]:
    try:
        flags = shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"cannot split '{text}' into flags: {e}") from None
    bad = ukl_flags.refused(flags)
    if bad:
        raise argparse.ArgumentTypeError(
            f"{' '.join(bad)}: not allowed in --cflags (ukl sets the code model, the red zone, PIC and the "
            "outputs itself)")
    return flags


def words_arg(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"cannot split '{text}' into words: {e}") from None


def file_spec_arg(text: str) -> tuple[Path, str]:
    src, sep, dest = text.rpartition(":")
    if not sep or not src or not dest.startswith("/") or dest.endswith("/"):
        raise argparse.ArgumentTypeError(f"'{text}' is not SRC:DEST with DEST an absolute file path in the image "
                                         "(e.g. nginx.conf:/etc/nginx/nginx.conf)")
    return Path(src), dest


def count_arg(text: str) -> int:
    try:
        v = int(text)
        if v <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number") from None
    return v


def model_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, counted: str) -> None:
    """--model cycles and --cpu NAME, for the benchmarks that can model cycles."""
    p.add_argument("--model", choices=["cycles"],
                   help=f"also model cycles (with --icount): {counted} plus the extra cycles of the costly "
                   "instructions (SYSCALL, SWAPGS, WRMSR, MOV to CR3, VERW, ...) that a QEMU plugin counts; a model, "
                   "not a measurement (docs/cycle-model.md)")
    p.add_argument("--cpu", metavar="NAME", help="the model's cost table, measure/costs/NAME.toml (default "
                   f"{cyclemodel.DEFAULT_CPU}; there: {', '.join(cyclemodel.cpus()) or 'none'})")


def positive_arg(text: str) -> float:
    try:
        v = float(text)
        if v <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number of seconds") from None
    return v


def option_list() -> str:
    """The UKL options' names for help texts; the parser is built (and
    --help works) also where the checkout that holds the table is not."""
    try:
        return ", ".join(profiles.options())
    except UklError:
        return "those of kernel/options.toml in a checkout"


HELP_JSON = "write the results to FILE as JSON (--from-json reads them back)"


HELP_MARKDOWN = "write the report to FILE.md as Markdown"


HELP_PLOT = "draw the report's figures into FILE.png"


HELP_FROM_JSON = ("do not run: report the results that --json saved in FILE (repeatable where the results add up: "
                  "the files' results in turn)")


HELP_TIMEOUT = "seconds each boot may take before it is stopped (default %(default).0f)"


HELP_ICOUNT = ("deterministic time: QEMU's -icount shift=0,sleep=off (1 guest ns = 1 instruction; benchmarks count "
               "guest instructions), no address-space randomization, seeded randomness and a fixed date, so that "
               "runs repeat")


HELP_CONFIGS = "comma-separated configurations or profiles (CONFIG+OPTION+...; default %(default)s)"


class Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions are wrapped by wrap_text; examples keep their lines."""


def wrap_text(text: str) -> str:
    return "\n\n".join(textwrap.fill(par, 79) for par in text.strip().split("\n\n"))


def add_command(sub: argparse._SubParsersAction, name: str, short: str, long: str = "",
                examples: tuple[str, ...] = (), listed: bool = True, **kw: object) -> argparse.ArgumentParser:
    """A command: SHORT in its parent's listing, SHORT and LONG as its
    description, EXAMPLES (command lines) as its epilog."""
    description = short[0].upper() + short[1:] + "." + (f"\n\n{long}" if long else "")
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    extra: dict[str, object] = {"help": short} if listed else {}
    p = sub.add_parser(name, description=wrap_text(description), epilog=epilog, formatter_class=Formatter,
                       **extra, **kw)  # type: ignore[arg-type]
    p.set_defaults(_short=short)
    return p


def report_options(p: argparse.ArgumentParser, *, plot: bool = False, from_json: bool = True) -> None:
    """--json, --markdown, --plot and --from-json, the same in every report."""
    g = p.add_argument_group("report")
    g.add_argument("--json", type=Path, metavar="FILE", help=HELP_JSON)
    g.add_argument("--markdown", type=Path, metavar="FILE.md", help=HELP_MARKDOWN)
    if plot:
        g.add_argument("--plot", type=Path, metavar="FILE.png", help=HELP_PLOT)
    if from_json:
        g.add_argument("--from-json", type=Path, action="append", default=[], metavar="FILE", help=HELP_FROM_JSON)


def timeout_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: float) -> None:
    p.add_argument("--timeout", type=positive_arg, default=default, metavar="S", help=HELP_TIMEOUT)


def icount_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--icount", action="store_true", help=HELP_ICOUNT)


def configs_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: str = "linux,base") -> None:
    p.add_argument("--configs", default=default, metavar="LIST", help=HELP_CONFIGS)


def list_arg(text: str) -> list[str]:
    """A comma-separated list: its words, each once, in order."""
    return list(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))


def one_file(files: list[Path], command: str) -> Path:
    if len(files) > 1:
        raise UklError(f"--from-json given {len(files)} times: `{command}` reports one file",
                       "give --from-json once")
    return files[0]


def deprecated(old: str, new: str) -> None:
    """The one-line warning for an old spelling that still works."""
    print(f"ukl: warning: {old} is deprecated and goes in the next release: use {new}", file=sys.stderr)


class Deprecated(argparse.Action):
    """An old option spelling: it works, with a warning naming the new one.
    CONVERT(namespace, value) gives what is stored in DEST."""

    def __init__(self, option_strings: list[str], dest: str, use: str = "",
                 convert: Callable[[argparse.Namespace, object], object] | None = None, **kw: object) -> None:
        kw["help"] = argparse.SUPPRESS
        self.use, self.convert = use, convert
        super().__init__(option_strings, dest, **kw)  # type: ignore[arg-type]

    def __call__(self, parser: argparse.ArgumentParser, ns: argparse.Namespace, values: object,
                 option_string: str | None = None) -> None:
        deprecated(str(option_string), self.use)
        value = self.const if self.nargs == 0 else values
        setattr(ns, self.dest, self.convert(ns, value) if self.convert else value)


def safe_list(names: Callable[[], list[str]]) -> str:
    """Names for a help text; help works where no checkout is."""
    try:
        return ", ".join(names()) or "none"
    except (UklError, OSError):
        return "those of the checkout"


BENCH_SUITES = ("syscalls", "remote", "boot", "app", "secrecy")


def tree_actions(sub: argparse._SubParsersAction, series: series_mod.Series, tree: Callable[[], Path],
                 lock_name: str, command: str) -> None:
    """tree, export and reset for a patched source tree (kernel or glibc),
    under the lock its builds hold."""
    what, patches = series.what, f"{series.patch_dir.parent.name}/{series.patch_dir.name}"

    def show_tree(a: argparse.Namespace) -> None:
        t = tree()
        with lock.held(lock_name, f"the {what} tree"):
            series_mod.sync(series, t)
        print(t)

    def export(a: argparse.Namespace) -> None:
        t = tree()
        with lock.held(lock_name, f"the {what} tree"):
            ui.info(f"wrote {len(series_mod.export(series, t))} patches to {patches}")

    def reset(a: argparse.Namespace) -> None:
        t = tree()
        with lock.held(lock_name, f"the {what} tree"):
            print(series_mod.reset(series, t))

    add_command(sub, "tree", f"apply {patches} and print the {what} tree's path (a git repository)",
                examples=(f"cd $(ukl {command} tree)",)).set_defaults(func=show_tree)
    add_command(sub, "export", f"write the {what} tree's commits since 'pristine' to {patches}",
                examples=(f"ukl {command} export",)).set_defaults(func=export)
    add_command(sub, "reset", f"drop edits in the {what} tree and re-apply {patches}",
                examples=(f"ukl {command} reset",)).set_defaults(func=reset)


def cmd_sources(a: argparse.Namespace) -> int:
    for fn in (sources.linux_tree, sources.glibc_tree):
        src, tree = fn()
        print(f"{src.pin.package} {src.version}: {tree}")
    return 0


def configs_arg(text: str) -> list[str]:
    """--configs a,b: the names, each checked before any work is done."""
    configs = list(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))  # each once
    for c in configs:
        kernel.fragments(c)
    return configs


def boot_opts(text: str, man: image.Manifest, outdir: Path) -> tuple[str, ...]:
    """--opts TEXT for a boot of OUTDIR: the options, checked, which only a
    UKL configuration takes."""
    opts = profiles.opts_arg(text)
    if opts and not kernel.is_ukl(man.config):
        raise UklError(f"--opts: {outdir} was built for '{man.config}', which runs the application as an "
                       "ordinary process", "build it for a UKL configuration (--config base)")
    return opts
