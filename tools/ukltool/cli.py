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
from collections.abc import Callable
from pathlib import Path

from rich.markup import escape
from rich.table import Table

import ukltool
from ukltool import (
    appbench,
    appcycles,
    apptest,
    bench,
    bootbench,
    cyclemodel,
    glibctests,
    hostbench,
    image,
    initramfs,
    kernel,
    libc,
    lock,
    ltp,
    ocipkg,
    prefixes,
    profiles,
    project,
    recipes,
    remotebench,
    sources,
    specialize,
    ui,
    vm,
)
from ukltool import flags as ukl_flags
from ukltool import series as series_mod
from ukltool.errors import UklError
from ukltool.paths import REPO, repo_problem

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


def _model_arguments(p: argparse.ArgumentParser, counted: str) -> None:
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


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="ukl", description=__doc__,
                                epilog="Run `ukl COMMAND --help` for each command.")
    p.add_argument("--version", action="version", version=version())
    sub = p.add_subparsers(dest="cmd", metavar="COMMAND", required=True)

    b = sub.add_parser("build", help="build an application and a kernel into a bootable directory",
                       description="Compile SOURCE files into an application, build the kernel for "
                       "--config, and write a bootable result (bzImage, initramfs, manifest) to OUTDIR. "
                       "--config linux builds an ordinary static binary on stock Linux (the baseline).")
    b.add_argument("sources", nargs="+", type=Path, metavar="SOURCE",
                   help="C source files, a project directory, or the NAME of a recipe in apps/ "
                   f"({', '.join(recipes.names()) or 'none yet'})")
    b.add_argument("--config", default="linux", metavar="NAME",
                   help=f"kernel configuration (one of: {', '.join(kernel.config_names())}; default linux)")
    b.add_argument("-o", "--output", type=Path, default=Path("out"), metavar="OUTDIR",
                   help="output directory (default: out)")
    b.add_argument("--name", help="application name (default: the first source's stem)")
    b.add_argument("--userspace", action="store_true",
                   help="add a small Linux userspace (busybox: sh, ps, kill, top, ...) beside the application, "
                   "which is then started as /ukl/NAME from `ukl run --sh` or --shell")
    b.add_argument("--perf", action="store_true",
                   help="add Debian's perf with its shared libraries (about 33 MB) to the userspace; "
                   "implies --userspace")
    b.add_argument("--freestanding", action="store_true",
                   help="no C library: the program brings its own _start and system call shim")
    b.add_argument("--configure-args", type=_words, default=[], metavar="ARGS",
                   help="arguments for the project's configure step (./configure, or cmake), shell-quoted")
    b.add_argument("--make-args", type=_words, default=[], metavar="ARGS",
                   help="variables and targets for make (e.g. 'MALLOC=jemalloc BUILD_TLS=no'), shell-quoted")
    b.add_argument("--build-system", choices=project.SYSTEMS, default="auto",
                   help="how to build a directory (default auto: CMakeLists.txt, an autoconf or other "
                   "configure script, or a Makefile)")
    b.add_argument("--file", action="append", type=_file_spec, default=[], metavar="SRC:DEST",
                   help="add the host file SRC to the image as DEST (an absolute path; parents are created; "
                   "replaces what the image has there, e.g. /etc/passwd)")
    b.add_argument("--overlay", action="append", type=Path, default=[], metavar="DIR",
                   help="add the tree under DIR to the image at / (files, directories, symbolic links, "
                   "with their modes)")
    b.add_argument("--cflags", type=_cflags, default=[], metavar="FLAGS",
                   help="extra compiler flags for C files, the same for every configuration "
                   "(for example --cflags=-fno-omit-frame-pointer for perf call chains)")
    b.add_argument("--specialize", action="store_true",
                   help="a kernel cut to this application: record its smoke test (a file or directory: its default "
                   "run) under strace on the general kernel, keep only the kernel options what it used needs "
                   "(kernel/specialize/), build for that configuration (special-HASH, shared by applications with "
                   "the same needs), re-run the smoke test on it, and say why each option is there in "
                   "OUTDIR/specialize.md")
    b.set_defaults(func=cmd_build)

    r = sub.add_parser("run", help="boot a build result in QEMU", epilog=EPILOG_RUN,
                       description="Boot OUTDIR in QEMU, show the application's output and exit with its status.")
    r.add_argument("outdir", type=Path, metavar="OUTDIR")
    r.add_argument("--timeout", type=_positive, default=120.0, metavar="S", help="seconds (default 120)")
    r.add_argument("--icount", action="store_true",
                   help="deterministic time: -icount shift=0,sleep=off (1 guest ns = 1 instruction) and "
                   "no address-space randomization, seeded randomness and a fixed date, so that runs repeat")
    r.add_argument("--append", action="append", default=[], metavar="ARGS", help="extra kernel command line")
    r.add_argument("--opts", metavar="OPTS",
                   help="UKL options for this boot, comma-separated, instead of those of the profile the image "
                   "was built for (for example --opts byp,byp-every=32; --opts '' for none): "
                   + _option_list() + " (`ukl configs` describes them)")
    r.add_argument("--forward", action="append", type=_forward, default=[], metavar="HOST:GUEST",
                   help="forward 127.0.0.1:HOST on the host to GUEST in the guest (TCP)")
    r.add_argument("--tap", metavar="IFNAME",
                   help="connect the guest's eth0 (10.0.2.15/24, gateway 10.0.2.2) to the existing tap device "
                   "IFNAME instead of QEMU's user network; --forward does not apply")
    r.add_argument("--smp", type=int, default=None,
                   help="virtual CPUs (default 2; 1 with --icount, under which QEMU cannot start a second CPU)")
    r.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                   help="KVM or TCG (default auto: $UKL_ACCEL, else KVM where a test boot with it works, "
                   "decided once per QEMU and host kernel)")
    sh = r.add_mutually_exclusive_group()
    sh.add_argument("--sh", metavar="COMMANDS",
                    help="run this shell command line in the guest instead of the application and exit with its "
                    "status (images built with --userspace; $UKL_APP names the application)")
    sh.add_argument("--shell", action="store_true",
                    help="an interactive shell on the serial console (images built with --userspace)")
    r.add_argument("--remote", type=Path, metavar="DIR",
                   help="remote system calls (runtime/ukl.h ukl_remote_*): a shadow process on the host, "
                   "confined to DIR and running as its owner, executes the application's calls on remote "
                   "files; its log is OUTDIR/shadow.log")
    r.add_argument("--remote-idle-us", type=int, default=1000, metavar="US",
                   help="the shadow polls this long after a request before it sleeps (default 1000; -1: "
                   "always poll, for latency measurements)")
    r.add_argument("--remote-notify", choices=["poll", "irq"], default="poll",
                   help="how a thread waits for the host's answer until it calls ukl_remote_poll() or "
                   "ukl_remote_irq(): spinning (default), or sleeping until the host's interrupt; "
                   "the host then sleeps between requests too")
    r.add_argument("--machine", choices=vm.MACHINES, default="pc",
                   help="QEMU's machine: pc (default: firmware, ACPI, PCI) or microvm (no PCI: virtio-mmio "
                   "devices; no --remote)")
    r.add_argument("--direct", action="store_true",
                   help="boot the uncompressed kernel through its PVH entry: no firmware and no decompression "
                   "(the x86/HVM direct boot ABI, as Firecracker boots)")
    r.add_argument("--pid1", action="store_true",
                   help="the kernel starts the application itself, as PID 1: no init program, nothing mounted, "
                   "no network set up (UKL configurations; not --userspace images)")
    r.add_argument("--log", type=Path, help="console log file (default OUTDIR/console.log)")
    r.add_argument("-v", "--verbose", action="store_true", help="show the kernel's boot messages")
    r.add_argument("args", nargs="*", metavar="ARGS",
                   help="the application's arguments (put them after --)")
    r.set_defaults(func=cmd_run)

    pk = sub.add_parser("pkg", help="package a build result for other runtimes: an OCI image for containerd/urunc",
                        description="Package OUTDIR (a `ukl build` result) as an OCI image archive that containerd "
                        "imports (`ctr image import FILE.tar`) and runs with the urunc runtime: one layer with the "
                        "kernel, the initramfs and /urunc.json; the application's arguments, environment and ports "
                        "in the image configuration. The same OUTDIR gives the same archive, byte for byte. "
                        "docs/deploy.md shows the way to `ctr run` and Kubernetes.")
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

    k = sub.add_parser("kernel", help="the kernel tree and patch series",
                       description="Work on the patched kernel tree in the cache.")
    ks = k.add_subparsers(dest="kcmd", metavar="ACTION", required=True)
    _tree_actions(ks, kernel.SERIES, lambda: sources.linux_tree()[1], kernel.TREE_LOCK)
    kb = ks.add_parser("build", help="build a kernel configuration")
    kb.add_argument("--config", default="linux", metavar="NAME")
    kb.set_defaults(func=lambda a: print(kernel.build(a.config).bzimage))
    ks.add_parser("checkpatch", help="run scripts/checkpatch.pl --strict on every patch").set_defaults(
        func=lambda a: kernel.checkpatch())
    kp = ks.add_parser("build-prefixes", help="build vmlinux after every patch of the series (bisectability)",
                       description="Commit kernel/patches onto the pristine tree and build vmlinux at every "
                       "prefix of the series, in a work tree and build directory of their own. Long: one "
                       "kernel build per patch, mostly incremental.")
    kp.add_argument("--config", default="base", metavar="NAME", help="kernel configuration (default base)")
    kp.add_argument("--from", dest="first", type=_count, default=1, metavar="N",
                    help="start with the prefix of N patches (default 1)")
    kp.set_defaults(func=lambda a: prefixes.build_prefixes(a.config, a.first))

    lb = sub.add_parser("libc", help="the glibc port: its tree, patches and glibc's own tests",
                        description="Work on the glibc port (libc/) and run glibc's tests in ring 0.")
    ls_ = lb.add_subparsers(dest="lcmd", metavar="ACTION", required=True)
    ls_.add_parser("build", help="build glibc for UKL (incremental) and print its build directory").set_defaults(
        func=lambda a: print(libc.build().objdir))
    _tree_actions(ls_, libc.SERIES, lambda: sources.glibc_tree()[1], libc.TREE_LOCK)
    lt = ls_.add_parser("tests", help="run a selection of glibc's own tests linked into the kernel",
                        description="Build glibc's tests (listed in tools/ukltool/glibctests.py) into one UKL "
                        "image, run each in its own boot under --config base, and report pass/fail per test.")
    lt.add_argument("--only", nargs="+", metavar="TEST", help="run only these tests")
    lt.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    lt.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the results table as Markdown")
    lt.add_argument("--logs", type=Path, default=Path("out/glibc-tests"), metavar="DIR",
                    help="where each test's console log goes (default out/glibc-tests)")
    lt.add_argument("--timeout", type=_positive, default=300.0, metavar="S", help="per test (default 300)")
    lt.set_defaults(func=cmd_libc_tests)

    bn = sub.add_parser("bench", help="benchmarks comparing configurations")
    bs = bn.add_subparsers(dest="bcmd", metavar="SUITE", required=True)
    sc = bs.add_parser("syscalls", help="LEBench-style system call and page fault latencies",
                       description="Build bench/lebench.c for each configuration, boot each, and compare "
                       "the medians against the first configuration without UKL (default linux).")
    sc.add_argument("--configs", default="linux,base", help="comma-separated (default linux,base)")
    sc.add_argument("--icount", action="store_true",
                    help="deterministic: the unit is guest instructions (-icount shift=0,sleep=off)")
    sc.add_argument("--quick", action="store_true", help="1,000 iterations and 3 sizes (for tests)")
    _model_arguments(sc, "the instructions")
    sc.add_argument("--profile", metavar="OP[:BYTES],...",
                    help="with --icount: also show where these points' instructions go, by kernel function "
                    "(e.g. getppid,read:1), counted by our QEMU plugin")
    sc.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    sc.add_argument("--plot", type=Path, metavar="FILE.png", help="draw latency plots")
    sc.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the report as Markdown")
    sc.add_argument("--timeout", type=_positive, default=1800.0, metavar="S", help="per boot (default 1800)")
    sc.add_argument("--from-json", type=Path, metavar="FILE",
                    help="do not run: report the results saved in FILE (by --json)")
    sc.set_defaults(func=cmd_bench)

    rb = bs.add_parser("remote", help="remote system calls: null calls, file I/O and OS jitter",
                       description="Run bench/remote.c on the host, in a linux guest and in a base guest "
                       "booted with --remote: a null remote call polling and asleep against getppid, "
                       "pread/pwrite of 1 B to 64 KiB on a host file against guest tmpfs, and OS jitter "
                       "(docs/results-remote.md).")
    rb.add_argument("--quick", action="store_true", help="few batches and short jitter runs (for tests)")
    rb.add_argument("--repeat", type=_count, metavar="N",
                    help="boot each guest N times, interleaved; report the median run (default 3; 1 with --quick)")
    rb.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
    rb.add_argument("--plot", type=Path, metavar="FILE.png", help="draw file I/O latency against size")
    rb.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the report as Markdown")
    rb.add_argument("--timeout", type=_positive, default=1800.0, metavar="S", help="per boot (default 1800)")
    rb.add_argument("--from-json", type=Path, metavar="FILE",
                    help="do not run: report the results saved in FILE (by --json)")
    rb.set_defaults(func=cmd_bench_remote)
    _bench_boot_parser(bs)

    for name in [*appbench.names(), "apps"]:
        what = "every application with a [bench] recipe section" if name == "apps" else f"the {name} recipe"
        ap = bs.add_parser(name, help=f"application benchmark: {what}",
                           description=f"Build and boot {what} under each configuration and load it from "
                           "inside the guest (bench/appload.c): the application's CPU time per request; or, "
                           "with --clients host, with real load generators on the host over a tap device "
                           "(the recipe's [netbench]): throughput and latency in wall-clock time.")
        ap.add_argument("--configs", default="linux,base", help="comma-separated (default linux,base)")
        ap.add_argument("--icount", action="store_true",
                        help="deterministic: the unit is guest instructions (-icount shift=0,sleep=off)")
        ap.add_argument("--clients", choices=("guest", "host"), default="guest",
                        help="guest: bench/appload.c beside the server (default); host: redis-benchmark, "
                        "memcaslap, ab and wrk on the host, in a private network namespace with a tap device "
                        "(needs root), in wall-clock time")
        ap.add_argument("--requests", type=_count, metavar="N", help="requests per load (default: the recipe's)")
        ap.add_argument("--repeat", type=_count, default=1, metavar="N",
                        help="boot each configuration N times, interleaved; report medians (default 1)")
        ap.add_argument("--json", type=Path, metavar="FILE", help="write the results as JSON")
        ap.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the report as Markdown")
        ap.add_argument("--plot", type=Path, metavar="FILE.png",
                        help="draw each load relative to the baseline (the first configuration without UKL)")
        _model_arguments(ap, "the guest's instructions during each load")
        ap.add_argument("--profile", action="store_true",
                        help="with --icount: also show where each load's instructions go, by kernel function "
                        "(and the application's, under UKL profiles), counted by our QEMU plugin")
        ap.add_argument("--from-json", type=Path, metavar="FILE",
                        help="do not run: report the results saved in FILE (by --json)")
        ap.add_argument("--timeout", type=_positive, default=1800.0, metavar="S", help="per boot (default 1800)")
        if name == "apps":
            ap.add_argument("--only", metavar="NAMES", help="comma-separated: these applications only "
                            f"(of {', '.join(appbench.names())})")
        ap.set_defaults(func=cmd_bench_app, app=name, only=None)

    at = sub.add_parser("apptest", help="run an application's own test suite against it in the guest",
                        description="Build the recipe's image, start the application in the guest (on a tap "
                        "device or behind a forwarded port), and run the application's own test suite on the "
                        "host against it "
                        "(the recipe's [tests]: for redis, ./runtest --host --port).")
    at.add_argument("name", metavar="NAME", help="a recipe with a [tests] section (redis, memcached)")
    at.add_argument("--configs", default="linux,base", help="comma-separated (default linux,base)")
    at.add_argument("--all", action="store_true", help="the whole suite, not the recipe's units")
    at.add_argument("--unit", action="append", default=[], metavar="UNIT",
                    help="run this unit instead of the recipe's (repeatable)")
    at.add_argument("--timeout", type=_positive, default=3600.0, metavar="S", help="per configuration")
    at.add_argument("--network", choices=("auto", "tap", "user"), default="auto",
                    help="tap: the guest on a tap device in a private network namespace (root); user: QEMU's "
                    "user network and a forwarded port; auto (default): tap where it can be made")
    at.add_argument("--json", type=Path, metavar="FILE", help="write the counts as JSON")
    at.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the counts as Markdown")
    at.add_argument("--from-json", type=Path, action="append", default=[], metavar="FILE",
                    help="do not run: report the outcomes saved in FILE by --json (repeatable: configurations "
                    "run side by side)")
    at.set_defaults(func=cmd_apptest)

    _conformance_parser(sub)
    sub.add_parser("sources", help="install, verify and unpack the pinned Linux and glibc sources").set_defaults(
        func=cmd_sources)
    sub.add_parser("configs", help="list the kernel configurations and the UKL options",
                   description="List the kernel configurations (kernel/configs) and the UKL options "
                   "(kernel/options.toml) that make profiles of them, such as base+ret+byp.",
                   epilog="example:\n  ukl configs", formatter_class=argparse.RawDescriptionHelpFormatter
                   ).set_defaults(func=cmd_configs)
    return p


def _tree_actions(sub: argparse._SubParsersAction, series: series_mod.Series, tree: Callable[[], Path],
                  lock_name: str) -> None:
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

    sub.add_parser("tree", help=f"apply {patches} and print the {what} tree's path (a git repository)").set_defaults(
        func=show_tree)
    sub.add_parser("export", help=f"write the {what} tree's commits since 'pristine' to {patches}").set_defaults(
        func=export)
    sub.add_parser("reset", help=f"drop edits in the {what} tree and re-apply {patches}").set_defaults(
        func=reset)


def cmd_sources(a: argparse.Namespace) -> int:
    for fn in (sources.linux_tree, sources.glibc_tree):
        src, tree = fn()
        print(f"{src.pin.package} {src.version}: {tree}")
    return 0


def cmd_build(a: argparse.Namespace) -> int:
    recipe = _recipe_name(a.sources)
    if recipe is not None:
        r = recipes.load(recipe)
        if a.freestanding or a.cflags or a.build_system != "auto":
            raise UklError(f"'{recipe}' is a recipe: --freestanding, --cflags and --build-system do not apply",
                           f"its build is described in apps/{recipe}/recipe.toml")
        if r.build.library:
            raise UklError(f"'{recipe}' is a library recipe: it is built as a dependency of an application",
                           "build an application that depends on it: " +
                           (", ".join(n for n in recipes.names() if recipe in recipes.load(n).depends) or "none"))
        kernel.fragments(a.config)  # validates the name before any work

        def make_spec(config: str, out: Path, extra: list[tuple[Path, str]]) -> image.BuildSpec:
            spec = recipes.image_spec(r, config, out, [*a.file, *extra], a.configure_args, a.make_args, a.overlay)
            spec.perf = a.perf
            return spec
    else:
        r = None

        def make_spec(config: str, out: Path, extra: list[tuple[Path, str]]) -> image.BuildSpec:
            opts = project.Options(system=a.build_system, configure_args=list(a.configure_args),
                                   make_args=list(a.make_args))
            return image.BuildSpec(a.sources, config, out, a.name, a.freestanding, a.userspace or a.perf, a.cflags,
                                   [*a.file, *extra], a.overlay, opts, perf=a.perf)
    if a.specialize:
        res = specialize.build(make_spec(a.config, a.output, []), r, make_spec)
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
    vm.check_machine(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=[], log=log, machine=a.machine,
                                remote=a.remote))
    if a.pid1:
        check_pid1_run(a, man, sh, forwards)
    append = list(a.append)
    if a.opts is not None:
        opts = profiles.opts_arg(a.opts)
        if opts and not kernel.is_ukl(man.config):
            raise UklError(f"--opts: {a.outdir} was built for '{man.config}', which runs the application as an "
                           "ordinary process", "build it for a UKL configuration (--config base)")
        append.append(f"{profiles.KERNEL_PARAM}={','.join(opts)}")
    with tempfile.TemporaryDirectory(prefix="ukl-args-") as td:
        extra = initramfs.args_archive(app_args, Path(td), sh)
        res = vm.boot(vm.RunSpec(bzimage=a.outdir / "bzImage", initrds=[a.outdir / "initramfs.cpio", extra],
                                 log=log, timeout=a.timeout, icount=a.icount, append=append,
                                 forwards=forwards, tap=a.tap, smp=run_smp(a.smp, a.icount), verbose=a.verbose,
                                 interactive=a.shell, accel=None if a.accel == "auto" else a.accel,
                                 remote=a.remote.resolve() if a.remote else None,
                                 remote_idle_us=a.remote_idle_us, remote_notify=a.remote_notify,
                                 side_dir=a.outdir, machine=a.machine, direct=a.direct,
                                 pid1=f"/ukl/{man.app}" if a.pid1 else None, pid1_args=list(app_args)))
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
    points = bench.profile_points(a.profile) if a.profile else None
    if points and a.from_json:
        raise UklError("--profile runs the benchmark; it does not apply to --from-json",
                       "the profiles saved in the file are shown anyway")
    report = bench.load_json(a.from_json) if a.from_json else bench.run(configs, a.icount, a.quick, a.timeout,
                                                                         model_cpu, points)
    if a.from_json and model_cpu:
        report.model = cyclemodel.remodel(report.model, model_cpu)
    ui.err.print(f"machine: {report.machine}; accelerator: {report.accel}; kernels: "
                 + ", ".join(f"{c} {k}" for c, k in report.kernels.items()), markup=False)
    ui.report_console().print(bench.table(report))
    for t in bench.profile_tables(report):
        ui.report_console().print(t)
    if a.json:
        bench.save_json(report, a.json)
    if a.plot:
        bench.plot(report, a.plot)
    if a.markdown:
        a.markdown.write_text(bench.markdown(report, a.plot))
    return 0


def _bench_boot_parser(bs: argparse._SubParsersAction) -> None:
    bb = bs.add_parser("boot", help="image size, boot time to main() (and a server's first answer), least memory",
                       description="Build each application for each configuration and measure: the image's "
                       "bytes (bzImage, initramfs) and vmlinux's text/data/bss; the guest time and instructions "
                       "from the kernel's first instruction to main() (and for a server to its first answer to "
                       "the recipe's readiness probe), with the wall time under TCG beside them; and the least "
                       "memory (-m, MiB) at which the application passes its smoke test, by bisection "
                       "(docs/results-boot.md).")
    bb.add_argument("--apps", default="hello", metavar="LIST",
                    help="comma-separated recipe names, directories or C files (default hello)")
    bb.add_argument("--configs", default="linux,base", help="comma-separated (default linux,base)")
    bb.add_argument("--icount", action="store_true",
                    help="deterministic guest time: -icount shift=0,sleep=off (without it: instructions and wall "
                    "time only)")
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
    bb.add_argument("--no-memory", action="store_true", help="do not bisect the least memory")
    bb.add_argument("--timeout", type=_positive, default=600.0, metavar="S", help="per boot (default 600)")
    bb.add_argument("--json", type=Path, metavar="FILE", help="write the rows as JSON (after each one)")
    bb.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the report as Markdown")
    bb.add_argument("--plot", type=Path, metavar="FILE.png", help="draw sizes, boot times and memory")
    bb.add_argument("--from-json", type=Path, action="append", default=[], metavar="FILE",
                    help="do not run: report the results saved in FILE (by --json); repeatable: the files' rows "
                    "in turn")
    bb.set_defaults(func=cmd_bench_boot)


def cmd_bench_boot(a: argparse.Namespace) -> int:
    if a.from_json:
        report = bootbench.merge([bootbench.load_json(f) for f in a.from_json])
    else:
        if a.memory_steps < 0:
            raise UklError(f"--memory-steps {a.memory_steps}: must be 0 or more", "e.g. --memory-steps 6")
        report = bootbench.run(bootbench.names(a.apps, "--apps"), bootbench.names(a.configs, "--configs"),
                               a.icount, a.repeat, bootbench.parse_range(a.memory_range), a.memory_steps,
                               a.timeout, a.memory, (lambda r: bootbench.save_json(r, a.json)) if a.json else None,
                               bootbench.boots(a.boots), not a.no_memory, a.specialize)
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
    report = remotebench.load_json(a.from_json) if a.from_json else remotebench.run(a.quick, a.timeout, repeat)
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


def _bench_apps(a: argparse.Namespace, every: list[str]) -> list[str]:
    """The applications `ukl bench NAME` runs, of EVERY (apps: all or --only)."""
    if a.app != "apps":
        return [a.app]
    if not a.only:
        return every
    names = list(dict.fromkeys(n.strip() for n in a.only.split(",") if n.strip()))
    unknown = [n for n in names if n not in every]
    if unknown or not names:
        raise UklError(f"--only {a.only}: " + (f"{', '.join(unknown)}: not among these benchmarks" if unknown
                                               else "names no application"), "choose from: " + ", ".join(every))
    return names


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
    if a.clients == "host":
        return _bench_app_host(a, configs)
    model_cpu = cyclemodel.cpu_choice(a.model, a.cpu)
    if model_cpu and not a.icount and not a.from_json:
        raise UklError("--model cycles needs --icount", "the model adds to guest instruction counts")
    if a.from_json:
        reports = appbench.load_json(a.from_json)
        chosen = _bench_apps(a, [r.app for r in reports]) if a.app == "apps" else [r.app for r in reports]
        reports = [r for r in reports if r.app in chosen]
        if model_cpu:
            for rep in reports:
                rep.model = appcycles.remodel(rep.model, model_cpu)
    else:
        chosen = _bench_apps(a, appbench.names())
        reports = []
        _each_app(chosen, lambda n: reports.append(appbench.run_app(n, configs, a.icount, a.requests, a.timeout,
                                                                    a.repeat, model_cpu, a.profile)),
                  lambda: appbench.save_json(reports, a.json) if a.json else None, a.json)
    only = ",".join(chosen) if a.only or a.app != "apps" else None
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


def _bench_app_host(a: argparse.Namespace, configs: list[str]) -> int:
    for opt, given in (("--icount", a.icount), ("--requests", a.requests), ("--model", a.model), ("--cpu", a.cpu),
                       ("--profile", a.profile)):
        if given:
            raise UklError(f"{opt} does not apply to --clients host",
                           "host clients measure wall-clock time with the recipe's [netbench] loads")
    if a.from_json:
        reports, runs_done = hostbench.load_json(a.from_json)
        if a.only:
            chosen = _bench_apps(a, [r.app for r in reports] + [r.app for r in runs_done])
            reports = [r for r in reports if r.app in chosen]
            runs_done = [r for r in runs_done if r.app in chosen]
    else:
        if a.app != "apps" and a.app not in hostbench.names():
            raise UklError(f"apps/{a.app}/recipe.toml has no [netbench] section",
                           "host-client benchmarks: " + ", ".join(hostbench.names()))
        todo = _bench_apps(a, [*hostbench.names(), *hostbench.run_to_completion()])
        reports, runs_done = [], []

        def one(name: str) -> None:
            if name in hostbench.names():
                reports.append(hostbench.run_app(name, configs, a.repeat, a.timeout))
            elif name in hostbench.run_to_completion() and a.app == "apps":
                # `apps`: the runs to completion too, timed in the guest without -icount
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
        only = ",".join([r.app for r in reports] + [r.app for r in runs_done]) if a.only else None
        a.markdown.write_text(hostbench.markdown(reports, runs_done, a.plot, a.markdown, only))
    return 0


def cmd_apptest(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    if a.from_json:
        outcomes = apptest.load_json(a.from_json)
    else:
        outcomes = [apptest.run(a.name, c, a.all, a.timeout, a.unit, a.network) for c in configs]
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
        a.markdown.write_text(apptest.markdown(a.name, outcomes, a.all, a.unit, a.markdown))
    return 0 if all(o.finished for o in outcomes) else 1


def _conformance_parser(sub: argparse._SubParsersAction) -> None:
    """`ukl conformance ltp` (ltp.py)."""
    cf = sub.add_parser("conformance", help="conformance suites written elsewhere, run under each configuration")
    cs = cf.add_subparsers(dest="ccmd", metavar="SUITE", required=True)
    lp = cs.add_parser("ltp", help="LTP's system-call tests as UKL applications",
                       description="Build LTP's system-call tests (testcases/kernel/syscalls, the commit in "
                       "tests/ltp/source.toml) into one program per configuration behind a dispatcher, boot it "
                       "under each configuration running each test as its own process, and report TPASS, TFAIL, "
                       "TBROK or TCONF per test (the worst it reported). A test that passes under linux and not "
                       "under another configuration must be listed in tests/ltp/divergences.toml, or the "
                       "command fails.")
    lp.add_argument("--configs", default="linux,base", help="comma-separated, linux first (default linux,base)")
    lp.add_argument("--tests", default=ltp.DEFAULT_LIST, metavar="LIST",
                    help="comma-separated test names and lists of tests/ltp/ (default "
                    f"{ltp.DEFAULT_LIST}; lists: {', '.join(ltp.list_names()) or 'none'})")
    lp.add_argument("--batch", type=_count, default=ltp.DEFAULT_BATCH, metavar="N",
                    help=f"tests per boot (default {ltp.DEFAULT_BATCH})")
    lp.add_argument("--timeout", type=_positive, default=ltp.DEFAULT_TIMEOUT, metavar="S",
                    help=f"per test, inside the guest (default {ltp.DEFAULT_TIMEOUT:.0f})")
    lp.add_argument("-o", "--output", type=Path, default=Path("out/ltp"), metavar="DIR",
                    help="images and console logs (default out/ltp)")
    lp.add_argument("--json", type=Path, metavar="FILE", help="write one row per test and configuration as JSON")
    lp.add_argument("--markdown", type=Path, metavar="FILE.md", help="write the table as Markdown")
    lp.add_argument("--from-json", type=Path, metavar="FILE", help="do not run: report the rows saved in FILE")
    lp.set_defaults(func=cmd_conformance_ltp)


def cmd_conformance_ltp(a: argparse.Namespace) -> int:
    configs = _configs(a.configs)
    if configs[0] != "linux":
        raise UklError(f"--configs {a.configs}: the first configuration is the baseline and must be linux",
                       "for example --configs linux,base")
    divergences = ltp.load_divergences()
    if a.from_json:
        outcomes = [o for o in ltp.load_json(a.from_json) if o.config in configs]
    else:
        outcomes = ltp.run_all(configs, ltp.selection(a.tests), a.output, a.batch, a.timeout)
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
    outcomes = glibctests.run_all(a.logs, a.timeout, a.only)
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
