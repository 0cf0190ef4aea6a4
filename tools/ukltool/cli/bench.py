"""`ukl bench`: system calls, remote calls, boot and applications."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from ukltool.bench import appbench, bootbench, hostbench, peerbench, remotebench, secrecybench, syscalls
from ukltool.cli.common import (
    Deprecated,
    add_command,
    configs_arg,
    configs_option,
    count_arg,
    icount_option,
    list_arg,
    model_arguments,
    one_file,
    report_options,
    safe_list,
    timeout_option,
)
from ukltool.linux import kernel
from ukltool.plugin import cyclemodel
from ukltool.util import ui
from ukltool.util.errors import UklError

DEFAULT_POINTS = "getppid,read:1"
REPEAT_HELP = ("boot each image N times, the configurations interleaved, and report the median run (default 1; "
               "the JSON keeps every run)")


def _old_profile(ns: argparse.Namespace, value: object) -> bool:
    """`bench syscalls --profile OP,...`: the points, and --by-function."""
    ns.points = value
    return True


def bench_parser(sub: argparse._SubParsersAction) -> None:
    bn = add_command(sub, "bench", "benchmarks comparing configurations",
                     "Suites (syscalls, remote, boot) and application benchmarks (app NAME...), each under the "
                     "configurations and profiles of --configs, the first without UKL the baseline.",
                     ("ukl bench syscalls --configs linux,base,base+byp --icount",
                      "ukl bench app redis --configs linux,base --icount",
                      "ukl bench boot hello --configs linux,base --icount"), listed=False)
    bs = bn.add_subparsers(dest="bcmd", metavar="SUITE", required=True)
    sc = add_command(bs, "syscalls", "LEBench-style system call and page fault latencies",
                     "Build guest/bench/lebench.c for each configuration, boot each, and compare the medians "
                     "against the first configuration without UKL (default linux).",
                     ("ukl bench syscalls --configs linux,base --icount --quick",
                      "ukl bench syscalls --configs linux,base+byp --icount --by-function --points getppid,read:1",
                      "ukl bench syscalls --from-json docs/results/results.json --markdown out/results.md"))
    configs_option(sc)
    icount_option(sc)
    sc.add_argument("--quick", action="store_true", help="1,000 iterations and 3 sizes (for tests)")
    model_arguments(sc, "the instructions")
    sc.add_argument("--by-function", action="store_true",
                    help="with --icount: also show where the instructions of the --points go, by kernel function, "
                    "counted by our QEMU plugin")
    sc.add_argument("--points", metavar="OP[:BYTES],...",
                    help=f"the points --by-function profiles (default {DEFAULT_POINTS})")
    sc.add_argument("--profile", dest="by_function", action=Deprecated, use="--by-function --points OP[:BYTES],...",
                    convert=_old_profile)
    timeout_option(sc, 1800.0)
    report_options(sc, plot=True)
    sc.set_defaults(func=cmd_bench)

    sb = add_command(bs, "secrecy", "Secrecy's GROUP-BY on three guests: completion, call times, sleeps, segments",
                     "Run Secrecy's exp_group_by ROWS 1 on three guests (`ukl cluster`) under each configuration, "
                     "REPEAT times interleaved, the slowest REPEAT/10 dropped as the UKL paper does; per run the "
                     "GROUP-BY's time on rank 0, each party's send and receive call times and sleeps (the MPI "
                     "subset's statistics), and the TCP segments between the guests; and Secrecy's own GROUP-BY "
                     "test once per configuration, its opened results against the baseline's "
                     "(docs/results/results-secrecy.md).",
                     ("ukl bench secrecy --rows 128 --repeat 3",
                      "ukl bench secrecy --rows 128,1024 --spin-rows 128 --repeat 5 --json out/s.json "
                      "--markdown out/s.md --plot out/s.png"))
    configs_option(sb, ",".join(secrecybench.DEFAULT_CONFIGS))
    sb.add_argument("--rows", default=",".join(map(str, secrecybench.DEFAULT_ROWS)), metavar="N,...",
                    help="the GROUP-BY's input sizes, powers of two (default %(default)s)")
    sb.add_argument("--spin-rows", default="", metavar="N,...",
                    help="input sizes also run with parties that spin (poll without sleeping, as MPICH does) "
                    "instead of sleeping in poll() while they wait (default none)")
    sb.add_argument("--repeat", type=count_arg, default=5, metavar="N",
                    help="runs per point (default 5); the slowest tenth is dropped (the paper: 2 of 20)")
    sb.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto",
                    help="the nodes' accelerator (default auto: KVM where it works), named in the report")
    sb.add_argument("--count-insns", action="store_true",
                    help="run every node under our QEMU plugin (TCG; it slows the runs): per party, the "
                    "instructions from MPI_Init to MPI_Finalize on every vCPU, by class, and modelled cycles")
    timeout_option(sb, 1800.0)
    report_options(sb, plot=True)
    sb.set_defaults(func=cmd_bench_secrecy)

    rb = add_command(bs, "remote", "remote system calls: null calls, file I/O and OS jitter",
                     "Run guest/bench/remote.c on the host, in a linux guest and in a base guest booted with "
                     "--remote: a null remote call polling and asleep against getppid, pread/pwrite of 1 B to 64 KiB "
                     "on a host file against guest tmpfs, and OS jitter (docs/results/results-remote.md).",
                     ("ukl bench remote --quick",
                      "ukl bench remote --json out/remote.json --markdown out/remote.md --plot out/remote.png"))
    rb.add_argument("--quick", action="store_true", help="few batches and short jitter runs (for tests)")
    rb.add_argument("--repeat", type=count_arg, default=1, metavar="N", help=REPEAT_HELP)
    timeout_option(rb, 1800.0)
    report_options(rb, plot=True)
    rb.set_defaults(func=cmd_bench_remote)
    _bench_boot_parser(bs)
    _bench_app_parser(bs)


def _bench_app_parser(bs: argparse._SubParsersAction) -> None:
    ap = add_command(bs, "app", "application benchmarks: the recipes' servers and programs under load",
                     "Build and boot each application under each configuration and load it. With --clients guest "
                     "(the default), from inside the guest (guest/bench/appload.c, the recipe's [bench]): the "
                     "application's CPU time per request, or guest instructions with --icount. With --clients host, "
                     "with real load generators on the host over a tap device (the recipe's [netbench]; needs root): "
                     "throughput and latency in wall-clock time; programs that run to completion are timed in the "
                     "guest beside them. Without NAME: every application the mode has.",
                     ("ukl bench app redis --configs linux,base --icount",
                      "ukl bench app --configs linux,base,base+ret+byp --icount --json out/apps.json",
                      "ukl bench app redis --icount --by-function --markdown out/redis.md",
                      "ukl bench app redis memcached --clients host --repeat 3",
                      "ukl bench app memcached --from-json docs/results/results-apps.json --markdown out/m.md"))
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help=f"recipes with a [bench] section ({safe_list(appbench.names)}), or with --clients host a "
                    f"[netbench] section ({safe_list(hostbench.names)}) or a run to completion (default: all of them)")
    configs_option(ap)
    ap.add_argument("--clients", choices=("guest", "host"), default="guest",
                    help="guest: guest/bench/appload.c beside the server (default); host: redis-benchmark, "
                    "memcaslap, ab and wrk on the host, in a private network namespace with a tap device "
                    "(needs root), in wall-clock time")
    ap.add_argument("--repeat", type=count_arg, default=1, metavar="N", help=REPEAT_HELP)
    timeout_option(ap, 1800.0)
    g = ap.add_argument_group("in-guest load only (--clients guest)")
    icount_option(g)
    g.add_argument("--requests", type=count_arg, metavar="N", help="requests per load (default: the recipe's)")
    model_arguments(g, "the guest's instructions during each load")
    g.add_argument("--by-function", action="store_true",
                   help="with --icount: also show where each load's instructions go, by kernel function "
                   "(and the application's, under UKL profiles), counted by our QEMU plugin")
    g.add_argument("--profile", dest="by_function", action=Deprecated, use="--by-function", nargs=0, const=True)
    ap.add_argument("--only", dest="only_old", action=Deprecated, use="`ukl bench app NAME...`",
                    type=list_arg, default=[])
    report_options(ap, plot=True)
    ap.set_defaults(func=cmd_bench_app)


def _bench_boot_parser(bs: argparse._SubParsersAction) -> None:
    bb = add_command(bs, "boot", "image size, boot time to main() (and a server's first answer), least memory",
                     "Build each application for each configuration and measure: the image's bytes (bzImage, "
                     "initramfs; the OCI layer `ukl pkg` ships) and vmlinux's text/data/bss; the guest time and "
                     "instructions from the kernel's first instruction to main() (and for a server to its first "
                     "answer to the recipe's readiness probe), with the wall time under TCG beside them; and the "
                     "least memory (-m, MiB) at which the image as shipped does its work, by bisection "
                     "(docs/results/results-boot.md). --peers adds peers built and measured the same way.",
                     ("ukl bench boot hello --configs linux,base --icount",
                      "ukl bench boot examples/hello/hello.c redis --icount --no-memory --boots pc,pc-direct",
                      "ukl bench boot --from-json a.json --from-json b.json --markdown out/boot.md"))
    bb.add_argument("names", nargs="*", metavar="APP",
                    help="recipe names, project directories or C files, as `ukl build` takes them (default hello)")
    bb.add_argument("--apps", dest="apps_old", action=Deprecated, use="`ukl bench boot APP...`", type=list_arg,
                    default=[])
    configs_option(bb)
    icount_option(bb)
    bb.add_argument("--specialize", action="store_true",
                    help="after each configuration's row, one for the kernel specialized from it to the application "
                    "(`ukl build --specialize`; specialized: true in the JSON)")
    bb.add_argument("--repeat", type=count_arg, default=1, metavar="N", help=REPEAT_HELP)
    bb.add_argument("--memory", type=count_arg, default=bootbench.MEASURE_MEMORY, metavar="MIB",
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
                    f"one of: {safe_list(kernel.compressions)})")
    bb.add_argument("--optimize", metavar="NAME",
                    help="compile every kernel for NAME instead of the configurations' -O2 (one of: "
                    f"{safe_list(kernel.optimizations)})")
    bb.add_argument("--no-memory", action="store_true", help="do not bisect the least memory")
    bb.add_argument("--peers", type=list_arg, default=[], metavar="LIST",
                    help="also build and measure these peers in the same run, with the same harness "
                    "(measure/boot-peers-built.toml: firecracker-linux, stock Linux 6.1 from Firecracker's guest "
                    "configuration with a static hello as init; unikraft-hello, Unikraft's helloworld)")
    bb.add_argument("--by-function", action="store_true",
                    help="boot each image once more with the plugin profiling it, and report where the "
                    "instructions from vmlinux's entry to main() (and the first reply) go, by function")
    timeout_option(bb, 600.0)
    report_options(bb, plot=True)
    bb.set_defaults(func=cmd_bench_boot)


def cmd_bench(a: argparse.Namespace) -> int:
    configs = configs_arg(a.configs)
    model_cpu = cyclemodel.cpu_choice(a.model, a.cpu)
    if a.points and not a.by_function:
        raise UklError("--points chooses what --by-function profiles", "add --by-function")
    points = syscalls.profile_points(a.points or DEFAULT_POINTS) if a.by_function else None
    if points and a.from_json:
        raise UklError("--by-function runs the benchmark; it does not apply to --from-json",
                       "the profiles saved in the file are shown anyway")
    if a.from_json:
        report = syscalls.load_json(one_file(a.from_json, "ukl bench syscalls"))
    else:
        report = syscalls.run(configs, a.icount, a.quick, a.timeout, model_cpu, points)
    if a.from_json and model_cpu:
        report.model = cyclemodel.remodel(report.model, model_cpu)
    ui.err.print(f"machine: {report.machine}; accelerator: {report.accel}; kernels: "
                 + ", ".join(f"{c} {k}" for c, k in report.kernels.items()), markup=False)
    ui.report_console().print(syscalls.table(report))
    for t in syscalls.profile_tables(report):
        ui.report_console().print(t)
    write_reports(a, lambda f: syscalls.save_json(report, f), lambda f: syscalls.plot(report, f),
                  lambda: syscalls.markdown(report, a.plot))
    return 0


def write_reports(a: argparse.Namespace, save_json: Callable[[Path], None], plot: Callable[[Path], None],
                  markdown: Callable[[], str]) -> None:
    """--json, --plot and --markdown, each where it was asked for (the
    markdown last: it names the plot)."""
    if a.json:
        save_json(a.json)
    if a.plot:
        plot(a.plot)
    if a.markdown:
        a.markdown.write_text(markdown())


def cmd_bench_boot(a: argparse.Namespace) -> int:
    if a.from_json:
        if a.by_function or a.peers:
            opt = "--by-function" if a.by_function else "--peers"
            raise UklError(f"{opt} boots images; it does not apply to --from-json",
                           f"leave out --from-json, or {opt}")
        report = bootbench.merge([bootbench.load_json(f) for f in a.from_json])
    else:
        cyclemodel.check_icount(a.icount, None, a.by_function)
        if a.memory_steps < 0:
            raise UklError(f"--memory-steps {a.memory_steps}: must be 0 or more", "e.g. --memory-steps 6")
        apps = [*a.names, *a.apps_old] or ["hello"]
        peers = peerbench.check(a.peers)   # every name checked before any work
        report = bootbench.run(apps, bootbench.names(a.configs, "--configs"),
                               a.icount, a.repeat, bootbench.parse_range(a.memory_range), a.memory_steps,
                               a.timeout, a.memory, (lambda r: bootbench.save_json(r, a.json)) if a.json else None,
                               bootbench.boots(a.boots), not a.no_memory, a.specialize,
                               bootbench.names(a.compressions, "--compressions") if a.compressions else None,
                               a.optimize, a.by_function)
        for p in peers:
            report.peers.append(peerbench.measure(p, a.icount, a.memory, None if a.no_memory else
                                                  bootbench.parse_range(a.memory_range), a.memory_steps, a.timeout))
            if a.json:
                bootbench.save_json(report, a.json)
    bootbench.show(report)
    write_reports(a, lambda f: bootbench.save_json(report, f), lambda f: bootbench.plot(report, f),
                  lambda: bootbench.markdown(report, a.plot, a.markdown))
    return 0


def cmd_bench_secrecy(a: argparse.Namespace) -> int:
    if a.from_json:
        report = secrecybench.load_json(one_file(a.from_json, "ukl bench secrecy"))
    else:
        try:
            cases = [(int(r), "block") for r in list_arg(a.rows)] + [(int(r), "spin") for r in list_arg(a.spin_rows)]
        except ValueError:
            raise UklError(f"--rows {a.rows} --spin-rows {a.spin_rows}: not lists of numbers",
                           "for example --rows 128,1024 --spin-rows 128") from None
        report = secrecybench.run(configs_arg(a.configs), cases, a.repeat, a.timeout,
                                  None if a.accel == "auto" else a.accel, json_path=a.json,
                                  count_insns=a.count_insns)
    spin = [str(r) for r, w in report.cases if w == "spin"]
    command = f"./ukl bench secrecy --configs {','.join(report.configs)} --rows " + \
        ",".join(str(r) for r, w in report.cases if w == "block") + \
        (f" --spin-rows {','.join(spin)}" if spin else "") + f" --repeat {report.repeat}" + \
        (" --count-insns" if report.model else "")
    text = secrecybench.markdown(report, a.plot, command)
    print(text)
    write_reports(a, lambda f: secrecybench.save_json(report, f), lambda f: secrecybench.plot(report, f),
                  lambda: text)
    return 0


def cmd_bench_remote(a: argparse.Namespace) -> int:
    repeat = a.repeat
    if a.from_json:
        report = remotebench.load_json(one_file(a.from_json, "ukl bench remote"))
    else:
        report = remotebench.run(a.quick, a.timeout, repeat)
    ui.err.print(f"machine: {report.machine}; accelerator: {report.accel}; kernels: "
                 + ", ".join(f"{c} {k}" for c, k in report.kernels.items()), markup=False)
    for t in remotebench.tables(report):
        ui.report_console().print(t)
    write_reports(a, lambda f: remotebench.save_json(report, f), lambda f: remotebench.plot(report, f),
                  lambda: remotebench.markdown(report, a.plot))
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
    configs = configs_arg(a.configs)
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
    write_reports(a, lambda f: appbench.save_json(reports, f), lambda f: appbench.plot(reports, f),
                  lambda: appbench.markdown(reports, a.plot, a.markdown, only))
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
    only = ",".join([r.app for r in reports] + [r.app for r in runs_done]) if names else None
    write_reports(a, lambda f: hostbench.save_json(reports, runs_done, f),
                  lambda f: hostbench.plot(reports, runs_done, f),
                  lambda: hostbench.markdown(reports, runs_done, a.plot, a.markdown, only))
    return 0
