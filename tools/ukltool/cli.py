"""`ukl`: build and run applications linked into Linux (UKL)."""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape
from rich.table import Table

import ukltool
from ukltool.apps import apptest, glibctests, ltp, recipes, specialize
from ukltool.bench import appbench, bootbench, hostbench, remotebench, syscalls
from ukltool.build import flags as ukl_flags
from ukltool.build import image, initramfs, project
from ukltool.glibc import libc
from ukltool.linux import kernel, prefixes, profiles
from ukltool.plugin import cyclemodel
from ukltool.run import cores, ocipkg, remote, vm
from ukltool.source import series as series_mod
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, repo_problem

EPILOG_RUN = f"""exit status: the application's status; 128+N when it was killed by
signal N; {vm.EXIT_TIMEOUT} on timeout; {vm.EXIT_KERNEL_FAILURE} when the kernel panicked, oopsed, hit BUG or
WARNING (the lines are shown); {vm.EXIT_NO_STATUS} when the VM ended without reporting a status;
{vm.EXIT_SHADOW_DIED} when the --remote shadow process ended (see OUTDIR/shadow.log)."""


def run_smp(smp: int | None, icount: bool) -> int:
    """Virtual CPUs for `ukl run`: 2, or 1 with --icount (-icount with
    sleep=off cannot bring up a second CPU); --smp 2 --icount is refused."""
    if smp is None:
        return 1 if icount else 2
    if smp < 1:
        raise UklError(f"--smp {smp}: a VM needs at least one CPU", "give --smp 1 or more")
    if icount and smp > 1:
        raise UklError(f"--smp {smp} with --icount: QEMU's -icount sleep=off cannot start a second CPU",
                       "leave out --smp, or drop --icount")
    return smp


def _statuses(text: str) -> list[int]:
    try:
        out = [int(w) for w in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: exit statuses are numbers, e.g. 0,1 or 134") from None
    if not out or any(not 0 <= n <= 255 for n in out):
        raise argparse.ArgumentTypeError(f"{text!r}: exit statuses are 0 to 255")
    return out


def _kconfig(text: str) -> tuple[list[str], str]:
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


def _forward(text: str) -> tuple[int, int]:
    try:
        host, guest = (int(x) for x in text.split(":"))
        if not (0 < host < 65536 and 0 < guest < 65536):
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not HOSTPORT:GUESTPORT (e.g. 5555:5555)") from None
    return host, guest


def _cflags(text: str) -> list[str]:
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


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"cannot split '{text}' into words: {e}") from None


def _file_spec(text: str) -> tuple[Path, str]:
    src, sep, dest = text.rpartition(":")
    if not sep or not src or not dest.startswith("/") or dest.endswith("/"):
        raise argparse.ArgumentTypeError(f"'{text}' is not SRC:DEST with DEST an absolute file path in the image "
                                         "(e.g. nginx.conf:/etc/nginx/nginx.conf)")
    return Path(src), dest


def _count(text: str) -> int:
    try:
        v = int(text)
        if v <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive whole number") from None
    return v


def _model_arguments(p: argparse.ArgumentParser | argparse._ArgumentGroup, counted: str) -> None:
    """--model cycles and --cpu NAME, for the benchmarks that can model cycles."""
    p.add_argument("--model", choices=["cycles"],
                   help=f"also model cycles (with --icount): {counted} plus the extra cycles of the costly "
                   "instructions (SYSCALL, SWAPGS, WRMSR, MOV to CR3, VERW, ...) that a QEMU plugin counts; a model, "
                   "not a measurement (docs/cycle-model.md)")
    p.add_argument("--cpu", metavar="NAME", help="the model's cost table, bench/costs/NAME.toml (default "
                   f"{cyclemodel.DEFAULT_CPU}; there: {', '.join(cyclemodel.cpus()) or 'none'})")


def _positive(text: str) -> float:
    try:
        v = float(text)
        if v <= 0:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not a positive number of seconds") from None
    return v


def _option_list() -> str:
    """The UKL options' names for help texts; the parser is built (and
    --help works) also where the checkout that holds the table is not."""
    try:
        return ", ".join(profiles.options())
    except UklError:
        return "those of kernel/options.toml in a checkout"


def version() -> str:
    v = ukltool.__version__
    where = f"checkout {REPO}" if repo_problem() is None else "no checkout found (set UKL_REPO)"
    return f"ukl {v} ({where})"


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


# ---------------------------------------------------------------- the grammar
#
# Every command has a short line (the listing in `ukl --help`), a long text
# and examples (its own --help). Options that mean the same thing in several
# commands are added by one helper each, with one help text: the report
# options (--json, --markdown, --plot, --from-json), --timeout (seconds each
# boot may take), --icount and --configs. Lists are comma-separated.

GROUPS = (("build and run", ("build", "run", "pkg", "configs")),
          ("measure and test", ("bench", "apptest", "conformance")),
          ("develop", ("kernel", "libc", "sources")))

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


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions are wrapped by _wrap; examples keep their lines."""


def _wrap(text: str) -> str:
    return "\n\n".join(textwrap.fill(par, 79) for par in text.strip().split("\n\n"))


def _command(sub: argparse._SubParsersAction, name: str, short: str, long: str = "",
             examples: tuple[str, ...] = (), listed: bool = True, **kw: object) -> argparse.ArgumentParser:
    """A command: SHORT in its parent's listing, SHORT and LONG as its
    description, EXAMPLES (command lines) as its epilog."""
    description = short[0].upper() + short[1:] + "." + (f"\n\n{long}" if long else "")
    epilog = "examples:\n" + "\n".join(f"  {e}" for e in examples) if examples else None
    extra: dict[str, object] = {"help": short} if listed else {}
    p = sub.add_parser(name, description=_wrap(description), epilog=epilog, formatter_class=_Formatter,
                       **extra, **kw)  # type: ignore[arg-type]
    p.set_defaults(_short=short)
    return p


def _report_options(p: argparse.ArgumentParser, *, plot: bool = False, from_json: bool = True) -> None:
    """--json, --markdown, --plot and --from-json, the same in every report."""
    g = p.add_argument_group("report")
    g.add_argument("--json", type=Path, metavar="FILE", help=HELP_JSON)
    g.add_argument("--markdown", type=Path, metavar="FILE.md", help=HELP_MARKDOWN)
    if plot:
        g.add_argument("--plot", type=Path, metavar="FILE.png", help=HELP_PLOT)
    if from_json:
        g.add_argument("--from-json", type=Path, action="append", default=[], metavar="FILE", help=HELP_FROM_JSON)


def _timeout_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: float) -> None:
    p.add_argument("--timeout", type=_positive, default=default, metavar="S", help=HELP_TIMEOUT)


def _icount_option(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--icount", action="store_true", help=HELP_ICOUNT)


def _configs_option(p: argparse.ArgumentParser | argparse._ArgumentGroup, default: str = "linux,base") -> None:
    p.add_argument("--configs", default=default, metavar="LIST", help=HELP_CONFIGS)


def _list(text: str) -> list[str]:
    """A comma-separated list: its words, each once, in order."""
    return list(dict.fromkeys(w.strip() for w in text.split(",") if w.strip()))


def _one_file(files: list[Path], command: str) -> Path:
    if len(files) > 1:
        raise UklError(f"--from-json given {len(files)} times: `{command}` reports one file",
                       "give --from-json once")
    return files[0]


def deprecated(old: str, new: str) -> None:
    """The one-line warning for an old spelling that still works."""
    print(f"ukl: warning: {old} is deprecated and goes in the next release: use {new}", file=sys.stderr)


class _Deprecated(argparse.Action):
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


def _safe(names: Callable[[], list[str]]) -> str:
    """Names for a help text; help works where no checkout is."""
    try:
        return ", ".join(names()) or "none"
    except (UklError, OSError):
        return "those of the checkout"


BENCH_SUITES = ("syscalls", "remote", "boot", "app")


def old_spellings(argv: list[str]) -> list[str]:
    """Old command spellings, rewritten to the new ones with a warning:
    `ukl bench apps` and `ukl bench NAME` are `ukl bench app [NAME]`."""
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
    p = argparse.ArgumentParser(prog="ukl", formatter_class=_Formatter, usage="ukl [-h] [--version] COMMAND ...")
    p.add_argument("--version", action="version", version=version())
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True, help=argparse.SUPPRESS, prog="ukl")
    _build_parser(sub)
    _run_parser(sub)
    _pkg_parser(sub)
    c = _command(sub, "configs", "list the kernel configurations and the UKL options",
                 "The kernel configurations (kernel/configs) and the UKL options (kernel/options.toml) that make "
                 "profiles of them, such as base+ret+byp.", ("ukl configs",), listed=False)
    c.set_defaults(func=cmd_configs)
    _bench_parser(sub)
    _apptest_parser(sub)
    _conformance_parser(sub)
    _kernel_parser(sub)
    _libc_parser(sub)
    _command(sub, "sources", "install, verify and unpack the pinned Linux and glibc sources",
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


def _build_parser(sub: argparse._SubParsersAction) -> None:
    b = _command(sub, "build", "build an application and a kernel into a bootable directory",
                 "INPUT is one of three kinds, and `ukl build` says which it took: C source files (one program); "
                 "one project directory (CMakeLists.txt, a configure script or a Makefile, built with the UKL "
                 "compilers); or the NAME of a recipe in apps/ (Debian's source package, pinned, built as the "
                 "recipe says). An option that does not apply to the kind of input is refused. The result in "
                 "OUTDIR is bootable with `ukl run` (bzImage, initramfs, manifest). --config linux builds an "
                 "ordinary static binary on stock Linux (the baseline).",
                 ("ukl build examples/hello/hello.c --config base -o out/hello",
                  "ukl build path/to/project --config base --make-args 'NO_TLS=1' -o out/prog",
                  "ukl build redis --config base --specialize -o out/redis",
                  "ukl build examples/hello/hello.c --config base --perf -o out/hello-perf"), listed=False)
    b.add_argument("sources", nargs="+", type=Path, metavar="INPUT",
                   help="C source files, a project directory, or the NAME of a recipe in apps/ "
                   f"({_safe(recipes.names)})")
    b.add_argument("--config", default="linux", metavar="NAME",
                   help=f"kernel configuration (one of: {_safe(kernel.config_names)}; default linux)")
    b.add_argument("-o", "--output", type=Path, default=Path("out"), metavar="OUTDIR",
                   help="output directory (default: out)")
    b.add_argument("--userspace", action="store_true",
                   help="add a small Linux userspace (busybox: sh, ps, kill, top, ...) beside the application, "
                   "which is then started as /ukl/NAME from `ukl run --sh` or --shell (a recipe's image has it "
                   "always)")
    b.add_argument("--perf", action="store_true",
                   help="add Debian's perf with its shared libraries (about 33 MB) to the userspace; "
                   "implies --userspace")
    b.add_argument("--compression", metavar="NAME",
                   help="compress the kernel with NAME instead of the configuration's LZ4 (one of: "
                   f"{_safe(kernel.compressions)}; xz: the smallest image, the slowest decompression; "
                   "docs/results-boot-compression.md)")
    b.add_argument("--optimize", metavar="NAME",
                   help="compile the kernel for NAME instead of the configurations' -O2 (one of: "
                   f"{_safe(kernel.optimizations)}: -Os; its own build directory; docs/results-boot-optimize.md)")
    b.add_argument("--file", action="append", type=_file_spec, default=[], metavar="SRC:DEST",
                   help="add the host file SRC to the image as DEST (an absolute path; parents are created; "
                   "replaces what the image has there, e.g. /etc/passwd)")
    b.add_argument("--overlay", action="append", type=Path, default=[], metavar="DIR",
                   help="add the tree under DIR to the image at / (files, directories, symbolic links, "
                   "with their modes)")
    b.add_argument("--specialize", action="store_true",
                   help="a kernel cut to this application: record its smoke test (a file or directory: its default "
                   "run) under strace on the general kernel, keep only the kernel options what it used needs "
                   "(kernel/specialize/), build for that configuration (special-HASH, shared by applications with "
                   "the same needs), re-run the smoke test on it, and say why each option is there in "
                   "OUTDIR/specialize.md")
    g = b.add_argument_group("C files and project directories (not recipes)")
    g.add_argument("--name", help="application name (default: the first file's stem, or the project's program)")
    g.add_argument("--record-args", type=shlex.split, default=None, metavar="ARGS",
                   help="--specialize: the arguments of the run to record (one string, split as a shell does; "
                   "default: the image's own arguments)")
    g.add_argument("--record-status", type=_statuses, default=None, metavar="N[,N...]",
                   help="--specialize: the exit statuses the recorded run may end with (128+SIG for a signal; "
                   "default 0)")
    g.add_argument("--kconfig", action="append", type=_kconfig, default=[], metavar="OPTION[,OPTION...]:WHY",
                   help="--specialize: kernel options to add whatever the recording shows, and why "
                   "(`nic` for the network device), as a recipe's [specialize] does")
    g = b.add_argument_group("C files only")
    g.add_argument("--freestanding", action="store_true",
                   help="no C library: the program brings its own _start and system call shim")
    g.add_argument("--cflags", type=_cflags, default=[], metavar="FLAGS",
                   help="extra compiler flags for C files, the same for every configuration "
                   "(for example --cflags=-fno-omit-frame-pointer for perf call chains)")
    g = b.add_argument_group("project directories and recipes (not C files)")
    g.add_argument("--configure-args", type=_words, default=[], metavar="ARGS",
                   help="arguments for the project's configure step (./configure, or cmake), shell-quoted")
    g.add_argument("--make-args", type=_words, default=[], metavar="ARGS",
                   help="variables and targets for make (e.g. 'MALLOC=jemalloc BUILD_TLS=no'), shell-quoted")
    g = b.add_argument_group("project directories only")
    g.add_argument("--build-system", choices=project.SYSTEMS, default="auto",
                   help="how to build a directory (default auto: CMakeLists.txt, an autoconf or other "
                   "configure script, or a Makefile)")
    b.set_defaults(func=cmd_build)


def _run_parser(sub: argparse._SubParsersAction) -> None:
    r = _command(sub, "run", "boot a build result in QEMU",
                 "Boot OUTDIR in QEMU, show the application's output and exit with its status. The application's "
                 "arguments follow `--`.\n\n" + EPILOG_RUN,
                 ("ukl run out/hello -- x y",
                  "ukl run out/redis --forward 6379:6379 --timeout 3600",
                  "ukl run out/us --sh 'ps; $UKL_APP x y'",
                  "ukl run out/hello --machine microvm --direct --pid1 -- x y",
                  "ukl run out/hello --machine microvm --direct --pid1 --no-initramfs"), listed=False)
    r.add_argument("outdir", type=Path, metavar="OUTDIR")
    _timeout_option(r, 120.0)
    _icount_option(r)
    r.add_argument("--append", action="append", default=[], metavar="ARGS", help="extra kernel command line")
    r.add_argument("--opts", metavar="OPTS",
                   help="UKL options for this boot, comma-separated, instead of those of the profile the image "
                   "was built for (for example --opts byp,byp-every=32; --opts '' for none): "
                   + _option_list() + " (`ukl configs` describes them)")
    r.add_argument("--smp", type=int, default=None,
                   help="virtual CPUs (default 2; 1 with --icount, under which QEMU cannot start a second CPU)")
    r.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="KVM or TCG (default auto: $UKL_ACCEL, else KVM where a test boot with it works, "
                   "decided once per QEMU and host kernel)")
    r.add_argument("--machine", choices=vm.MACHINES, default="pc",
                   help="QEMU's machine: pc (default: firmware, ACPI, PCI) or microvm (no PCI: virtio-mmio "
                   "devices; no --remote)")
    r.add_argument("--direct", action="store_true",
                   help="boot the uncompressed kernel through its PVH entry: no firmware and no decompression "
                   "(the x86/HVM direct boot ABI, as Firecracker boots)")
    r.add_argument("--pid1", action="store_true",
                   help="the kernel starts the application itself, as PID 1: no init program, nothing mounted, "
                   "no network set up (UKL configurations; not --userspace images)")
    r.add_argument("--no-initramfs", action="store_true",
                   help="with --pid1: load no initramfs; the kernel makes the application's file itself "
                   "(ukl.init=) and the application sees an empty root (no /etc, no /tmp; not for images "
                   "built with --file or --overlay)")
    r.add_argument("--core", type=Path, metavar="DIR",
                   help="let the application dump core (RLIMIT_CORE unlimited) and bring each core out into DIR "
                   "(made if needed; existing files are kept): `gdb VMLINUX DIR/core.NAME.PID`, the command "
                   "printed (docs/guide/debugging.md); not with --pid1")
    r.add_argument("--log", type=Path, help="console log file (default OUTDIR/console.log)")
    r.add_argument("-v", "--verbose", action="store_true", help="show the kernel's boot messages")
    g = r.add_argument_group("network")
    g.add_argument("--forward", action="append", type=_forward, default=[], metavar="HOST:GUEST",
                   help="forward 127.0.0.1:HOST on the host to GUEST in the guest (TCP)")
    g.add_argument("--tap", metavar="IFNAME",
                   help="connect the guest's eth0 (10.0.2.15/24, gateway 10.0.2.2) to the existing tap device "
                   "IFNAME instead of QEMU's user network; --forward does not apply")
    g = r.add_argument_group("shell (images built with --userspace)")
    sh = g.add_mutually_exclusive_group()
    sh.add_argument("--sh", metavar="COMMANDS",
                    help="run this shell command line in the guest instead of the application and exit with its "
                    "status ($UKL_APP names the application)")
    sh.add_argument("--shell", action="store_true", help="an interactive shell on the serial console")
    g = r.add_argument_group("remote system calls")
    g.add_argument("--remote", type=Path, metavar="DIR",
                   help="remote system calls (runtime/ukl.h ukl_remote_*): a shadow process on the host, "
                   "confined to DIR and running as its owner, executes the application's calls on remote "
                   "files; its log is OUTDIR/shadow.log")
    g.add_argument("--remote-idle-us", type=int, default=1000, metavar="US",
                   help="the shadow polls this long after a request before it sleeps (default 1000; -1: "
                   "always poll, for latency measurements)")
    g.add_argument("--remote-notify", choices=["poll", "irq"], default="poll",
                   help="how a thread waits for the host's answer until it calls ukl_remote_poll() or "
                   "ukl_remote_irq(): spinning (default), or sleeping until the host's interrupt; "
                   "the host then sleeps between requests too")
    r.add_argument("args", nargs="*", metavar="ARGS", help="the application's arguments (put them after --)")
    r.set_defaults(func=cmd_run)


def _pkg_parser(sub: argparse._SubParsersAction) -> None:
    pk = _command(sub, "pkg", "package a build result: an OCI image for containerd/urunc, or Firecracker",
                  "Package OUTDIR (a `ukl build` result) as an OCI image archive that containerd imports (`ctr "
                  "image import FILE.tar`) and runs with the urunc runtime: one layer with the kernel, the "
                  "initramfs and /urunc.json; the application's arguments, environment and ports in the image "
                  "configuration. The same OUTDIR gives the same archive, byte for byte. docs/deploy.md shows the "
                  "way to `ctr run` and Kubernetes.",
                  ("ukl pkg out/hello --oci hello.tar",
                   "ukl pkg out/redis --oci redis.tar --tag docker.io/library/redis:latest",
                   "ukl pkg out/hello --firecracker out/hello-fc"), listed=False)
    pk.add_argument("outdir", type=Path, metavar="OUTDIR")
    pk.add_argument("--oci", type=Path, metavar="FILE.tar",
                    help="write an OCI image layout archive (a device or FIFO is written into, not replaced)")
    pk.add_argument("--firecracker", type=Path, metavar="DIR",
                    help="write DIR for Firecracker: the uncompressed kernel (vmlinux), the initramfs and "
                    "vm-config.json (`firecracker --no-api --config-file vm-config.json` in DIR; needs KVM: "
                    "docs/deploy.md)")
    pk.add_argument("--tag", metavar="REF",
                    help="the image's name, [DOMAIN/]PATH[:TAG] (default localhost/ukl/APP:latest); written "
                    "normalized as containerd's CRI names it (docker.io/library/redis:latest for redis)")
    pk.add_argument("--hypervisor", default="qemu", metavar="NAME",
                    help="the monitor urunc starts: qemu (default; boots bzImage) or firecracker (boots the "
                    "uncompressed vmlinux; needs KVM)")
    pk.set_defaults(func=cmd_pkg)


def _kernel_parser(sub: argparse._SubParsersAction) -> None:
    k = _command(sub, "kernel", "the kernel tree and patch series",
                 "Work on the patched kernel tree in the cache (docs/dev/kernel.md).",
                 ("ukl kernel tree", "ukl kernel build --config base", "ukl kernel export"), listed=False)
    ks = k.add_subparsers(dest="kcmd", metavar="ACTION", required=True)
    _tree_actions(ks, kernel.SERIES, lambda: sources.linux_tree()[1], kernel.TREE_LOCK, "kernel")
    kb = _command(ks, "build", "build a kernel configuration and print its bzImage",
                  examples=("ukl kernel build --config base",))
    kb.add_argument("--config", default="linux", metavar="NAME", help="kernel configuration (default linux)")
    kb.set_defaults(func=cmd_kernel_build)
    _command(ks, "checkpatch", "run scripts/checkpatch.pl --strict on every patch",
             examples=("ukl kernel checkpatch",)).set_defaults(func=lambda a: kernel.checkpatch())
    kp = _command(ks, "build-prefixes", "build vmlinux after every patch of the series (bisectability)",
                  "Commit kernel/patches onto the pristine tree and build vmlinux at every prefix of the series, "
                  "in a work tree and build directory of their own. Long: one kernel build per patch, mostly "
                  "incremental.", ("ukl kernel build-prefixes --config base --from 30",))
    kp.add_argument("--config", default="base", metavar="NAME", help="kernel configuration (default base)")
    kp.add_argument("--from", dest="first", type=_count, default=1, metavar="N",
                    help="start with the prefix of N patches (default 1)")
    kp.set_defaults(func=lambda a: prefixes.build_prefixes(a.config, a.first))


def _libc_parser(sub: argparse._SubParsersAction) -> None:
    lb = _command(sub, "libc", "the glibc port: its tree, patches and glibc's own tests",
                  "Work on the glibc port (libc/) and run glibc's tests in ring 0 (docs/design/glibc-port.md).",
                  ("ukl libc build", "ukl libc tests --tests tst-atexit,tst-cleanup0"), listed=False)
    ls_ = lb.add_subparsers(dest="lcmd", metavar="ACTION", required=True)
    _command(ls_, "build", "build glibc for UKL (incremental) and print its build directory",
             examples=("ukl libc build",)).set_defaults(func=lambda a: print(libc.build().objdir))
    _tree_actions(ls_, libc.SERIES, lambda: sources.glibc_tree()[1], libc.TREE_LOCK, "libc")
    lt = _command(ls_, "tests", "run a selection of glibc's own tests linked into the kernel",
                  "Build glibc's tests (listed in tools/ukltool/apps/glibctests.py) into one UKL image, run each "
                  "in its own boot under --config base, and report pass/fail per test.",
                  ("ukl libc tests", "ukl libc tests --tests tst-atexit --logs out/gt",
                   "ukl libc tests --markdown docs/glibc-tests.md"))
    lt.add_argument("--tests", type=_list, default=None, metavar="LIST",
                    help="comma-separated: run only these tests")
    lt.add_argument("--only", nargs="+", dest="tests", action=_Deprecated, use="--tests A,B",
                    convert=lambda ns, v: _list(",".join(v)))
    lt.add_argument("--logs", type=Path, default=Path("out/glibc-tests"), metavar="DIR",
                    help="where each test's console log goes (default out/glibc-tests)")
    _timeout_option(lt, 300.0)
    _report_options(lt, from_json=False)
    lt.set_defaults(func=cmd_libc_tests)


def _apptest_parser(sub: argparse._SubParsersAction) -> None:
    at = _command(sub, "apptest", "run an application's own test suite against it in the guest",
                  "Build the recipe's image, start the application in the guest (on a tap device or behind a "
                  "forwarded port), and run the application's own test suite on the host against it (the recipe's "
                  "[tests]: for redis, ./runtest --host --port).",
                  ("ukl apptest redis --configs linux,base",
                   "ukl apptest redis --configs base --units unit/type/incr,unit/type/list --json out/a.json",
                   "ukl apptest redis --from-json out/linux.json --from-json out/base.json"), listed=False)
    at.add_argument("name", metavar="NAME", help="a recipe with a [tests] section (redis, memcached)")
    _configs_option(at)
    at.add_argument("--all", action="store_true", help="the whole suite, not the recipe's units")
    at.add_argument("--units", type=_list, default=[], metavar="LIST",
                    help="comma-separated: run these units instead of the recipe's")
    at.add_argument("--unit", dest="units", action=_Deprecated, use="--units A,B",
                    convert=lambda ns, v: [*(getattr(ns, "units", None) or []), *_list(str(v))])
    _timeout_option(at, 3600.0)
    at.add_argument("--network", choices=("auto", "tap", "user"), default="auto",
                    help="tap: the guest on a tap device in a private network namespace (root); user: QEMU's "
                    "user network and a forwarded port; auto (default): tap where it can be made")
    _report_options(at)
    at.set_defaults(func=cmd_apptest)


def _conformance_parser(sub: argparse._SubParsersAction) -> None:
    """`ukl conformance ltp` (ltp.py)."""
    cf = _command(sub, "conformance", "suites written elsewhere (LTP), run under each configuration",
                  "Suites of other projects, run under each configuration against linux's results.",
                  ("ukl conformance ltp --configs linux,base",), listed=False)
    cs = cf.add_subparsers(dest="ccmd", metavar="SUITE", required=True)
    lp = _command(cs, "ltp", "LTP's system-call tests as UKL applications",
                  "Build LTP's system-call tests (testcases/kernel/syscalls, the commit in tests/ltp/source.toml) "
                  "into one program per configuration behind a dispatcher, boot it under each configuration "
                  "running each test as its own process, and report TPASS, TFAIL, TBROK or TCONF per test (the "
                  "worst it reported). A test that passes under linux and not under another configuration must be "
                  "listed in tests/ltp/divergences.toml, or the command fails.",
                  ("ukl conformance ltp --configs linux,base --tests getpid01,read01",
                   "ukl conformance ltp --configs linux,base+byp --json out/ltp.json --markdown out/ltp.md"))
    _configs_option(lp)
    lp.add_argument("--tests", default=ltp.DEFAULT_LIST, metavar="LIST",
                    help="comma-separated test names and lists of tests/ltp/ (default "
                    f"{ltp.DEFAULT_LIST}; lists: {_safe(ltp.list_names)})")
    lp.add_argument("--batch", type=_count, default=ltp.DEFAULT_BATCH, metavar="N",
                    help=f"tests per boot (default {ltp.DEFAULT_BATCH})")
    lp.add_argument("--test-timeout", type=_positive, default=ltp.DEFAULT_TIMEOUT, metavar="S",
                    help=f"seconds each test may take, inside the guest (default {ltp.DEFAULT_TIMEOUT:.0f})")
    lp.add_argument("--timeout", type=_positive, dest="test_timeout", action=_Deprecated, use="--test-timeout S")
    lp.add_argument("-o", "--output", type=Path, default=Path("out/ltp"), metavar="DIR",
                    help="images and console logs (default out/ltp)")
    _report_options(lp)
    lp.set_defaults(func=cmd_conformance_ltp)


def _bench_parser(sub: argparse._SubParsersAction) -> None:
    bn = _command(sub, "bench", "benchmarks comparing configurations",
                  "Suites (syscalls, remote, boot) and application benchmarks (app NAME...), each under the "
                  "configurations and profiles of --configs, the first without UKL the baseline.",
                  ("ukl bench syscalls --configs linux,base,base+byp --icount",
                   "ukl bench app redis --configs linux,base --icount",
                   "ukl bench boot --apps hello --configs linux,base --icount"), listed=False)
    bs = bn.add_subparsers(dest="bcmd", metavar="SUITE", required=True)
    sc = _command(bs, "syscalls", "LEBench-style system call and page fault latencies",
                  "Build bench/lebench.c for each configuration, boot each, and compare the medians against the "
                  "first configuration without UKL (default linux).",
                  ("ukl bench syscalls --configs linux,base --icount --quick",
                   "ukl bench syscalls --configs linux,base+byp --icount --by-function getppid,read:1",
                   "ukl bench syscalls --from-json docs/results.json --markdown out/results.md"))
    _configs_option(sc)
    _icount_option(sc)
    sc.add_argument("--quick", action="store_true", help="1,000 iterations and 3 sizes (for tests)")
    _model_arguments(sc, "the instructions")
    sc.add_argument("--by-function", metavar="OP[:BYTES],...",
                    help="with --icount: also show where these points' instructions go, by kernel function "
                    "(e.g. getppid,read:1), counted by our QEMU plugin")
    sc.add_argument("--profile", dest="by_function", action=_Deprecated, use="--by-function OP[:BYTES],...")
    _timeout_option(sc, 1800.0)
    _report_options(sc, plot=True)
    sc.set_defaults(func=cmd_bench)

    rb = _command(bs, "remote", "remote system calls: null calls, file I/O and OS jitter",
                  "Run bench/remote.c on the host, in a linux guest and in a base guest booted with --remote: a "
                  "null remote call polling and asleep against getppid, pread/pwrite of 1 B to 64 KiB on a host "
                  "file against guest tmpfs, and OS jitter (docs/results-remote.md).",
                  ("ukl bench remote --quick",
                   "ukl bench remote --json out/remote.json --markdown out/remote.md --plot out/remote.png"))
    rb.add_argument("--quick", action="store_true", help="few batches and short jitter runs (for tests)")
    rb.add_argument("--repeat", type=_count, metavar="N",
                    help="boot each guest N times, interleaved; report the median run (default 3; 1 with --quick)")
    _timeout_option(rb, 1800.0)
    _report_options(rb, plot=True)
    rb.set_defaults(func=cmd_bench_remote)
    _bench_boot_parser(bs)
    _bench_app_parser(bs)


def _bench_app_parser(bs: argparse._SubParsersAction) -> None:
    ap = _command(bs, "app", "application benchmarks: the recipes' servers and programs under load",
                  "Build and boot each application under each configuration and load it. With --clients guest "
                  "(the default), from inside the guest (bench/appload.c, the recipe's [bench]): the "
                  "application's CPU time per request, or guest instructions with --icount. With --clients host, "
                  "with real load generators on the host over a tap device (the recipe's [netbench]; needs root): "
                  "throughput and latency in wall-clock time; programs that run to completion are timed in the "
                  "guest beside them. Without NAME: every application the mode has.",
                  ("ukl bench app redis --configs linux,base --icount",
                   "ukl bench app --configs linux,base,base+ret+byp --icount --json out/apps.json",
                   "ukl bench app redis --icount --by-function --markdown out/redis.md",
                   "ukl bench app redis memcached --clients host --repeat 3",
                   "ukl bench app memcached --from-json docs/results-apps.json --markdown out/m.md"))
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help=f"recipes with a [bench] section ({_safe(appbench.names)}), or with --clients host a "
                    f"[netbench] section ({_safe(hostbench.names)}) or a run to completion (default: all of them)")
    _configs_option(ap)
    ap.add_argument("--clients", choices=("guest", "host"), default="guest",
                    help="guest: bench/appload.c beside the server (default); host: redis-benchmark, "
                    "memcaslap, ab and wrk on the host, in a private network namespace with a tap device "
                    "(needs root), in wall-clock time")
    ap.add_argument("--repeat", type=_count, default=1, metavar="N",
                    help="boot each configuration N times, interleaved; report medians (default 1)")
    _timeout_option(ap, 1800.0)
    g = ap.add_argument_group("in-guest load only (--clients guest)")
    _icount_option(g)
    g.add_argument("--requests", type=_count, metavar="N", help="requests per load (default: the recipe's)")
    _model_arguments(g, "the guest's instructions during each load")
    g.add_argument("--by-function", action="store_true",
                   help="with --icount: also show where each load's instructions go, by kernel function "
                   "(and the application's, under UKL profiles), counted by our QEMU plugin")
    g.add_argument("--profile", dest="by_function", action=_Deprecated, use="--by-function", nargs=0, const=True)
    ap.add_argument("--only", dest="only_old", action=_Deprecated, use="`ukl bench app NAME...`",
                    type=_list, default=[])
    _report_options(ap, plot=True)
    ap.set_defaults(func=cmd_bench_app)


def _bench_boot_parser(bs: argparse._SubParsersAction) -> None:
    bb = _command(bs, "boot", "image size, boot time to main() (and a server's first answer), least memory",
                  "Build each application for each configuration and measure: the image's bytes (bzImage, "
                  "initramfs) and vmlinux's text/data/bss; the guest time and instructions from the kernel's first "
                  "instruction to main() (and for a server to its first answer to the recipe's readiness probe), "
                  "with the wall time under TCG beside them; and the least memory (-m, MiB) at which the "
                  "application passes its smoke test, by bisection (docs/results-boot.md).",
                  ("ukl bench boot --apps hello --configs linux,base --icount",
                   "ukl bench boot --apps examples/hello/hello.c,redis --icount --no-memory --boots pc,pc-direct",
                   "ukl bench boot --from-json a.json --from-json b.json --markdown out/boot.md"))
    bb.add_argument("--apps", default="hello", metavar="LIST",
                    help="comma-separated recipe names, directories or C files (default hello)")
    _configs_option(bb)
    _icount_option(bb)
    bb.add_argument("--specialize", action="store_true",
                    help="after each configuration's row, one for the kernel specialized from it to the application "
                    "(`ukl build --specialize`; specialized: true in the JSON)")
    bb.add_argument("--repeat", type=_count, default=1, metavar="N",
                    help="boot each image N times to main() (default 1); each run's instructions are kept")
    bb.add_argument("--memory", type=_count, default=bootbench.MEASURE_MEMORY, metavar="MIB",
                    help=f"-m of the boot measurement (default {bootbench.MEASURE_MEMORY})")
    bb.add_argument("--memory-range", default="{}:{}".format(*bootbench.MEMORY_RANGE), metavar="LO:HI",
                    help="the least memory's bisection bounds in MiB (default {}:{})".format(*bootbench.MEMORY_RANGE))
    bb.add_argument("--memory-steps", type=int, default=bootbench.MEMORY_STEPS, metavar="N",
                    help=f"boots of the bisection after the upper bound's (default {bootbench.MEMORY_STEPS}; "
                    "0: only check the upper bound)")
    bb.add_argument("--boots", default=bootbench.DEFAULT_BOOTS, metavar="LIST",
                    help="comma-separated boot methods, each measured (default %(default)s): "
                    + "; ".join(f"{k}: {b.what}" for k, b in bootbench.BOOTS.items()))
    bb.add_argument("--compressions", metavar="LIST",
                    help="comma-separated kernel compressions, each measured (default: the configuration's, LZ4; "
                    f"one of: {_safe(kernel.compressions)})")
    bb.add_argument("--optimize", metavar="NAME",
                    help="compile every kernel for NAME instead of the configurations' -O2 (one of: "
                    f"{_safe(kernel.optimizations)})")
    bb.add_argument("--no-memory", action="store_true", help="do not bisect the least memory")
    bb.add_argument("--by-function", action="store_true",
                    help="boot each image once more with the plugin profiling it, and report where the "
                    "instructions from vmlinux's entry to main() (and the first reply) go, by function")
    _timeout_option(bb, 600.0)
    _report_options(bb, plot=True)
    bb.set_defaults(func=cmd_bench_boot)


def _tree_actions(sub: argparse._SubParsersAction, series: series_mod.Series, tree: Callable[[], Path],
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

    _command(sub, "tree", f"apply {patches} and print the {what} tree's path (a git repository)",
             examples=(f"cd $(ukl {command} tree)",)).set_defaults(func=show_tree)
    _command(sub, "export", f"write the {what} tree's commits since 'pristine' to {patches}",
             examples=(f"ukl {command} export",)).set_defaults(func=export)
    _command(sub, "reset", f"drop edits in the {what} tree and re-apply {patches}",
             examples=(f"ukl {command} reset",)).set_defaults(func=reset)


def cmd_sources(a: argparse.Namespace) -> int:
    for fn in (sources.linux_tree, sources.glibc_tree):
        src, tree = fn()
        print(f"{src.pin.package} {src.version}: {tree}")
    return 0


# The options of `ukl build` that apply to some kinds of input only.
BUILD_KINDS = {"files": "C files", "directory": "a project directory", "recipe": "a recipe"}
BUILD_APPLIES = {
    "--name": ("files", "directory"),
    "--freestanding": ("files",),
    "--cflags": ("files",),
    "--configure-args": ("directory", "recipe"),
    "--make-args": ("directory", "recipe"),
    "--build-system": ("directory",),
    "--record-args": ("files", "directory"),
    "--record-status": ("files", "directory"),
    "--kconfig": ("files", "directory"),
}


def build_input(srcs: list[Path]) -> tuple[str, str | None]:
    """The kind of `ukl build`'s INPUT ("files", "directory" or "recipe"),
    and the recipe's name."""
    recipe = _recipe_name(srcs)
    if recipe is not None:
        return "recipe", recipe
    dirs = [s for s in srcs if s.is_dir()]
    if dirs and len(srcs) > 1:
        raise UklError(f"{dirs[0]} is a directory: a project directory is built on its own, not with other inputs",
                       "name one project directory, or C files")
    return ("directory" if dirs else "files"), None


def check_build_options(a: argparse.Namespace, kind: str) -> None:
    """Refuse the options that do not apply to KIND of input."""
    given = {"--name": a.name is not None, "--freestanding": a.freestanding, "--cflags": bool(a.cflags),
             "--configure-args": bool(a.configure_args), "--make-args": bool(a.make_args),
             "--build-system": a.build_system != "auto", "--record-args": a.record_args is not None,
             "--record-status": a.record_status is not None, "--kconfig": bool(a.kconfig)}
    bad = [o for o, g in given.items() if g and kind not in BUILD_APPLIES[o]]
    if not bad:
        return
    where = "; ".join(f"{o} applies to " + " and ".join(BUILD_KINDS[k] for k in BUILD_APPLIES[o]) for o in bad)
    hint = {"recipe": "a recipe's build and name are in apps/NAME/recipe.toml; --configure-args and --make-args "
                      "add to its build",
            "directory": "pass flags to the project's own build, e.g. --make-args 'CFLAGS=-O1'",
            "files": "name a project directory to build it with its configure script, CMake or Makefile"}[kind]
    raise UklError(f"{' and '.join(bad)} {'does' if len(bad) == 1 else 'do'} not apply to "
                   f"{BUILD_KINDS[kind]} ({where})", hint)


def cmd_kernel_build(a: argparse.Namespace) -> int:
    kernel.need_compressor(a.config)
    print(kernel.build(a.config).bzimage)
    return 0


def cmd_build(a: argparse.Namespace) -> int:
    kind, recipe = build_input(a.sources)
    check_build_options(a, kind)
    image.check_app_name(a.name)
    given = [o for o, v in (("--record-args", a.record_args is not None),
                            ("--record-status", a.record_status is not None), ("--kconfig", bool(a.kconfig))) if v]
    if given and not a.specialize:
        raise UklError(f"{' and '.join(given)} apply to --specialize", "add --specialize, or leave them out")
    if a.compression is not None:
        kernel.compression_fragment(a.compression)  # before any work
    if a.optimize is not None:
        kernel.optimize_fragment(a.optimize)
    if recipe is not None:
        r = recipes.load(recipe)
        if r.build.library:
            raise UklError(f"'{recipe}' is a library recipe: it is built as a dependency of an application",
                           "build an application that depends on it: " +
                           (", ".join(n for n in recipes.names() if recipe in recipes.load(n).depends) or "none"))
        kernel.fragments(a.config)  # validates the name before any work
        ui.info(f"building the recipe '{recipe}' (apps/{recipe}/recipe.toml) for '{a.config}'")

        def make_spec(config: str, out: Path, extra: list[tuple[Path, str]]) -> image.BuildSpec:
            spec = recipes.image_spec(r, config, out, [*a.file, *extra], a.configure_args, a.make_args, a.overlay)
            spec.perf, spec.compression, spec.optimize = a.perf, a.compression, a.optimize
            return spec
    else:
        r = None
        ui.info(f"building the project directory {a.sources[0]}" if kind == "directory" else
                f"building {len(a.sources)} C file{'s' if len(a.sources) > 1 else ''}: "
                + ", ".join(str(s) for s in a.sources))

        def make_spec(config: str, out: Path, extra: list[tuple[Path, str]]) -> image.BuildSpec:
            opts = project.Options(system=a.build_system, configure_args=list(a.configure_args),
                                   make_args=list(a.make_args))
            return image.BuildSpec(a.sources, config, out, a.name, a.freestanding, a.userspace, a.cflags,
                                   [*a.file, *extra], a.overlay, opts, perf=a.perf, compression=a.compression,
                                   optimize=a.optimize)
    if a.specialize:
        res = specialize.build(make_spec(a.config, a.output, []), r, make_spec,
                               specialize.Request(a.record_args, a.record_status or [0],
                                                  [(o, why) for opts, why in a.kconfig for o in opts]))
        ui.info(f"built '{res.app}' for the specialized configuration '{res.config}' ({len(res.options)} options "
                f"for the application beside the core; why: {a.output / 'specialize.md'}) in {a.output}")
        return 0
    man = image.build(make_spec(a.config, a.output, []))
    ui.info(f"built '{man.app}' for configuration '{man.config}' (kernel {man.kernel_release}) in {a.output}")
    return 0


def _recipe_name(srcs: list[Path]) -> str | None:
    """`ukl build NAME` for apps/NAME/recipe.toml (a path that exists wins)."""
    if len(srcs) != 1 or srcs[0].exists() or "/" in str(srcs[0]) or srcs[0].suffix:
        return None
    name = str(srcs[0])
    if name not in recipes.names():
        raise UklError(f"{name} is neither a file, a directory nor a recipe",
                       "recipes (apps/): " + ", ".join(recipes.names()))
    return name


def check_pid1_run(a: argparse.Namespace, man: image.Manifest, sh: str | None,
                   forwards: list[tuple[int, int]]) -> None:
    """--pid1 is for an application that needs no init work."""
    why = None
    if not kernel.is_ukl(man.config):
        why = (f"it was built for '{man.config}', where the application is an ordinary program and the exit of "
               "PID 1 panics", "build it for a UKL configuration (--config base)")
    elif man.userspace or sh is not None:
        why = ("a --userspace image keeps its init (the shell and tools run beside the application)",
               "run it without --pid1")
    elif forwards or a.tap:
        why = ("the application as PID 1 has no network: init is what configures eth0",
               "run it without --pid1 (and without --forward/--tap if it needs no network)")
    elif a.remote is not None:
        why = ("remote system calls are not supported with the application as PID 1", "run it without --pid1")
    elif a.no_initramfs and man.user_files:
        why = ("it carries files (--file or --overlay) that only its initramfs holds, or it was built before "
               "ukl recorded that", "run it without --no-initramfs, or rebuild it (without the files)")
    if why:
        raise UklError(f"--pid1: {a.outdir}: {why[0]}", why[1])


def cmd_run(a: argparse.Namespace) -> int:
    man = image.load(a.outdir)  # refuses what is not a build result
    sh = "" if a.shell else a.sh
    if sh is not None and not man.userspace:
        raise UklError(f"{a.outdir} has no shell: it was built without --userspace",
                       f"rebuild it with `ukl build ... --userspace -o {a.outdir}`")
    if sh is not None and a.args:
        raise UklError("application arguments cannot be combined with --sh or --shell",
                       f"start the application in the command line: --sh '/ukl/{man.app} ARGS'")
    if a.shell and not sys.stdin.isatty():
        raise UklError("--shell needs a terminal on standard input", "use --sh 'COMMANDS' in scripts")
    log = a.log or a.outdir / "console.log"
    app_args = a.args if a.args or sh is not None else man.args
    if a.tap and a.forward:
        raise UklError("--forward and --tap cannot be combined: a tap device gives the guest its own address",
                       "connect to 10.0.2.15 through the tap device instead")
    if a.tap and not re.fullmatch(r"[A-Za-z0-9_.-]{1,15}", a.tap):
        raise UklError(f"--tap {a.tap!r} is not a network interface name QEMU can take",
                       "name it with up to 15 letters, digits, '_', '.' or '-'")
    if a.tap and not Path(f"/sys/class/net/{a.tap}/tun_flags").is_file():
        raise UklError(f"--tap {a.tap}: no tap device of that name in this network namespace",
                       f"create it first: ip tuntap add dev {a.tap} mode tap; ip link set {a.tap} up")
    if a.remote is not None and not a.remote.is_dir():
        raise UklError(f"--remote {a.remote}: not a directory",
                       "name an existing directory on the host for the application's remote files")
    if a.remote_idle_us < -1:
        raise UklError(f"--remote-idle-us {a.remote_idle_us}: must be -1 (always poll) or at least 0",
                       "for example --remote-idle-us 1000")
    forwards = [] if a.tap else a.forward or [(f[0], f[1]) for f in man.forwards]
    if (a.tap or a.forward) and not image.has_network_device(man):
        raise UklError(f"{'--tap' if a.tap else '--forward'}: the kernel of {a.outdir} has no network device "
                       "(a specialized kernel gets one where the application's code can listen or reach "
                       "another address)",
                       "rebuild with --specialize --kconfig nic:WHY to add it, or without --specialize")
    vm.check_machine(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=[], log=log, machine=a.machine,
                                remote=a.remote))
    if a.no_initramfs and not a.pid1:
        raise UklError("--no-initramfs needs --pid1: without an initramfs there is no init program",
                       "add --pid1 (UKL configurations)")
    if a.pid1:
        check_pid1_run(a, man, sh, forwards)
    if a.core is not None:
        check_core_run(a, man)
    append = list(a.append)
    if a.opts is not None:
        opts = profiles.opts_arg(a.opts)
        if opts and not kernel.is_ukl(man.config):
            raise UklError(f"--opts: {a.outdir} was built for '{man.config}', which runs the application as an "
                           "ordinary process", "build it for a UKL configuration (--config base)")
        append.append(f"{profiles.KERNEL_PARAM}={','.join(opts)}")
    with tempfile.TemporaryDirectory(prefix="ukl-args-") as td:
        extra = initramfs.args_archive(app_args, Path(td), sh)
        disk = cores.make_disk(Path(td) / "cores.img", remote.parse_memory(vm.RunSpec.memory)) \
            if a.core is not None else None
        res = vm.boot(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=[a.outdir / "initramfs.cpio", extra],
                                 log=log, timeout=a.timeout, icount=a.icount, append=append,
                                 forwards=forwards, tap=a.tap, smp=run_smp(a.smp, a.icount), verbose=a.verbose,
                                 interactive=a.shell, accel=None if a.accel == "auto" else a.accel,
                                 remote=a.remote.resolve() if a.remote else None,
                                 remote_idle_us=a.remote_idle_us, remote_notify=a.remote_notify,
                                 side_dir=a.outdir, machine=a.machine, direct=a.direct,
                                 pid1=f"/ukl/{man.app}" if a.pid1 else None, pid1_args=list(app_args),
                                 initramfs=not a.no_initramfs, core_disk=disk))
        if disk is not None:
            show_cores(disk, a.core, man, a.outdir)
    if res.failures:
        ui.err.print(f"[bold red]ukl: the kernel failed[/] (log: {log}):")
        for line in res.failures[:40]:
            ui.err.print(f"  {line}", markup=False)
    elif res.timed_out:
        ui.err.print(f"[bold red]ukl: timed out[/] after {a.timeout:.0f}s (log: {log})")
    elif res.code == vm.EXIT_SHADOW_DIED:
        ui.err.print(f"[bold red]ukl: the remote shadow process ended[/] (log: {a.outdir / 'shadow.log'})")
    elif res.status is None:
        ui.err.print(f"[bold red]ukl: the VM ended without reporting a status[/] (log: {log})")
    return res.code


def check_core_run(a: argparse.Namespace, man: image.Manifest) -> None:
    if a.pid1:
        raise UklError("--core needs ukl's init, which brings the cores out: not with --pid1",
                       "run without --pid1")
    cores.check_dest(a.core)
    if not image.has_block_device(man):
        raise UklError(f"--core: the kernel of {a.outdir} has no virtio disk driver, through which the cores "
                       "come out", "rebuild it with --specialize --kconfig VIRTIO_BLK:WHY, or without --specialize")


def show_cores(disk: Path, dest: Path, man: image.Manifest, outdir: Path) -> None:
    saved, finished = cores.extract(disk, dest)
    for c in saved:
        ui.err.print(f"ukl: core: {c.path} ({c.size} bytes)", markup=False)
    if not finished:
        ui.err.print("ukl: the guest did not finish writing its cores (it ended before the application did)",
                     markup=False)
    elif not saved:
        ui.err.print("ukl: no core was dumped", markup=False)
    if saved and kernel.is_ukl(man.config):
        ui.err.print(f"ukl: debug with: gdb {man.vmlinux_path()} {saved[0].path}", markup=False)
    elif saved:  # an ordinary process: its program is in the initramfs
        ui.err.print(f"ukl: debug with: gdb PROGRAM {saved[0].path} (PROGRAM: /bin/{man.app} of "
                     f"{outdir / 'initramfs.cpio'})", markup=False)


def cmd_pkg(a: argparse.Namespace) -> int:
    if a.oci is None and a.firecracker is None:
        raise UklError("ukl pkg: say what to write", f"for example: ukl pkg {a.outdir} --oci image.tar")
    if a.firecracker is not None:
        if a.oci is not None or a.tag is not None:
            raise UklError("--firecracker writes a directory for Firecracker itself: no --oci or --tag with it",
                           "run ukl pkg once for each (an OCI image for Firecracker: --oci with "
                           "--hypervisor firecracker)")
        ocipkg.firecracker_dir(a.outdir, a.firecracker)
        ui.info(f"wrote {a.firecracker}: run `firecracker --no-api --config-file {ocipkg.FIRECRACKER_CONFIG}` "
                f"in it with a tap device {ocipkg.FIRECRACKER_TAP} (Firecracker needs KVM)")
        return 0
    pkg = ocipkg.package(a.outdir, a.oci, a.tag, a.hypervisor)
    ui.info(f"wrote {a.oci}: {pkg.reference} ({pkg.manifest.digest}); "
            f"import it with `ctr image import {a.oci}`")
    return 0


def _configs(text: str) -> list[str]:
    """--configs a,b: the names, each checked before any work is done."""
    configs = list(dict.fromkeys(c.strip() for c in text.split(",") if c.strip()))  # each once
    for c in configs:
        kernel.fragments(c)
    return configs


def cmd_bench(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    model_cpu = cyclemodel.cpu_choice(a.model, a.cpu)
    points = syscalls.profile_points(a.by_function) if a.by_function else None
    if points and a.from_json:
        raise UklError("--by-function runs the benchmark; it does not apply to --from-json",
                       "the profiles saved in the file are shown anyway")
    if a.from_json:
        report = syscalls.load_json(_one_file(a.from_json, "ukl bench syscalls"))
    else:
        report = syscalls.run(configs, a.icount, a.quick, a.timeout, model_cpu, points)
    if a.from_json and model_cpu:
        report.model = cyclemodel.remodel(report.model, model_cpu)
    ui.err.print(f"machine: {report.machine}; accelerator: {report.accel}; kernels: "
                 + ", ".join(f"{c} {k}" for c, k in report.kernels.items()), markup=False)
    ui.report_console().print(syscalls.table(report))
    for t in syscalls.profile_tables(report):
        ui.report_console().print(t)
    if a.json:
        syscalls.save_json(report, a.json)
    if a.plot:
        syscalls.plot(report, a.plot)
    if a.markdown:
        a.markdown.write_text(syscalls.markdown(report, a.plot))
    return 0


def cmd_bench_boot(a: argparse.Namespace) -> int:
    if a.from_json:
        if a.by_function:
            raise UklError("--by-function boots the images; it does not apply to --from-json",
                           "leave out --from-json, or --by-function")
        report = bootbench.merge([bootbench.load_json(f) for f in a.from_json])
    else:
        cyclemodel.check_icount(a.icount, None, a.by_function)
        if a.memory_steps < 0:
            raise UklError(f"--memory-steps {a.memory_steps}: must be 0 or more", "e.g. --memory-steps 6")
        report = bootbench.run(bootbench.names(a.apps, "--apps"), bootbench.names(a.configs, "--configs"),
                               a.icount, a.repeat, bootbench.parse_range(a.memory_range), a.memory_steps,
                               a.timeout, a.memory, (lambda r: bootbench.save_json(r, a.json)) if a.json else None,
                               bootbench.boots(a.boots), not a.no_memory, a.specialize,
                               bootbench.names(a.compressions, "--compressions") if a.compressions else None,
                               a.optimize, a.by_function)
    bootbench.show(report)
    if a.json:
        bootbench.save_json(report, a.json)
    if a.plot:
        bootbench.plot(report, a.plot)
    if a.markdown:
        a.markdown.write_text(bootbench.markdown(report, a.plot, a.markdown))
    return 0


def cmd_bench_remote(a: argparse.Namespace) -> int:
    repeat = a.repeat or (1 if a.quick else 3)
    if a.from_json:
        report = remotebench.load_json(_one_file(a.from_json, "ukl bench remote"))
    else:
        report = remotebench.run(a.quick, a.timeout, repeat)
    ui.err.print(f"machine: {report.machine}; accelerator: {report.accel}; kernels: "
                 + ", ".join(f"{c} {k}" for c, k in report.kernels.items()), markup=False)
    for t in remotebench.tables(report):
        ui.report_console().print(t)
    if a.json:
        remotebench.save_json(report, a.json)
    if a.plot:
        remotebench.plot(report, a.plot)
    if a.markdown:
        a.markdown.write_text(remotebench.markdown(report, a.plot))
    return 0


def _bench_apps(names: list[str], every: list[str]) -> list[str]:
    """The applications `ukl bench app NAME...` runs, of EVERY: the NAMES
    given (each once), or all of them."""
    if not names:
        return every
    chosen = list(dict.fromkeys(names))
    unknown = [n for n in chosen if n not in every]
    if unknown:
        raise UklError(f"{', '.join(unknown)}: not among these benchmarks", "choose from: " + ", ".join(every))
    return chosen


def _app_names(a: argparse.Namespace) -> list[str]:
    """NAME... and the old --only LIST, together."""
    return [*a.names, *a.only_old]


def _each_app(names: list[str], run: Callable[[str], None], save: Callable[[], None], path: Path | None) -> None:
    """Benchmark NAMES one after the other, saving (--json PATH) after
    each, so that an application that fails does not lose the finished
    ones' results."""
    done: list[str] = []
    for name in names:
        try:
            run(name)
        except UklError as e:
            if path and done:
                raise UklError(e.message, (f"{e.hint}; " if e.hint else "")
                               + f"the results of {', '.join(done)} are saved in {path} (show them with "
                               "--from-json)", e.code) from None
            raise
        done.append(name)
        save()


def cmd_bench_app(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    names = _app_names(a)
    if a.clients == "host":
        return _bench_app_host(a, configs, names)
    model_cpu = cyclemodel.cpu_choice(a.model, a.cpu)
    if a.from_json:
        reports = [r for f in a.from_json for r in appbench.load_json(f)]
        chosen = _bench_apps(names, [r.app for r in reports])
        reports = [r for r in reports if r.app in chosen]
        if model_cpu:
            for rep in reports:
                rep.model = cyclemodel.remodel(rep.model, model_cpu, "ukl bench app")
    else:
        chosen = _bench_apps(names, appbench.names())
        reports = []
        _each_app(chosen, lambda n: reports.append(appbench.run_app(n, configs, a.icount, a.requests, a.timeout,
                                                                    a.repeat, model_cpu, a.by_function)),
                  lambda: appbench.save_json(reports, a.json) if a.json else None, a.json)
    only = ",".join(chosen) if names else None
    for rep in reports:
        ui.report_console().print(appbench.table(rep))
        lt = appbench.latency_table(rep)
        if lt is not None:
            ui.report_console().print(lt)
        mt = appbench.model_table(rep)
        if mt:
            ui.report_console().print(mt)
        for t in appbench.profile_tables(rep):
            ui.report_console().print(t)
    if a.json:
        appbench.save_json(reports, a.json)
    if a.plot:
        appbench.plot(reports, a.plot)
    if a.markdown:
        a.markdown.write_text(appbench.markdown(reports, a.plot, a.markdown, only))
    return 0


def _bench_app_host(a: argparse.Namespace, configs: list[str], names: list[str]) -> int:
    """`ukl bench app --clients host`: wall-clock time under real clients;
    the programs that run to completion timed in the guest beside them."""
    for opt, given in (("--icount", a.icount), ("--requests", a.requests), ("--model", a.model), ("--cpu", a.cpu),
                       ("--by-function", a.by_function)):
        if given:
            raise UklError(f"{opt} does not apply to --clients host",
                           "host clients measure wall-clock time with the recipe's [netbench] loads; "
                           f"{opt} belongs to --clients guest")
    if a.from_json:
        reports, runs_done = [], []
        for f in a.from_json:
            rs, rd = hostbench.load_json(f)
            reports += rs
            runs_done += rd
        chosen = _bench_apps(names, [r.app for r in reports] + [r.app for r in runs_done])
        reports = [r for r in reports if r.app in chosen]
        runs_done = [r for r in runs_done if r.app in chosen]
    else:
        todo = _bench_apps(names, [*hostbench.names(), *hostbench.run_to_completion()])
        reports, runs_done = [], []

        def one(name: str) -> None:
            if name in hostbench.names():
                reports.append(hostbench.run_app(name, configs, a.repeat, a.timeout))
            else:  # a run to completion, timed in the guest without -icount
                runs_done.append(appbench.run_app(name, configs, False, None, a.timeout, a.repeat))

        _each_app(todo, one, lambda: hostbench.save_json(reports, runs_done, a.json) if a.json else None,
                  a.json)
    for rep in reports:
        ui.report_console().print(hostbench.table(rep))
    for run in runs_done:
        ui.report_console().print(appbench.table(run))
    if a.json:
        hostbench.save_json(reports, runs_done, a.json)
    if a.plot:
        hostbench.plot(reports, runs_done, a.plot)
    if a.markdown:
        only = ",".join([r.app for r in reports] + [r.app for r in runs_done]) if names else None
        a.markdown.write_text(hostbench.markdown(reports, runs_done, a.plot, a.markdown, only))
    return 0


def cmd_apptest(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    if a.from_json:
        outcomes = apptest.load_json(a.from_json)
    else:
        outcomes = [apptest.run(a.name, c, a.all, a.timeout, a.units, a.network) for c in configs]
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


def cmd_conformance_ltp(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    if configs[0] != "linux":
        raise UklError(f"--configs {a.configs}: the first configuration is the baseline and must be linux",
                       "for example --configs linux,base")
    divergences = ltp.load_divergences()
    if a.from_json:
        outcomes = [o for f in a.from_json for o in ltp.load_json(f) if o.config in configs]
    else:
        outcomes = ltp.run_all(configs, ltp.selection(a.tests), a.output, a.batch, a.test_timeout)
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
        ui.err.print(f"  hint: explain each in {ltp.DIVERGENCES_FILE} or fix it; logs in {a.output / 'logs'}",
                     markup=False)
        return 1
    return 0


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
