"""`ukl cluster`: several guests of one image as one application."""

from __future__ import annotations

import argparse
from pathlib import Path

from ukltool.apps import recipes
from ukltool.build import image
from ukltool.cli.common import add_command, boot_opts, icount_option, option_list, timeout_option
from ukltool.run import cluster, netns
from ukltool.util import ui
from ukltool.util.errors import UklError


def cluster_parser(sub: argparse._SubParsersAction) -> None:
    c = add_command(sub, "cluster", "boot several guests of one image on a private network",
                    "Boot N guests of OUTDIR at once, one node each, on a bridge in a network namespace made for the "
                    "run (and removed after it). Node I has the address 10.0.3.(11+I) and finds UKL_RANK=I and "
                    "UKL_HOSTS (every node's address, in order) in its environment; the host is 10.0.3.1. Each "
                    "node is a `ukl run` of the image, its output shown prefixed with [I]. The exit status is 0 "
                    "when every node's application exited 0; otherwise the first failed node's status, and the "
                    "other nodes are stopped. Needs root and /dev/net/tun.",
                    ("ukl cluster out/ring --nodes 3",
                     "ukl cluster out/secrecy -- 1024 1",
                     "ukl cluster out/secrecy --opts ret,byp,shortcut --timeout 1200 -- 8192 1"), listed=False)
    c.add_argument("outdir", type=Path, metavar="OUTDIR")
    c.add_argument("--nodes", type=int, default=None, metavar="N",
                   help=f"how many guests (2 to {cluster.MAX_NODES}; default the recipe's nodes, else 3)")
    timeout_option(c, 300.0)
    icount_option(c)
    c.add_argument("--opts", metavar="OPTS",
                   help="UKL options for every node instead of the image's profile: " + option_list())
    c.add_argument("--smp", type=int, default=None, help="virtual CPUs per guest (as `ukl run --smp`)")
    c.add_argument("--accel", choices=("auto", "kvm", "tcg"), default="auto", help="KVM or TCG (as `ukl run`)")
    c.add_argument("--append", action="append", default=[], metavar="ARGS",
                   help="extra kernel command line for every node")
    c.add_argument("--log-dir", type=Path, metavar="DIR",
                   help="where each node's console log goes, as nodeI.log (default OUTDIR/cluster)")
    c.add_argument("--count-insns", action="store_true",
                   help="count what each guest executes (as `ukl run --count-insns`; TCG only) into the log "
                   "directory, as nodeI.insns.json")
    c.add_argument("-v", "--verbose", action="store_true", help="show every node's kernel messages")
    c.add_argument("args", nargs="*", metavar="ARGS", help="the application's arguments, the same on every node "
                   "(put them after --)")
    c.set_defaults(func=cmd_cluster)


def run_args(a: argparse.Namespace) -> list[str]:
    """The options each node's `ukl run` gets."""
    out = ["--timeout", str(a.timeout), "--accel", a.accel]
    if a.icount:
        out.append("--icount")
    if a.opts is not None:
        out.append(f"--opts={a.opts}")
    if a.smp is not None:
        out += ["--smp", str(a.smp)]
    if a.verbose:
        out.append("-v")
    out += [f"--append={w}" for w in a.append]
    return out


def recipe_nodes(man: image.Manifest) -> int | None:
    """The guests the recipe OUTDIR was built from says its default run
    needs ([image] nodes), if it says more than one."""
    if man.recipe is None or man.recipe not in recipes.names():
        return None
    try:
        nodes = recipes.load(man.recipe).nodes
    except UklError:   # a recipe changed since: the image itself is still fine
        return None
    return nodes if nodes > 1 else None


def cmd_cluster(a: argparse.Namespace) -> int:
    man = image.load(a.outdir)   # refuses what is not a build result
    if a.nodes is None:
        a.nodes = recipe_nodes(man) or 3
    if not image.has_network_device(man):
        raise UklError(f"the kernel of {a.outdir} has no network device, so its nodes cannot reach each other",
                       "rebuild with --specialize --kconfig nic:WHY, or without --specialize")
    if a.opts is not None:
        boot_opts(a.opts, man, a.outdir)
    why = netns.unavailable()
    if why:
        raise UklError(why, "run as root on a host with /dev/net/tun")
    log_dir = a.log_dir or a.outdir / "cluster"
    args = a.args or list(man.args)
    ui.info(f"{a.nodes} nodes of {a.outdir} ({man.config}) on {netns.BRIDGE_NET}.0/24; logs: {log_dir}")
    res = cluster.run(a.outdir, a.nodes, log_dir, run_args(a), args, count_insns=a.count_insns)
    for i, code in enumerate(res.codes):
        if i in res.stopped:
            state = "stopped (another node failed)"
        else:
            state = f"exit {code}"
        counted = f"; instructions {cluster.node_insns(log_dir, i)}" if a.count_insns else ""
        ui.err.print(f"ukl: node {i} ({netns.node_address(i)}): {state}; log {cluster.node_log(log_dir, i)}"
                     f"{counted}", markup=False)
    if res.failed is not None:
        ui.err.print(f"[bold red]ukl: node {res.failed} failed[/] (status {res.codes[res.failed]}); "
                     f"see {cluster.node_log(log_dir, res.failed)}")
        return res.codes[res.failed]
    ui.err.print(f"ukl: {a.nodes} nodes finished in {res.seconds:.1f}s", markup=False)
    return 0
