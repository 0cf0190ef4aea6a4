"""`ukl bench boot --peers NAME,...`: peers built here from pinned inputs
(measure/boot-peers-built.toml, shared/peers/) and measured with the same
harness as our images, in the same run: the bytes a VMM loads, the guest
instructions from the first instruction of the kernel (or unikernel) to
the application's main(), and the least memory in which it prints its
hello.

- firecracker-linux: stock Linux 6.1 (the tree at the series' base, no UKL
  patch) built from Firecracker's CI guest configuration, a static hello
  as init (guest/peers/hello-init.c), booted as Firecracker boots it:
  vmlinux through its PVH entry, here on QEMU's -M microvm.
- unikraft-hello: Unikraft 0.17's helloworld for its QEMU x86-64
  platform, a multiboot image on -M pc.

Each boots on its own QEMU command line (not `ukl run`'s: a stock kernel
and a unikernel have no ukl-init, no status port). The runs stop when the
plugin reaches main() (measurement) or when the hello appears on the
console (least memory)."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
import select
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.apps import recipes
from ukltool.bench import bootbench
from ukltool.build import initramfs
from ukltool.linux import bzimage, kernel
from ukltool.plugin import insnclass
from ukltool.run import hosttsc, vm
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import GUEST_DIR, REPO, cache_dir
from ukltool.util.proc import cached_host_build, need_tool, run, stream

PEERS_FILE = REPO / "measure" / "boot-peers-built.toml"
AVOIDABLE = bootbench.PEER_AVOIDABLE   # a row's phase: what of its span to main() it avoids elsewhere
# The least memory's bisection starts lower for peers than for our images:
# a unikernel's hello runs in 2 MiB
PEER_MEMORY_FLOOR = 1
HELLO_SOURCE = GUEST_DIR / "peers" / "hello-init.c"
# The words our boots pass that concern the guest's own work (vm.qemu_command),
# so that the stock kernel is measured under the same command line
LINUX_APPEND = ["console=ttyS0", "loglevel=5", "printk.time=1", "panic=-1", "nokaslr", "tsc=reliable",
                "no_timer_check", "random.trust_cpu=on", "norandmaps", "rdinit=/init"]


@dataclass
class PeerSpec:
    """One entry of measure/boot-peers-built.toml."""
    name: str
    label: str
    what: str
    boot: str
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # role -> (shared file, sha256)
    defconfig_extra: list[str] = field(default_factory=list)


def names() -> list[str]:
    return list(_load())


def _load() -> dict[str, PeerSpec]:
    try:
        data = tomllib.loads(PEERS_FILE.read_text())
        out = {}
        for name, d in data.items():
            files = {role: (str(v["file"]), str(v["sha256"])) for role, v in d.items()
                     if isinstance(v, dict) and "file" in v}
            out[name] = PeerSpec(name, str(d["label"]), " ".join(str(d["what"]).split()), str(d["boot"]), files,
                                 [str(x) for x in d.get("defconfig_extra", [])])
        return out
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the peers in {PEERS_FILE}: {e}", "fix the file") from None


def check(chosen: list[str]) -> list[PeerSpec]:
    """The peers named, each known and with its pinned inputs at hand."""
    known = _load()
    bad = [n for n in chosen if n not in known]
    if bad:
        raise UklError(f"--peers: unknown peer(s): {', '.join(bad)}", f"choose from {', '.join(known)}")
    for n in chosen:
        for role in known[n].files:
            _shared(known[n], role)
    return [known[n] for n in chosen]


def _shared(spec: PeerSpec, role: str) -> Path:
    file, sha = spec.files[role]
    for p in recipes.shared_candidates(file):
        if p.is_file():
            sources.check_sha256(p, sha, str(PEERS_FILE.relative_to(REPO)),
                                 "the file is not the pinned input: fetch it again, or check the pin")
            return p
    raise UklError(f"the peer {spec.name}'s input {file} is missing (looked in "
                   f"{', '.join(str(p) for p in recipes.shared_candidates(file))})",
                   "put it in one of those places, or set UKL_SHARED_DIR to the directory that holds it")


# ---- what a peer is, once built ----

@dataclass
class PeerImage:
    kernel: Path            # what QEMU's -kernel loads
    symbols: Path           # an ELF with the same addresses and a symbol table
    initrd: Path | None
    machine: str
    append: list[str]
    hello: str              # the console line that says the application ran
    points: list[int]       # bootbench.POINTS up to main
    release: str
    loaded_bytes: int       # the kernel's loadable bytes (PT_LOAD file sizes)
    compression: str
    # A wait it avoids elsewhere, measured: the span between two addresses
    # (start, end), or a second boot with more kernel command-line words
    calibration: tuple[int, int] | None = None
    variant: list[str] = field(default_factory=list)
    avoidable: str = ""     # what that wait is, and where it is avoided


def _pristine_tree() -> Path:
    """The Linux tree at the series' base (the tag `pristine`), exported
    once into the cache: stock Linux, no UKL patch."""
    src, tree = sources.linux_tree()
    out = cache_dir() / "peers" / f"linux-{src.version}-pristine"
    with lock.held(kernel.TREE_LOCK, "the kernel tree"):
        if not (out / "Makefile").is_file():
            with ui.step(f"exporting stock Linux {src.version} (no UKL patch)"):
                _export_pristine(tree, out)
    return out


def _export_pristine(tree: Path, out: Path) -> None:
    """`git archive` of the tag `pristine` of TREE, unpacked into OUT."""
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    archive = subprocess.Popen(["git", "-C", str(tree), "archive", "--format=tar", "pristine"],
                               stdout=subprocess.PIPE)
    res = subprocess.run(["tar", "-x", "-C", str(tmp)], stdin=archive.stdout, capture_output=True)
    if archive.stdout:
        archive.stdout.close()
    if archive.wait() != 0 or res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise UklError(f"cannot export the tag 'pristine' of {tree}", "run `./ukl kernel tree` to remake it")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def _build_firecracker_linux(tree: Path, config: Path, key: str, out: Path) -> None:
    """Stock Linux from TREE with CONFIG (`make olddefconfig`: it was made
    with gcc 11), its vmlinux, System.map and bzImage into OUT."""
    bdir = cache_dir() / "peers" / "build-firecracker"
    bdir.mkdir(parents=True, exist_ok=True)
    if not (bdir / ".config-source").is_file() or (bdir / ".config-source").read_text() != key:
        shutil.copy(config, bdir / ".config")
        run(["make", "-s", "-C", tree, f"O={bdir}", "olddefconfig"], what="configuring Firecracker's Linux")
        (bdir / ".config-source").write_text(key)
    with ui.step("building Linux with Firecracker's guest configuration") as st:
        stream(["make", "-C", tree, f"O={bdir}", f"-j{os.cpu_count() or 2}", "bzImage"],
               bdir / "ukl-build.log", kernel.make_progress(st), what="Firecracker's Linux build",
               hint=f"see the log; the build directory is {bdir}")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for f in ("vmlinux", "System.map"):
        shutil.copy(bdir / f, tmp / f)
    shutil.copy(bdir / "arch" / "x86" / "boot" / "bzImage", tmp / "bzImage")
    (tmp / "release").write_text((bdir / "include" / "config" / "kernel.release").read_text())
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def firecracker_linux(spec: PeerSpec) -> PeerImage:
    config = _shared(spec, "config")
    tree = _pristine_tree()
    key = hashlib.sha256((sources.sha256_file(config) + tree.name).encode()).hexdigest()[:16]
    out = cache_dir() / "peers" / f"firecracker-linux-{key}"
    hello = cached_host_build(cache_dir() / "peers", "hello-init", "", [HELLO_SOURCE], ["-O2", "-static"],
                              "the peer's hello", "guest/peers/ belongs to the ukl checkout",
                              "install the host compiler and static glibc (`apt-get install gcc libc6-dev`)")
    initrd = out / f"{hello.name}.cpio"   # named after the hello's content
    with lock.held("peer-firecracker-linux", "the build of Firecracker's Linux"):
        if not (out / "vmlinux").is_file():
            _build_firecracker_linux(tree, config, key, out)
        if not initrd.is_file():
            initramfs.write(initramfs.Spec().dir("/dev").nod("/dev/console", "0600", "c", 5, 1)
                            .file("/init", hello), initrd)
    vmlinux = out / "vmlinux"
    elf = vmlinux.read_bytes()
    entry = bzimage.pvh_entry(elf)
    if entry is None:
        raise UklError("Firecracker's Linux has no PVH entry", "its configuration must keep CONFIG_PVH=y")
    main = bootbench.symbol_address(hello, "main")
    return PeerImage(vmlinux, vmlinux, initrd, "microvm", LINUX_APPEND, "Hello from /init",
                     [entry, entry, bootbench.elf_entry(vmlinux), main, main],
                     (out / "release").read_text().strip(), bzimage.loaded_bytes(elf, str(vmlinux)),
                     bzimage.compression((out / "bzImage").read_bytes(), str(out / "bzImage")),
                     variant=["cryptomgr.notests=1"],
                     avoidable="the crypto API's self-tests, which its configuration runs at boot (CRYPTO_MANAGER "
                     "without DISABLE_TESTS; our configurations disable them, as Debian's kernels do), measured "
                     "as a second boot with cryptomgr.notests=1")


def unikraft_hello(spec: PeerSpec) -> PeerImage:
    core_tar, app_tar = _shared(spec, "core"), _shared(spec, "app")
    key = hashlib.sha256("\0".join([sources.sha256_file(core_tar), sources.sha256_file(app_tar),
                                     *spec.defconfig_extra]).encode()).hexdigest()[:16]
    root = cache_dir() / "peers" / f"unikraft-{key}"
    build = root / "build"
    image = build / "helloworld_qemu-x86_64"
    with lock.held(f"peer-unikraft-{key}", "the build of Unikraft's helloworld"):
        if not image.is_file():
            _build_unikraft(spec, core_tar, app_tar, root)
    dbg = build / "helloworld_qemu-x86_64.dbg"
    entry = bootbench.symbol_address(dbg, "_multiboot_entry")
    main = bootbench.symbol_address(dbg, "main")
    return PeerImage(image, dbg, None, "pc", [], "Hello world!", [entry, entry, entry, main, main],
                     "Unikraft 0.17 (eaf6fda1), helloworld 1add85d", bzimage.loaded_bytes(image.read_bytes(),
                                                                                            str(image)),
                     "none", calibration=_call_span(dbg, "ukplat_time_init", "tscclock_init"),
                     avoidable="its TSC calibration, a 100 ms busy wait on the PIT that it skips where the "
                     "hypervisor gives the TSC's frequency (CPUID 0x40000010, under KVM)")


def _build_unikraft(spec: PeerSpec, core_tar: Path, app_tar: Path, root: Path) -> None:
    """Unpack Unikraft's core and helloworld into ROOT (afresh) and build
    the application for QEMU x86-64 from its defconfig and the spec's
    extra lines, with a fixed build date (the same image every time)."""
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    for tar in (core_tar, app_tar):
        run(["tar", "-xJf", tar, "-C", root], what=f"unpacking {tar.name}")
    core, app = next(root.glob("unikraft-*"), None), next(root.glob("app-helloworld-*"), None)
    if core is None or app is None:
        raise UklError(f"{core_tar.name} and {app_tar.name} did not unpack into unikraft-* and app-helloworld-*",
                       f"check the inputs pinned in {PEERS_FILE.name}")
    build = root / "build"
    defconfig = root / "qemu-x86_64.defconfig"
    defconfig.write_text((app / "defconfigs" / "qemu-x86_64").read_text() + "".join(
        f"{line}\n" for line in spec.defconfig_extra))
    args = ["make", "-C", str(core), f"A={app}", "L=", f"O={build}", f"C={build / '.config'}"]
    run([*args, f"UK_DEFCONFIG={defconfig}", "defconfig"], what="configuring Unikraft's helloworld")
    with ui.step("building Unikraft's helloworld") as st:
        stream([*args, f"-j{os.cpu_count() or 2}", "HOSTUTC=2024-01-01T00:00:00+00:00"], root / "build.log",
               kernel.make_progress(st), what="Unikraft's helloworld build", hint=f"see {root / 'build.log'}")


def _call_span(elf: Path, caller: str, callee: str) -> tuple[int, int] | None:
    """The address of CALLEE and the one after CALLER's call to it (where
    the call returns), from objdump; None where it is not found."""
    start = bootbench.symbol_address(elf, callee)
    text = run(["objdump", "-d", "--no-show-raw-insn", f"--disassemble={caller}", elf], what=f"objdump {elf.name}")
    lines = [ln for ln in text.splitlines() if re.match(r"^\s+[0-9a-f]+:", ln)]
    for here, after in zip(lines, lines[1:], strict=False):
        if re.search(rf"call\s+[0-9a-f]+ <{re.escape(callee)}>", here):
            return start, int(after.split(":")[0], 16)
    return None


BUILDERS: dict[str, Callable[[PeerSpec], PeerImage]] = {
    "firecracker-linux": firecracker_linux,
    "unikraft-hello": unikraft_hello,
}


# ---- running one ----

def qemu_command(img: PeerImage, memory: int, icount: bool, plugin: str | None) -> list[str]:
    append = list(img.append)
    if append and img.machine == "microvm" and not icount:
        # as `ukl run` does (vm.microvm_tcg_args): microvm's PIT calibration hangs on a busy host
        khz = hosttsc.host_tsc_khz()
        append += [f"tsc_early_khz={khz}"] if khz else []
    cmd = [need_tool("qemu-system-x86_64", "qemu-system-x86"), "-nodefaults", "-no-user-config", "-display", "none",
           "-no-reboot", "-M", img.machine, "-m", f"{memory}M", "-smp", "1", "-kernel", str(img.kernel),
           *(["-initrd", str(img.initrd)] if img.initrd else []),
           *(["-append", " ".join(append)] if append else []),
           "-serial", "stdio", "-device", vm.DEBUG_EXIT, "-accel", "tcg", "-cpu", "max"]
    if icount:
        cmd += ["-icount", "shift=0,sleep=off", "-seed", vm.ICOUNT_SEED, "-rtc", f"base={vm.ICOUNT_DATE},clock=vm"]
    if plugin:
        cmd += ["-plugin", plugin]
    return cmd


def boot(img: PeerImage, memory: int, icount: bool, log: Path, timeout: float,
         plugin: str | None = None) -> bool:
    """Boot IMG until QEMU ends (the plugin's stop=last, a power-off) or,
    without a plugin, until the hello is on the console; True if the hello
    appeared (or the plugin's run ended by itself)."""
    cmd = qemu_command(img, memory, icount, plugin)
    log.with_suffix(".cmd").write_text(" ".join(cmd) + "\n")
    seen = b""
    with open(log, "wb") as logf:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        assert proc.stdout is not None
        end = time.monotonic() + timeout
        try:
            while time.monotonic() < end:
                ready, _, _ = select.select([proc.stdout], [], [], 0.5)
                if not ready:
                    if proc.poll() is not None:
                        break
                    continue
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                logf.write(chunk)
                seen = (seen + chunk)[-65536:]
                if plugin is None and img.hello.encode() in seen:
                    return True
        finally:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    return plugin is not None and proc.returncode == 0


def measure(spec: PeerSpec, icount: bool, memory: int, mem_range: tuple[int, int] | None, steps: int,
            timeout: float) -> bootbench.Row:
    img = BUILDERS[spec.name](spec)
    # two benchmarks at once take turns on a peer's work directory
    with lock.held(f"bench-boot-peer-{spec.name}", f"the boot benchmark of the peer {spec.name}"):
        return _measure(spec, img, icount, memory, mem_range, steps, timeout)


def _measure(spec: PeerSpec, img: PeerImage, icount: bool, memory: int, mem_range: tuple[int, int] | None,
             steps: int, timeout: float) -> bootbench.Row:
    work = cache_dir() / "bench" / "boot" / f"peer-{spec.name}"
    work.mkdir(parents=True, exist_ok=True)
    report = work / "points.json"
    report.unlink(missing_ok=True)
    points = list(img.points)
    if img.calibration:
        points = [*points[:3], *img.calibration, *points[3:]]
    so = insnclass.build()
    option = bootbench.plugin_option(so, report, points, stop=True)
    with ui.step(f"booting the peer {spec.label}"):
        ok = boot(img, memory, icount, work / "boot.log", timeout, option)
    if not ok or not report.is_file():
        raise UklError(f"the peer {spec.name} did not reach main()", f"see {work / 'boot.log'}")
    hits = insnclass.read_report(report, points=True).points or []
    avoidable = None
    if img.calibration:
        cal_start, cal_end = hits[3], hits[4]
        hits = [*hits[:3], *hits[5:]]
        if cal_start is None or cal_end is None:
            raise UklError(f"the peer {spec.name} never ran the span of {img.avoidable}", f"see {work / 'boot.log'}")
        avoidable = cal_end.insns - cal_start.insns
    tl = bootbench.timeline(hits, None, None, icount, pid1=True)
    if img.variant:
        variant = dataclasses.replace(img, append=[*img.append, *img.variant], variant=[])
        report.unlink(missing_ok=True)
        with ui.step(f"booting the peer {spec.label} with {' '.join(img.variant)}"):
            ok = boot(variant, memory, icount, work / "variant.log", timeout,
                      bootbench.plugin_option(so, report, img.points, stop=True))
        if not ok or not report.is_file():
            raise UklError(f"the peer {spec.name} did not reach main() with {' '.join(img.variant)}",
                           f"see {work / 'variant.log'}")
        other = bootbench.timeline(insnclass.read_report(report, points=True).points or [], None, None, icount,
                                   pid1=True)
        avoidable = tl.instructions - other.instructions
    notes: list[str] = []
    if avoidable is not None:
        tl.phases[AVOIDABLE] = avoidable
        notes.append(f"{avoidable / 1e6:.2f} M of its instructions to main() are {img.avoidable}")
    notes += tl.notes
    text, data, bss = bootbench.elf_sizes(img.symbols)
    initrd_bytes = img.initrd.stat().st_size if img.initrd else 0
    least: int | None = None
    trials: list[tuple[int, bool]] = []
    if mem_range is not None:
        lo, hi = min(mem_range[0], PEER_MEMORY_FLOOR), mem_range[1]
        # A boot without enough memory often hangs before the console: it
        # is given ten times the measured boot's host time (at least 30 s)
        timeout = min(timeout, max(30.0, 10 * tl.wall_ms / 1000))
        with ui.step(f"bisecting the peer {spec.label}'s least memory ({lo}..{hi} MiB)") as st:
            def ok_at(mib: int) -> bool:
                st.update(f"{mib} MiB")
                with tempfile.TemporaryDirectory(prefix="ukl-peer-") as td:
                    return boot(img, mib, icount, Path(td) / "least.log", timeout)
            least, trials = bootbench.bisect_memory(ok_at, lo, hi, steps)
    return bootbench.Row(spec.label, spec.name, False, img.release, img.loaded_bytes + initrd_bytes,
                         img.loaded_bytes, initrd_bytes, text, data, bss, memory, tl.ns, tl.instructions, tl.wall_ms,
                         None, None, None, None, least, trials, [tl.instructions], tl.phases, tl.exact, notes,
                         spec.boot, img.compression, "O2", {}, tl.rep_executions, spec.what)
