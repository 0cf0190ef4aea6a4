"""`ukl bench boot`: what an application costs to start and to keep, per
application and configuration: the image's size, the guest time from the
kernel's first instruction to the application's main() (and, for a server,
to its first answer), and the least memory the image as shipped works in.

How boot time is measured (docs/results/results-boot.md says it for readers):
our QEMU plugin (tools/qemu-plugin/insnclass.c, at=...) records the guest
instructions executed before the first execution of a chain of addresses:
the kernel's real-mode setup entry (its first instruction: the firmware
before it does not count), the decompressor's and vmlinux's entries, the
instruction in init that reads the time stamp counter just before it
exec's the application (guest/init.c, ukl_stamp=1), and main() (ukl_main in
vmlinux under UKL; the static program's main under linux). Under
-icount shift=0,sleep=off the guest's clock (and its TSC) is one ns per
instruction plus the time QEMU skips while the CPU idles (HLT); the TSC
read at init's stamp gives that idle time exactly, and the plugin counts
idle instructions, so where none runs before the kernel's first
instruction nor between the stamp and main(), the boot time is exact to an
instruction. A server's first answer is timed by a prober in the guest
(ukl_probe=PORT:HEX) that reads the TSC when the answer arrives."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import struct
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import P_FLAGS, SH_FLAGS
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection
from rich.table import Table

from ukltool.apps import recipes, specialize, target
from ukltool.apps.target import AppTarget
from ukltool.bench import benchcommon
from ukltool.build import image, initramfs
from ukltool.linux import bzimage, kernel
from ukltool.plugin import insnclass, insnprofile
from ukltool.plugin.insnclass import Hit
from ukltool.run import ocipkg, vm
from ukltool.util import lock, reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir

PEERS_FILE = REPO / "measure" / "boot-peers.toml"
TARGETS_FILE = REPO / "measure" / "boot-targets.toml"
MEMORY_RANGE = (8, 1024)        # MiB: the bisection's bounds
MEMORY_STEPS = 6                # boots of the bisection after the upper bound's
MEASURE_MEMORY = 1024           # MiB: the boot measurement's -m (`ukl run`'s 1G)
PROBE_INTERVAL_NS = 1_000_000   # the prober's retry interval (guest/init.c)
STAMP_ENV, PROBE_ENV = "ukl_stamp", "ukl_probe"   # kernel command line words init reads
POINTS = ("setup", "decompressor", "kernel", "init", "main", "reply")
MB = 1_000_000


@dataclass(frozen=True)
class Boot:
    """How a VMM boots the image: QEMU's machine, the bzImage or the
    uncompressed kernel through its PVH entry (direct), and which of
    vm.BOOT_SAVINGS the command line carries (None: those `ukl run` passes)."""
    machine: str
    direct: bool
    savings: tuple[str, ...] | None
    what: str
    pid1: bool = False      # the kernel starts the application as PID 1 (no init program)
    initramfs: bool = True  # False: the VMM loads none (PID 1 only; the kernel makes the application's file)


# Each saving of docs/results/results-boot.md on its own, then together
BOOTS = {
    "pc-plain": Boot("pc", False, (), "-M pc, bzImage, no saving (the command line before them)"),
    "pc-no_timer_check": Boot("pc", False, ("no_timer_check",), "-M pc, bzImage, no_timer_check"),
    "pc-noapictimer": Boot("pc", False, ("noapictimer",), "-M pc, bzImage, noapictimer"),
    "pc-trust_cpu": Boot("pc", False, ("random.trust_cpu=on",), "-M pc, bzImage, random.trust_cpu=on"),
    "pc-pmtmr": Boot("pc", False, ("pmtmr=0",), "-M pc, bzImage, pmtmr=0"),
    "pc-noapictimer-pmtmr": Boot("pc", False, ("noapictimer", "pmtmr=0"), "-M pc, bzImage, noapictimer pmtmr=0"),
    "pc": Boot("pc", False, None, "-M pc, bzImage, the savings `ukl run` passes (no_timer_check noapictimer "
               "random.trust_cpu=on pmtmr=0)"),
    "pc-direct": Boot("pc", True, None, "-M pc, vmlinux through its PVH entry (no decompression), the savings"),
    "microvm-direct": Boot("microvm", True, None,
                           "-M microvm, vmlinux through its PVH entry: qboot, no PCI, no decompression"),
    "microvm-direct-pid1": Boot("microvm", True, None, "microvm-direct, and the kernel starts the application "
                                "as PID 1: no init program (UKL configurations; a server is timed to main(), "
                                "where the run ends)",
                                pid1=True),
    "microvm-direct-bare": Boot("microvm", True, None, "microvm-direct-pid1 with no initramfs: the VMM loads "
                                "the kernel alone and the kernel makes the application's file (ukl.init=); "
                                "applications built without --file or --overlay", pid1=True, initramfs=False),
}
DEFAULT_BOOTS = "pc"
PEER_AVOIDABLE = "of which avoidable"   # a peer row's phase: a wait it skips elsewhere (bench/peerbench.py)
# How peers (bench/peerbench.py) boot where none of BOOTS applies
PEER_BOOTS = {"pc-multiboot": "-M pc, the image's multiboot entry through SeaBIOS and QEMU's multiboot loader "
              "(a peer's: Unikraft's QEMU platform has no PVH entry)"}


def boots(text: str) -> list[str]:
    chosen = names(text, "--boots")
    unknown = [b for b in chosen if b not in BOOTS]
    if unknown:
        raise UklError(f"--boots: unknown boot method(s): {', '.join(unknown)}", f"choose from {', '.join(BOOTS)}")
    return chosen


# ---- what is benchmarked ----

def names(text: str, what: str) -> list[str]:
    """--apps/--configs a,b: each once, in order; none is an error."""
    out = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not out:
        raise UklError(f"{what} '{text}' names nothing", f"give a comma-separated list, e.g. {what} hello,redis")
    return out


def resolve_app(spec: str) -> AppTarget:
    """--apps NAME: as `ukl build` reads its INPUT (apps.target.resolve)."""
    return target.resolve(spec, "--apps")


def image_dir(label: str, config: str) -> Path:
    """Where the benchmark builds LABEL's image for CONFIG (in the cache)."""
    safe = re.sub(r"[^A-Za-z0-9._+-]", "_", label.strip("/"))
    return cache_dir() / "bench" / "boot" / f"{safe}-{config}"


def check_configs(configs: list[str]) -> list[str]:
    for c in configs:
        kernel.fragments(c)  # an unknown name is a UklError naming the known ones
    return configs


def build_image(t: AppTarget, config: str, out: Path, specialized: bool, compression: str | None = None,
                optimize: str | None = None, machine: str | None = None) -> image.Manifest:
    """T's image for CONFIG in OUT, its kernel compressed with COMPRESSION
    and compiled for OPTIMIZE (None: the configuration's); SPECIALIZED: for the kernel specialized
    from CONFIG to T (`ukl build --specialize`, its report kept in OUT), for MACHINE alone
    (`--machine`; None: any)."""
    t = dataclasses.replace(t, compression=compression, optimize=optimize)
    if not specialized:
        with ui.step(f"building {t.label} for '{config}'" + "".join(f", {v}" for v in (compression, optimize) if v)):
            return image.build(t.spec(config, out))
    specialize.build(t, config, out, specialize.Request(machine=machine))
    return image.load(out)


def server_probe(r: recipes.Recipe | None) -> tuple[int, bytes] | None:
    """A server's readiness probe (the recipe's [netbench] or [tests] port and
    probe): what it answers once it is up; None for programs that end."""
    if r is None:
        return None
    if r.netbench is not None:
        return r.netbench.port, r.netbench.probe.encode()
    if r.tests is not None:
        return r.tests.port, r.tests.probe.encode()
    return None


# ---- sizes ----

@dataclass
class Sizes:
    kernel_bytes: int
    initramfs_bytes: int
    text_bytes: int
    data_bytes: int
    bss_bytes: int

    @property
    def image_bytes(self) -> int:
        return self.kernel_bytes + self.initramfs_bytes


def elf_sizes(path: Path) -> tuple[int, int, int]:
    """text, data and bss of an ELF file as binutils' `size` counts them:
    allocated sections that are read-only, writable with contents, and
    without contents (NOBITS)."""
    text = data = bss = 0
    try:
        with path.open("rb") as f:
            for sec in ELFFile(f).iter_sections():
                flags = sec["sh_flags"]
                if not flags & SH_FLAGS.SHF_ALLOC:
                    continue
                if sec["sh_type"] == "SHT_NOBITS":
                    bss += sec["sh_size"]
                elif flags & SH_FLAGS.SHF_WRITE:
                    data += sec["sh_size"]
                else:
                    text += sec["sh_size"]
    except (OSError, ELFError) as e:
        raise UklError(f"cannot read sections of {path}: {e}", "rebuild the image") from None
    return text, data, bss


def image_sizes(outdir: Path, vmlinux: Path) -> Sizes:
    text, data, bss = elf_sizes(vmlinux)
    return Sizes((outdir / "bzImage").stat().st_size, (outdir / "initramfs.cpio").stat().st_size, text, data, bss)


# ---- where the plugin looks ----

def cpio_member(archive: bytes, name: str) -> bytes:
    """The content of NAME (an absolute path) in a newc cpio archive."""
    want, pos = name.lstrip("/"), 0
    while archive[pos:pos + 6] == initramfs.MAGIC:
        head = archive[pos:pos + 110]
        size, namesize = int(head[54:62], 16), int(head[94:102], 16)
        start = pos + 110
        member = archive[start:start + namesize - 1].decode(errors="replace")
        data_at = (start + namesize + 3) & ~3
        if member == initramfs.TRAILER:
            break
        if member.lstrip("/") == want:
            return archive[data_at:data_at + size]
        pos = (data_at + size + 3) & ~3
    raise UklError(f"the image's initramfs has no {name}", "rebuild the image with `ukl build`")


def symbol_address(elf_path: Path, name: str) -> int:
    try:
        with elf_path.open("rb") as f:
            tab = ELFFile(f).get_section_by_name(".symtab")
            if isinstance(tab, SymbolTableSection):
                for sym in tab.get_symbol_by_name(name) or []:
                    if sym["st_value"]:
                        return int(sym["st_value"])
    except (OSError, ELFError) as e:
        raise UklError(f"cannot read symbols from {elf_path}: {e}", "rebuild the image") from None
    raise UklError(f"{elf_path.name} has no symbol '{name}'",
                   "the boot benchmark finds main() by its symbol: build without stripping")


def elf_entry(path: Path) -> int:
    with path.open("rb") as f:
        return int(ELFFile(f).header["e_entry"])


def setup_entry(bzimage: bytes) -> tuple[int, int]:
    """Where QEMU's -kernel loader (x86_load_linux, QEMU 7.2) puts a bzImage:
    the linear address of the real-mode setup code's entry (the kernel's
    first instruction: segment real_addr/16 + 0x20, offset 0) and of the
    protected-mode code (the decompressor's startup_32)."""
    if len(bzimage) < 0x212 or bzimage[0x202:0x206] != b"HdrS":
        raise UklError("bzImage has no Linux boot protocol header", "rebuild the image")
    protocol_version = struct.unpack_from("<H", bzimage, 0x206)[0]
    loaded_high = bzimage[0x211] & 1
    if protocol_version < 0x200 or not loaded_high:
        return 0x90000 + 0x200, 0x10000
    if protocol_version < 0x202:
        return 0x90000 + 0x200, 0x100000
    return 0x10000 + 0x200, 0x100000


def boot_points(outdir: Path, man: image.Manifest, server: bool, direct: bool = False,
                pid1: bool = False) -> list[int]:
    """The addresses of POINTS (the last, reply, only for a server). Booted
    direct, the kernel's first instruction is its PVH entry, and there is no
    decompressor: the first two points are both the PVH entry."""
    if direct:
        setup = decompressor = bzimage.direct_kernel((outdir / "bzImage").read_bytes(), str(outdir / "bzImage"))[1]
    else:
        setup, decompressor = setup_entry((outdir / "bzImage").read_bytes())
    vmlinux = man.vmlinux_path()
    archive = (outdir / "initramfs.cpio").read_bytes()
    with tempfile.TemporaryDirectory(prefix="ukl-bootbench-") as td:
        init = Path(td) / "init"
        init.write_bytes(cpio_member(archive, "/init"))
        stamp, reply = symbol_address(init, "ukl_init_stamp"), symbol_address(init, "ukl_probe_stamp")
        if kernel.is_ukl(man.config):
            main = symbol_address(vmlinux, "ukl_main")
        else:
            prog = Path(td) / man.app
            prog.write_bytes(cpio_member(archive, f"/bin/{man.app}"))
            main = symbol_address(prog, "main")
    if pid1:
        stamp = main   # no init: its stamp is main() itself
    return [setup, decompressor, elf_entry(vmlinux), stamp, main, *([reply] if server else [])]


def plugin_option(so: Path, report: Path, points: list[int], by_function: bool = False, stop: bool = False) -> str:
    """BY_FUNCTION: the plugin also profiles the blocks executed between
    each point and the next (profile=points); STOP: it ends QEMU at the
    last point (a server as PID 1, which nothing else stops)."""
    return (insnclass.option(so, report) + ",at=" + ":".join(f"{a:x}" for a in points)
            + (",profile=points" if by_function else "") + (",stop=last" if stop else ""))


# ---- reading a run ----

def console_tsc(console: str, what: str) -> int | None:
    """init's "ukl-init: WHAT tsc N" line (the last one)."""
    found = [line.split()[-1] for line in console.splitlines() if line.strip().startswith(f"ukl-init: {what} tsc ")]
    return int(found[-1]) if found and found[-1].isdigit() else None


@dataclass
class Timeline:
    """One measured boot."""
    instructions: int                 # kernel's first instruction .. main()
    ns: int | None                    # the same span in guest time (under --icount)
    wall_ms: float                    # the same span on the host (TCG)
    clock_offset_ns: int | None       # TSC minus the plugin's instructions at init's stamp
    reply_instructions: int | None = None
    reply_ns: int | None = None
    reply_wall_ms: float | None = None
    phases: dict[str, int] = field(default_factory=dict)   # instructions from each point to the next
    rep_executions: int | None = None  # of the instructions to main(): REP string instructions' executions
    exact: bool = True
    notes: list[str] = field(default_factory=list)


def timeline(hits: list[Hit | None], stamp_tsc: int | None, reply_tsc: int | None, icount: bool,
             pid1: bool = False) -> Timeline:
    """Boot times from the plugin's points and init's TSC readings. Under
    -icount the guest clock (the TSC) is QEMU's exact instruction count plus
    the idle time, in ns since power-on: at init's stamp it is read
    directly, and from there to main() no idle instruction runs (checked),
    so boot to main() = TSC at the stamp - instructions before the kernel's
    first + instructions from the stamp to main(). (The plugin counts a
    block whole when it starts, so it overcounts blocks cut short by an
    exception: its instructions before the stamp exceed the TSC there by
    about 20,000 in 360 million when nothing idles; that bounds the error
    of the count before the kernel's first instruction.)"""
    missing = [POINTS[k] for k, h in enumerate(hits) if h is None]
    if missing:
        raise UklError(f"the boot never reached {', '.join(missing)} (the plugin saw no execution there)",
                       "see the console log; was the image built by this checkout (init's stamp)?")
    setup, stamp, main = hits[0], hits[3], hits[4]
    assert setup is not None and stamp is not None and main is not None
    phases = {f"{POINTS[k]}..{POINTS[k + 1]}": h2.insns - h1.insns
              for k, (h1, h2) in enumerate(zip(hits, hits[1:], strict=False)) if h1 and h2}
    t = Timeline(main.insns - setup.insns, None, (main.wall_ns - setup.wall_ns) / 1e6, None, phases=phases,
                 rep_executions=None if main.reps is None or setup.reps is None else main.reps - setup.reps)
    reply = hits[5] if len(hits) > 5 else None
    if reply is not None:
        t.reply_instructions = reply.insns - setup.insns
        t.reply_wall_ms = (reply.wall_ns - setup.wall_ns) / 1e6
    if not icount:
        t.notes.append("without --icount the guest's clock is the host's: no guest time")
        return t
    if pid1:
        # No init to read the clock: guest time is the instructions where
        # the CPU never idled between the origin and main()
        if main.halts != setup.halts:
            t.exact = False
            t.notes.append(f"the CPU idled {main.halts - setup.halts} times before main() (PID 1): no guest time")
        else:
            t.ns = t.instructions
        return t
    if stamp_tsc is None:
        raise UklError("init printed no time stamp (ukl-init: stamp tsc N)", "see the console log")
    if setup.halts:
        t.exact = False
        t.notes.append(f"the firmware idled {setup.halts} times before the kernel: its idle time is counted")
    if main.halts != stamp.halts:
        t.exact = False
        t.notes.append(f"the CPU idled {main.halts - stamp.halts} times between init's stamp and main(): "
                       "that idle time is missing")
    offset = stamp_tsc - stamp.insns
    t.ns, t.clock_offset_ns = main.insns - setup.insns + offset, offset
    if reply is not None and reply_tsc is not None:
        t.reply_ns = reply_tsc - setup.insns
    return t


# ---- the least memory ----

def bisect_memory(ok: Callable[[int], bool], lo: int, hi: int, steps: int) -> tuple[int | None, list[tuple[int, bool]]]:
    """The least MiB in (LO, HI] for which OK holds (assumed monotonic), by
    bisection in log space: OK(HI) first, then STEPS more boots at most,
    ending earlier once the bounds are 1 MiB apart. (None, trials) if OK(HI)
    fails. LO itself is taken to fail (never booted) unless a trial says so."""
    trials: list[tuple[int, bool]] = []
    good = hi
    passed = ok(hi)
    trials.append((hi, passed))
    if not passed:
        return None, trials
    bad = lo
    for _ in range(steps):
        if good - bad <= 1:
            break
        mid = min(good - 1, max(bad + 1, round(math.sqrt(bad * good))))
        passed = ok(mid)
        trials.append((mid, passed))
        if passed:
            good = mid
        else:
            bad = mid
    return good, trials


def parse_range(text: str) -> tuple[int, int]:
    """--memory-range LO:HI in MiB."""
    try:
        lo, hi = (int(x) for x in text.split(":"))
    except ValueError:
        raise UklError(f"--memory-range {text}: not LO:HI in MiB", "e.g. --memory-range 8:1024") from None
    if not 1 <= lo < hi:
        raise UklError(f"--memory-range {text}: needs 1 <= LO < HI", "e.g. --memory-range 8:1024")
    return lo, hi


# ---- runs ----

@dataclass
class Row:
    app: str
    config: str
    specialized: bool
    kernel_release: str
    image_bytes: int
    kernel_bytes: int
    initramfs_bytes: int
    text_bytes: int
    data_bytes: int
    bss_bytes: int
    memory_mib: int                      # -m of the boot measurement
    boot_to_main_ns: int | None
    boot_to_main_instructions: int
    boot_to_main_wall_ms: float          # wall, TCG
    clock_offset_ns: int | None          # TSC minus the plugin's instructions at init's stamp
    first_reply_ns: int | None
    first_reply_instructions: int | None
    first_reply_wall_ms: float | None    # wall, TCG
    min_memory_mib: int | None
    memory_trials: list[tuple[int, bool]]
    runs_instructions: list[int]         # boot_to_main_instructions of each --repeat run
    phases: dict[str, int]
    exact: bool
    notes: list[str]
    boot: str = "pc-plain"               # BOOTS (rows saved before there was a choice: pc-plain)
    compression: str = "gzip"            # the kernel's (rows saved before there was a choice: gzip)
    optimize: str = "O2"                 # the kernel's compiler optimization: O2 (the configurations') or Os
    # --by-function: per span from the kernel's entry on ("kernel..init", ...),
    # the functions with the most instructions, then "(other functions: N)"
    functions: dict[str, list[tuple[str, int]]] = field(default_factory=dict)
    # of boot_to_main_instructions, the executions of REP string instructions
    # (None: measured before the plugin counted them)
    boot_to_main_rep_executions: int | None = None
    about: str = ""                      # a peer's row (bench/peerbench.py): what it is
    # what a user ships: the image as `ukl pkg --oci` packs it (one gzip layer; None: rows saved before)
    oci_layer_bytes: int | None = None
    # where the least memory goes (memory_breakdown()), KiB by part; empty: not measured
    memory_kib: dict[str, int] = field(default_factory=dict)


@dataclass
class Report:
    icount: bool
    machine: str
    qemu: str
    memory_range: tuple[int, int]
    memory_steps: int
    rows: list[Row] = field(default_factory=list)
    peers: list[Row] = field(default_factory=list)   # peers built and measured here (--peers)


def run_timeout(t: AppTarget) -> float:
    """How long a boot of T's image may take to do its work: its recipe's
    smoke-test timeout, else two minutes."""
    return t.recipe.smoke.timeout if t.recipe is not None and t.recipe.smoke is not None else 120.0


def probe_words(t: AppTarget) -> list[str]:
    """The kernel command line's word that has init probe T's server
    (ukl_probe=PORT:HEX); none for a program that ends."""
    probe = server_probe(t.recipe)
    return [] if probe is None else [f"{PROBE_ENV}={probe[0]}:{probe[1].hex()}"]


def boot_once(outdir: Path, man: image.Manifest, icount: bool, memory: int, timeout: float,
              append: list[str], sh: str | None, plugins: list[str], log: Path, how: Boot,
              verbose: bool = False) -> vm.RunResult:
    with tempfile.TemporaryDirectory(prefix="ukl-bootbench-") as td:
        extra = initramfs.args_archive(man.args if sh is None else [], Path(td), sh)
        initrds = image.boot_initrds(outdir, man, [extra], sh is not None)
        return vm.boot(vm.RunSpec(bzimage=outdir / "bzImage", initrds=initrds, log=log,
                                  timeout=timeout, icount=icount, smp=1, memory=f"{memory}M", append=append,
                                  show=False, accel="tcg", plugins=plugins, machine=how.machine,
                                  direct=how.direct, savings=how.savings,
                                  pid1=f"/ukl/{man.app}" if how.pid1 else None,
                                  pid1_args=list(man.args if sh is None else []), initramfs=how.initramfs,
                                  verbose=verbose, config=man.config))


# The kernel's boot line (mm/page_alloc.c, mem_init_print_info()), with -v
MEMORY_LINE = re.compile(r"Memory: (\d+)K/(\d+)K available \((\d+)K kernel code, (\d+)K rwdata, (\d+)K rodata, "
                         r"(\d+)K init, (\d+)K bss, (\d+)K reserved, (\d+)K cma-reserved\)")
# SPARSEMEM keeps the struct pages of each 128 MiB section that has memory,
# however much of it is present, in one 2 MiB block (64-byte struct pages
# for 32,768 pages); with SPARSEMEM_VMEMMAP the block is mapped, without it
# (our configurations) it is one 2 MiB-aligned allocation
MEMMAP_SECTION_KIB, MEMMAP_BLOCK_KIB = 128 * 1024, 2048
MEMORY_PARTS = ("firmware, holes", "kernel code", "rodata", "rwdata", "bss", "struct pages", "other reserved",
                "slab", "page tables", "kernel stacks", "root fs files", "page cache", "app anonymous", "other",
                "free")
FREED_PAD = re.compile(r"Freeing unused kernel image \(UKL bss padding\) memory: (\d+)K")


def oci_layer_bytes(outdir: Path) -> int | None:
    """The bytes of the layer `ukl pkg --oci` ships for OUTDIR (for urunc's
    firecracker monitor where the kernel is for -M microvm alone, which its
    qemu monitor cannot boot); None for an image ukl pkg refuses
    (arguments urunc cannot pass)."""
    try:
        hypervisor = "firecracker" if image.machine_of(image.load(outdir)) == "microvm" else "qemu"
        return len(ocipkg.build(outdir, hypervisor=hypervisor, warn=False).layer.data)
    except UklError:
        return None


def memory_breakdown(console: str, memory_mib: int) -> dict[str, int]:
    """Where a boot's memory (-m MEMORY_MIB) went, in KiB, parts that add
    up to it exactly: what the firmware keeps (-m less the kernel's present
    pages); what stays reserved (present pages less MemTotal at the
    application's height): the kernel image as the kernel's "Memory:" boot
    line counts it (less the UKL bss padding it frees), struct pages, and
    the rest of memblock's reservations; and MemTotal, from init's
    /proc/meminfo (ukl_meminfo=1), by use. What the kernel frees after
    boot (its init sections, the gaps between its sections, the initramfs
    archive) is in MemTotal by then. Also "app peak RSS" where init saw
    the application end (outside the sum). {} where either is missing."""
    m = MEMORY_LINE.search(console)
    info = {}
    for line in console.splitlines():
        found = re.match(r"\s*ukl-init: meminfo (\w+):\s+(\d+) kB", line)
        if found:
            info[found.group(1)] = int(found.group(2))
    if m is None or "MemTotal" not in info:
        return {}
    _avail, present, code, rwdata, rodata, _init, bss, _reserved, _cma = (int(g) for g in m.groups())
    pad = sum(int(x) for x in FREED_PAD.findall(console))
    total = info["MemTotal"]
    struct_pages = -(-present // MEMMAP_SECTION_KIB) * MEMMAP_BLOCK_KIB
    kept = present - total
    bss_kept = max(0, bss - pad)
    # ramfs (a kernel without TMPFS) keeps its files as unevictable page
    # cache, tmpfs as Shmem
    rootfs = info.get("Shmem", 0) or info.get("Unevictable", 0)
    cache = max(0, info.get("Cached", 0) + info.get("Buffers", 0) - rootfs)
    parts = {"firmware, holes": memory_mib * 1024 - present, "kernel code": code, "rodata": rodata,
             "rwdata": rwdata, "bss": bss_kept, "struct pages": struct_pages,
             "other reserved": kept - (code + rodata + rwdata + bss_kept + struct_pages),
             "slab": info.get("Slab", 0), "page tables": info.get("PageTables", 0),
             "kernel stacks": info.get("KernelStack", 0), "root fs files": rootfs, "page cache": cache,
             "app anonymous": info.get("AnonPages", 0), "free": info.get("MemFree", 0)}
    parts["other"] = total - sum(parts[k] for k in ("slab", "page tables", "kernel stacks", "root fs files",
                                                    "page cache", "app anonymous", "free"))
    out = {k: parts[k] for k in MEMORY_PARTS}
    if "AppPeakRSS" in info:
        out["app peak RSS"] = info["AppPeakRSS"]
    return out


def memory_boot(outdir: Path, man: image.Manifest, t: AppTarget, icount: bool, memory: int,
                how: Boot) -> dict[str, int]:
    """One boot at the least memory, verbose, with init's meminfo: memory_breakdown()."""
    log = outdir / f"memory-{memory}M.log"
    boot_once(outdir, man, icount, memory, run_timeout(t), ["ukl_meminfo=1", *probe_words(t)], None, [], log, how,
              verbose=True)
    return memory_breakdown(log.read_text(errors="replace"), memory)


def runs_in(outdir: Path, man: image.Manifest, t: AppTarget, icount: bool, memory: int, how: Boot,
            timeout: float | None = None) -> bool:
    """Does the image, as shipped (no test layer), do its work in -m
    MEMORY within TIMEOUT (default the smoke test's)? A server answers its
    readiness probe (init's prober), a program ends with status 0 (its
    default arguments)."""
    log = outdir / f"least-{memory}M.log"
    probe = probe_words(t)
    res = boot_once(outdir, man, icount, memory, timeout or run_timeout(t), probe, None, [], log, how)
    if res.failures or res.timed_out:
        return False
    if probe:
        return console_tsc(log.read_text(errors="replace"), "reply") is not None
    return res.code == 0


def points_boot(outdir: Path, man: image.Manifest, t: AppTarget, icount: bool, memory: int, timeout: float,
                how: Boot, log: Path, by_function: bool = False) -> tuple[insnclass.PluginReport, int]:
    """One boot with the plugin's points (BY_FUNCTION: and its profile by
    span): to main(), and for a server to the first answer to its probe
    (the prober then stops it). The plugin's report, and how many points
    it watched."""
    probe = server_probe(t.recipe)
    # As PID 1 there is no init to probe a server: its boot is timed to
    # main(), where the plugin ends the run
    stop = how.pid1 and probe is not None
    if how.pid1:
        probe = None
    points = boot_points(outdir, man, probe is not None, how.direct, how.pid1)
    report = outdir / ("bootbench-profile.json" if by_function else "bootbench-points.json")
    report.unlink(missing_ok=True)
    append = [] if how.pid1 else [f"{STAMP_ENV}=1", *probe_words(t)]
    res = boot_once(outdir, man, icount, memory, timeout, append, None,
                    [plugin_option(insnclass.build(), report, points, by_function, stop)], log, how)
    if res.failures or res.timed_out or not report.is_file():
        raise UklError(f"{t.label} under '{man.config}' did not boot to the end"
                       + (" while profiled" if by_function else "") + f" (status {res.code})", f"see {log}")
    return insnclass.read_report(report, profile=by_function, points=True), len(points)


def measure(outdir: Path, man: image.Manifest, t: AppTarget, icount: bool, memory: int,
            timeout: float, run: int, how: Boot) -> Timeline:
    """One boot timed to main() (and a server's first answer)."""
    log = outdir / f"boot-{run}.log"
    read, _ = points_boot(outdir, man, t, icount, memory, timeout, how, log)
    console = log.read_text(errors="replace")
    tl = timeline(read.points or [], console_tsc(console, "stamp"), console_tsc(console, "reply"), icount, how.pid1)
    if server_probe(t.recipe) is not None and not how.pid1 and tl.reply_instructions is None:
        raise UklError(f"{t.label} under '{man.config}': no answer to its readiness probe", f"see {log}")
    return tl


# Spans profiled by function (`--by-function`): from vmlinux's entry on.
# Before it the setup code and the decompressor run at addresses the
# kernel's symbol table does not name.
PROFILED_FROM = POINTS.index("kernel")
PROFILE_KEEP = 25                # functions listed per span, the rest summed


def span_functions(entries: list[insnclass.ProfileEntry], name: Callable[[int], str], npoints: int,
                   keep: int = PROFILE_KEEP) -> dict[str, list[tuple[str, int]]]:
    """The plugin's profile=points entries (region k: the blocks that began
    after point k-1 and before point k) as, per span from the kernel's
    entry on, the exact count of every function among any span's KEEP
    with the most instructions, then the rest together. Addresses in the
    lower half are user space's (init, or the application under
    `linux`)."""
    spans = {f"{POINTS[k - 1]}..{POINTS[k]}": {fn: int(n) for fn, n in
                                               insnprofile.per_function(entries, k, 1, name).items()}
             for k in range(PROFILED_FROM + 1, npoints)}
    spans = {span: per for span, per in spans.items() if per}
    shown = {fn for per in spans.values() for fn in list(per)[:keep]}   # per_function ranks them
    out: dict[str, list[tuple[str, int]]] = {}
    for span, per in spans.items():
        listed = [(fn, n) for fn, n in per.items() if fn in shown]
        rest = [n for fn, n in per.items() if fn not in shown]
        out[span] = listed + ([(f"(other functions: {len(rest)})", sum(rest))] if rest else [])
    return out


def physical_names(vmlinux: Path, name: Callable[[int], str]) -> Callable[[int], str]:
    """NAME, also for the kernel's code run at its physical addresses
    (startup_64 before it switches to the kernel mapping): vmlinux's
    segments give each its physical and virtual address."""
    spans: list[tuple[int, int, int]] = []
    try:
        with vmlinux.open("rb") as f:
            for seg in ELFFile(f).iter_segments():
                # the kernel's code only (a linux application's text never
                # reaches the kernel's 16 MiB; init is at 256 MiB)
                if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] >= insnprofile.KERNEL_HALF \
                        and seg["p_flags"] & P_FLAGS.PF_X:
                    spans.append((seg["p_paddr"], seg["p_paddr"] + seg["p_memsz"], seg["p_vaddr"] - seg["p_paddr"]))
    except (OSError, ELFError) as e:
        raise UklError(f"cannot read {vmlinux}'s program headers: {e}", "rebuild the kernel") from None

    def named(addr: int) -> str:
        for lo, hi, delta in spans:
            if lo <= addr < hi:
                return name(addr + delta)
        return name(addr)
    return named


def profile_boot(outdir: Path, man: image.Manifest, t: AppTarget, icount: bool, memory: int, timeout: float,
                 how: Boot) -> dict[str, list[tuple[str, int]]]:
    """One more boot, with the plugin profiling each span by function (a
    separate boot: the profile's callbacks slow the host, not the guest)."""
    log = outdir / "boot-profile.log"
    read, npoints = points_boot(outdir, man, t, icount, memory, timeout, how, log, by_function=True)
    vmlinux = man.vmlinux_path()
    spans = span_functions(read.profile or [], physical_names(vmlinux, insnprofile.load_symbols(vmlinux).name),
                           npoints)
    check_profile(spans, read.points or [], str(log))
    return spans


def check_profile(spans: dict[str, list[tuple[str, int]]], hits: list[Hit | None], where: str) -> None:
    """Each span's functions add up to its instructions between the points
    (the blocks holding the points aside); a profile without them is
    an error, not an empty table."""
    for k in range(PROFILED_FROM + 1, len(hits)):
        a, b = hits[k - 1], hits[k]
        span = f"{POINTS[k - 1]}..{POINTS[k]}"
        if a is None or b is None:
            raise UklError(f"the profiled boot never reached {POINTS[k]}", f"see {where}")
        counted = sum(n for _, n in spans.get(span, []))
        if abs(counted - (b.insns - a.insns)) > 10_000:
            raise UklError(f"the profile of {span} counts {counted:,} instructions, the points "
                           f"{b.insns - a.insns:,}", "rebuild the QEMU plugin (tools/qemu-plugin/insnclass.c)")


def measure_app(t: AppTarget, config: str, icount: bool, repeat: int, memory: int, mem_range: tuple[int, int] | None,
                steps: int, timeout: float, boot: str = DEFAULT_BOOTS, specialized: bool = False,
                compression: str | None = None, optimize: str | None = None,
                built: dict[Path, image.Manifest] | None = None, by_function: bool = False) -> Row:
    """MEM_RANGE None: no least-memory bisection; COMPRESSION and OPTIMIZE:
    the kernel's (None: the configuration's); BUILT: the images this run
    has built, by directory, each built once for all its boot methods;
    BY_FUNCTION: one more boot, profiled by function."""
    how = BOOTS[boot]
    # A microvm boot measures the kernel specialized for microvm alone, as
    # a user who deploys there builds it (`ukl build --specialize --machine microvm`)
    machine = "microvm" if specialized and how.machine == "microvm" else None
    variant = "".join(f"-{v}" for v in (machine, optimize, compression) if v)
    out = image_dir(t.label, config + ("-specialized" if specialized else "") + variant)
    # Two benchmarks at once (a test beside `make results-boot`) take turns
    # on the image directory instead of rebuilding it under each other.
    with lock.held(f"bench-boot-{out.name}", f"the boot benchmark's image {out.name}"):
        man = built[out] if built is not None and out in built else \
            build_image(t, config, out, specialized, compression, optimize, machine)
        if built is not None:
            built[out] = man
        config = man.config
        compressed = bzimage.compression((out / "bzImage").read_bytes(), str(out / "bzImage"))
        sizes = image_sizes(out, man.vmlinux_path())
        oci_layer = oci_layer_bytes(out)
        if how.direct:
            # What the VMM loads: the uncompressed kernel's segments, and the initramfs
            elf = bzimage.direct_kernel((out / "bzImage").read_bytes(), str(out / "bzImage"))[0]
            sizes.kernel_bytes = bzimage.loaded_bytes(elf, f"{out / 'bzImage'}'s kernel")
        if not how.initramfs:
            if man.user_files or man.userspace:
                raise UklError(f"{boot}: {t.label} carries files only an initramfs holds",
                               "measure it with another boot method")
            sizes.initramfs_bytes = 0
        runs = []
        for i in range(repeat):
            with ui.step(f"booting {t.label} under '{config}', {boot} (run {i + 1} of {repeat})"):
                runs.append(measure(out, man, t, icount, memory, timeout, i, how))
        # --repeat's one meaning: the median run (by instructions, then time)
        first = sorted(runs, key=lambda r: (r.instructions, r.ns or 0))[(len(runs) - 1) // 2]
        functions: dict[str, list[tuple[str, int]]] = {}
        if by_function:
            with ui.step(f"profiling {t.label}'s boot under '{config}', {boot}, by function"):
                functions = profile_boot(out, man, t, icount, memory, timeout, how)
        least: int | None = None
        trials: list[tuple[int, bool]] = []
        memory_kib: dict[str, int] = {}
        notes = list(first.notes)
        if mem_range is not None and how.pid1 and server_probe(t.recipe) is not None:
            notes.append("least memory not measured: as PID 1 a server has no init to probe it (see its init row)")
        elif mem_range is not None:
            lo, hi = mem_range
            # A boot without enough memory can hang before the console
            # (the decompressor, early memblock): each is given 20 times
            # the measured boot's host time, at least a minute
            bisect_timeout = max(60.0, 20 * (first.reply_wall_ms or first.wall_ms) / 1000)
            with ui.step(f"bisecting {t.label}'s least memory under '{config}', {boot} ({lo}..{hi} MiB)") as st:
                def ok(mib: int) -> bool:
                    st.update(f"{mib} MiB")
                    return runs_in(out, man, t, icount, mib, how, bisect_timeout)
                least, trials = bisect_memory(ok, lo, hi, steps)
            if least is not None and not how.pid1:
                with ui.step(f"where {t.label}'s {least} MiB go under '{config}', {boot}"):
                    memory_kib = memory_boot(out, man, t, icount, least, how)
    if len({r.instructions for r in runs}) > 1:
        notes.append("the runs' instruction counts differ")
    return Row(t.label, config, specialized, man.kernel_release, sizes.image_bytes, sizes.kernel_bytes,
               sizes.initramfs_bytes, sizes.text_bytes, sizes.data_bytes, sizes.bss_bytes, memory, first.ns,
               first.instructions, first.wall_ms, first.clock_offset_ns, first.reply_ns, first.reply_instructions,
               first.reply_wall_ms, least, trials, [r.instructions for r in runs], first.phases, first.exact, notes,
               boot, compressed, "Os" if optimize == "size" else "O2", functions, first.rep_executions,
               oci_layer_bytes=oci_layer, memory_kib=memory_kib)


def run(apps: list[str], configs: list[str], icount: bool, repeat: int, mem_range: tuple[int, int], steps: int,
        timeout: float, memory: int = MEASURE_MEMORY, save: Callable[[Report], None] | None = None,
        boot_names: list[str] | None = None, bisect: bool = True, specialized: bool = False,
        compressions: list[str] | None = None, optimize: str | None = None, by_function: bool = False) -> Report:
    """Every application under every configuration, kernel compression
    (COMPRESSIONS, default the configuration's) and boot method (BOOT_NAMES,
    default DEFAULT_BOOTS); BISECT: find the least memory; SPECIALIZED:
    after each, a row for the kernel specialized from that configuration to
    the application; BY_FUNCTION: each row's boot profiled by function."""
    targets = [resolve_app(a) for a in apps]     # every name checked before any work
    check_configs(configs)
    for c in compressions or []:
        kernel.compression_fragment(c)
    if optimize is not None:
        kernel.optimize_fragment(optimize)
    methods = boot_names or [DEFAULT_BOOTS]
    if not mem_range[0] < memory:
        raise UklError(f"--memory {memory} is not above the bisection's lower bound {mem_range[0]}",
                       "raise --memory or lower --memory-range")
    report = Report(icount, benchcommon.machine(), vm.qemu_version("qemu-system-x86_64"), mem_range, steps)
    comps: list[str | None] = [*compressions] if compressions else [None]
    built: dict[Path, image.Manifest] = {}
    for t in targets:
        for config in configs:
            for special, comp, boot in itertools.product((False, True) if specialized else (False,),
                                                         comps, methods):
                if BOOTS[boot].pid1 and not kernel.is_ukl(config):
                    ui.info(f"{boot} skipped for {t.label} under '{config}': PID 1 needs a UKL configuration")
                    continue
                if not BOOTS[boot].initramfs and t.recipe is not None and t.recipe.needs_initramfs:
                    ui.info(f"{boot} skipped for {t.label}: it reads files only an initramfs holds")
                    continue
                if BOOTS[boot].direct and comp not in (None, "lz4", "gzip"):
                    ui.info(f"{boot} skipped for the {comp} kernel: direct boot reads LZ4 or gzip kernels")
                    continue
                report.rows.append(measure_app(t, config, icount, repeat, memory,
                                               mem_range if bisect else None, steps, timeout, boot, special,
                                               comp, optimize, built, by_function))
                if save:
                    save(report)
    return report


# ---- reports ----

def save_json(report: Report, path: Path) -> None:
    reporting.save_json(report, path)


def load_json(path: Path) -> Report:
    def decode(data: dict) -> Report:
        def row(r: dict) -> Row:
            return Row(**{**r, "memory_trials": [(int(m), bool(o)) for m, o in r["memory_trials"]],
                          "functions": {span: [(str(fn), int(n)) for fn, n in fns]
                                        for span, fns in r.get("functions", {}).items()}})
        rows = [row(r) for r in data.pop("rows")]
        peers = [row(r) for r in data.pop("peers", [])]
        data["memory_range"] = tuple(data["memory_range"])
        return Report(**data, rows=rows, peers=peers)

    return reporting.load_json(path, decode, "boot benchmark results", "give a file written by `ukl bench boot --json`")


def merge(reports: list[Report]) -> Report:
    """The rows of REPORTS in turn, under the first one's settings."""
    first = reports[0]
    return Report(first.icount, first.machine, first.qemu, first.memory_range, first.memory_steps,
                  [r for rep in reports for r in rep.rows], [p for rep in reports for p in rep.peers])


@dataclass
class Peer:
    name: str
    source: str
    image_mb: dict[str, float]
    boot: str
    min_memory_mb: dict[str, float]
    boot_ms: float | None = None


def load_peers(path: Path = PEERS_FILE) -> list[Peer]:
    try:
        return [Peer(**s) for s in tomllib.loads(path.read_text())["system"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the peers' figures in {path}: {e}", "fix the file") from None


@dataclass
class Goal:
    """One application's targets (measure/boot-targets.toml); None: none set."""
    app: str
    why: str
    image_mb: float | None = None
    boot_to_main_ms: float | None = None
    first_reply_ms: float | None = None
    min_memory_mib: float | None = None


def load_targets(path: Path = TARGETS_FILE) -> list[Goal]:
    try:
        goals = [Goal(**t) for t in tomllib.loads(path.read_text())["target"]]
    except (OSError, tomllib.TOMLDecodeError, KeyError, TypeError) as e:
        raise UklError(f"cannot read the targets in {path}: {e}", "fix the file") from None
    for g in goals:
        for key in ("image_mb", "boot_to_main_ms", "first_reply_ms", "min_memory_mib"):
            v = getattr(g, key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int | float) or v <= 0):
                raise UklError(f"{path}: {g.app}'s {key} is {v!r}, not a number above 0", "fix the file")
    return goals


def target_rows(report: Report, goals: list[Goal]) -> list[str]:
    """Each target against each specialized row of its application: the
    figure, the target, met or missed."""
    out = ["| app | kernel | boot | figure | measured | target | |", "|---|---|---|---|---|---|---|"]
    origin: dict[int, str] = {}   # a specialized row's origin: the general row before it
    last = "-"
    several = len({r.memory_mib for r in report.rows}) > 1   # say each row's -m where they differ
    for i, r in enumerate(report.rows):
        if not r.specialized:
            last = r.config
        origin[i] = last
    for g in goals:
        for i, r in ((i, r) for i, r in enumerate(report.rows) if r.specialized and r.app == g.app):
            figures = (("image MB", r.image_bytes / MB, g.image_mb),
                       ("boot to main() ms", None if r.boot_to_main_ns is None else r.boot_to_main_ns / 1e6,
                        g.boot_to_main_ms),
                       ("first reply ms", None if r.first_reply_ns is None else r.first_reply_ns / 1e6,
                        g.first_reply_ms),
                       ("least memory MiB", r.min_memory_mib, g.min_memory_mib))
            for what, got, want in figures:
                if want is None or got is None:
                    continue
                boot = f"{r.boot}, -m {r.memory_mib}" if several else r.boot
                out.append(f"| {g.app} | {r.config} (from {origin[i]}) | {boot} | {what} | {got:.2f} | {want:g} | "
                           f"{'met' if got <= want else f'missed ({got / want:.1f}x)'} |")
    return out


def mb(n: int | None) -> str:
    return "-" if n is None else f"{n / MB:.2f}"


def ms(ns: int | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.1f}"


def millions(n: int | None) -> str:
    return "-" if n is None else f"{n / 1e6:.1f} M"


HEADINGS = ["app", "config", "boot", "kernel compression", "image MB (kernel + initramfs)",
            "shipped MB (OCI layer, gzip)", "vmlinux text / data / bss MB",
            "boot to main() ms (guest)", "instructions", "wall, TCG s", "first reply ms (guest)",
            "first reply wall, TCG s", "min memory MiB"]


def kernel_cell(r: Row) -> str:
    """The kernel's compression, and -Os where it was compiled for size."""
    return r.compression + ("" if r.optimize == "O2" else f" -{r.optimize}")


def cells(r: Row, several_memories: bool = False) -> list[str]:
    """A row of the main table; SEVERAL_MEMORIES: the report's rows boot
    with different -m, said in the boot column."""
    memory = "-" if r.min_memory_mib is None else str(r.min_memory_mib)
    fails = [m for m, ok in r.memory_trials if not ok]
    if r.min_memory_mib is not None:
        memory += f" (fails at {max(fails)})" if fails else " (not bounded below)"
    return [r.app, r.config, f"{r.boot}, -m {r.memory_mib}" if several_memories else r.boot, kernel_cell(r),
            f"{mb(r.image_bytes)} ({mb(r.kernel_bytes)} + {mb(r.initramfs_bytes)})", mb(r.oci_layer_bytes),
            f"{mb(r.text_bytes)} / {mb(r.data_bytes)} / {mb(r.bss_bytes)}",
            ms(r.boot_to_main_ns) + ("" if r.exact else " *"), millions(r.boot_to_main_instructions),
            f"{r.boot_to_main_wall_ms / 1e3:.2f}", ms(r.first_reply_ns),
            "-" if r.first_reply_wall_ms is None else f"{r.first_reply_wall_ms / 1e3:.2f}", memory]


def table(report: Report) -> Table:
    t = Table(*HEADINGS, title="boot: image size, time to main() (and a server's first answer), least memory")
    for r in [*report.rows, *report.peers]:
        t.add_row(*cells(r))
    return t


def memory_section(report: Report) -> list[str]:
    """Where each row's least memory goes (Row.memory_kib), in MiB."""
    rows = [r for r in report.rows if r.memory_kib]
    if not rows:
        return []
    out = ["", "## Where the least memory goes", "",
           "One more boot at each image's least memory, with the kernel's messages (`-v`) and init's "
           "`/proc/meminfo` (`ukl_meminfo=1`): after a server's first answer, else when the program has ended. "
           "In MiB, parts that add up to the `-m` given: what the firmware keeps (and the holes it leaves); what "
           "stays reserved, the present memory less MemTotal: the kernel image as the kernel's `Memory:` line "
           "counts it (code, rodata, rwdata, bss less the UKL padding it frees), struct pages (SPARSEMEM's "
           "2 MiB block for each 128 MiB section, however much of it is present), and the rest of memblock's "
           "reservations (early page tables, "
           "the first per-CPU chunk, ...); then MemTotal by use: slab, page tables, kernel stacks, the root file "
           "system's files (the unpacked initramfs, /tmp), the page cache, the application's anonymous memory "
           "(a server's, while it runs; a program's is gone when it has ended), what the kernel allocated "
           "otherwise, and what is free. What the kernel frees after boot (its init sections, the gaps between "
           "its sections, the initramfs archive) is in MemTotal by then. The application's peak resident set "
           "(`wait4()`'s ru_maxrss, for a program) is beside them.", "",
           "| app | config | boot | -m MiB | " + " | ".join(MEMORY_PARTS) + " | app peak RSS |",
           "|---|---|---|---|" + "---:|" * (len(MEMORY_PARTS) + 1)]
    for r in rows:
        peak = r.memory_kib.get("app peak RSS")
        out.append(f"| {r.app} | {r.config} | {r.boot} | {r.min_memory_mib} | "
                   + " | ".join(f"{r.memory_kib.get(p, 0) / 1024:.1f}" for p in MEMORY_PARTS)
                   + f" | {'-' if peak is None else f'{peak / 1024:.1f}'} |")
    return out


def is_hello(r: Row) -> bool:
    return Path(r.app).name in ("hello", "hello.c")


def ratio(ours: float | None, theirs: float | None) -> str:
    return "-" if ours is None or not theirs else f"{ours / theirs:.2f}x"


def peer_section(report: Report) -> list[str]:
    """The peers measured in this run: what each is, its row, and our
    hello rows against each as ratios (ours / the peer's)."""
    if not report.peers:
        return []
    out = ["", "## Peers measured here", "",
           "Built in this run from pinned inputs (`ukl bench boot --peers`, measure/boot-peers-built.toml, "
           "shared/peers/) and measured with the same harness: the same QEMU, `-icount`, plugin points "
           "and bisection. Their first point is their own first instruction (a PVH or multiboot entry), "
           "their last their hello's `main()`; the least memory is the least `-m` at which the hello line "
           "appears on the console.", ""]
    out += [f"* **{p.app}** (`{p.config}`): {p.about}." + "".join(f" {n[:1].upper()}{n[1:]}." for n in p.notes)
            for p in report.peers]
    out += ["", "| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    out += ["| " + " | ".join(cells(p)) + " |" for p in report.peers]
    ours = [r for r in report.rows if is_hello(r)]
    if ours:
        out += ["", "Our hello against each peer (ours divided by the peer's; below 1: ours is smaller or "
                "sooner). Guest instructions, not cycles: see \"How it is measured\".", "",
                "| hello | config | boot | peer | image bytes | instructions to main() | the same, against the "
                "peer without its avoidable wait (see its notes) | least memory |",
                "|---|---|---|---|---|---|---|---|"]
        for r in ours:
            for p in report.peers:
                cal = p.phases.get(PEER_AVOIDABLE)
                out.append(f"| {r.app} | {r.config} | {r.boot} | {p.app} | {ratio(r.image_bytes, p.image_bytes)} | "
                           f"{ratio(r.boot_to_main_instructions, p.boot_to_main_instructions)} | "
                           + ("-" if cal is None else ratio(r.boot_to_main_instructions,
                                                            p.boot_to_main_instructions - cal))
                           + f" | {ratio(r.min_memory_mib, p.min_memory_mib)} |")
    return out


def peer_rows(peers: list[Peer]) -> list[str]:
    out = ["| system | image MB: hello / redis / nginx | boot | min memory MB: hello / redis / nginx | source |",
           "|---|---|---|---|---|"]
    for p in peers:
        def trio(d: dict[str, float]) -> str:
            return " / ".join(f"{d[a]:g}" if a in d else "-" for a in ("hello", "redis", "nginx"))
        out.append(f"| {p.name} | {trio(p.image_mb)} | {p.boot} | {trio(p.min_memory_mb)} | {p.source} |")
    return out


def markdown(report: Report, plot_file: Path | None, md_file: Path | None = None) -> str:
    lines = ["# Boot: image size, time to main(), least memory", "",
             # docs/results-boot*.md: each written by the make target of its name
             reporting.generated_by("./ukl bench boot", f"`make {md_file.stem}`"
                                    if md_file is not None and md_file.stem.startswith("results-") else "")
             + " Per application and configuration: the "
             "bytes a VMM loads (bzImage and initramfs), what a user ships (the OCI image's one gzip layer, "
             "`ukl pkg --oci`; `--hypervisor firecracker`, with the uncompressed kernel, for a kernel specialized for "
             "microvm alone), the uncompressed kernel's (vmlinux) text, data and bss; "
             "the guest time from the kernel's first instruction to the application's `main()` "
             + ("under `-icount shift=0,sleep=off` (one ns per instruction, idle waits at their length)"
                if report.icount else "(no `--icount`: no guest time)")
             + ", with the instructions executed in that span and the host's wall time under TCG beside it; "
             "for servers the same to the first answer to the recipe's readiness probe; and the least `-m` "
             "(MiB) at which the image as shipped does its work (a server answers its probe, a program ends "
             "with status 0), found by bisection in "
             f"{report.memory_range[0]}..{report.memory_range[1]} MiB with at most {report.memory_steps} boots "
             "after the upper bound's (\"fails at\": the largest size that failed). "
             + ("Configurations named special-HASH are kernels specialized to the application (`ukl build "
                "--specialize`, `ukl bench boot --specialize`) from the configuration in the row above."
                if any(r.specialized for r in report.rows) else "Kernels are the general ones (not specialized)."),
             "",
             f"Machine: {report.machine}; {report.qemu}.", "",
             "| " + " | ".join(HEADINGS) + " |", "|" + "---|" * len(HEADINGS)]
    several = len({r.memory_mib for r in report.rows}) > 1
    lines += ["| " + " | ".join(cells(r, several)) + " |" for r in report.rows]
    if any(r.optimize != "O2" for r in report.rows):
        lines += ["", "`-Os` after the compression: that kernel was compiled for size (`--optimize size`, "
                  "kernel/configs/optimize/size.config); the others with the configurations' -O2."]
    if any(not r.exact for r in report.rows):
        lines += ["", "\\* not exact: " + "; ".join(sorted({n for r in report.rows for n in r.notes}))]
    if plot_file:
        rel = plot_file.name if md_file is None or plot_file.parent == md_file.parent else str(plot_file)
        lines += ["", f"![boot figures]({rel})"]
    lines += ["", "## Where the instructions go", "",
              "Instructions from each point to the next: the kernel's real-mode setup entry (`setup`), the "
              "decompressor (`decompressor`), vmlinux's entry (`kernel`), init's stamp just before it starts "
              "the application (`init`), `main()`, and a server's first answer (`reply`). QEMU 7.2 executes, "
              "and `-icount` counts, each iteration of a REP-prefixed string instruction (`rep stosb`, "
              "`rep movsb`) as one instruction, and once more to find the count spent, so the column of REP "
              "string executions is the part of the boot to `main()` that a real CPU does many times faster "
              "(16 or more bytes a cycle): clearing the kernel's 1-4 MB bss, for one, is a `rep stosb` of that "
              "many iterations (where the compiler inlines it so; a KASAN kernel calls an unrolled loop).", ""]
    phase_names = list(dict.fromkeys(p for r in report.rows for p in r.phases))
    lines += ["| app | config | boot | kernel | " + " | ".join(phase_names)
              + " | of setup..main: REP string executions | TSC - instructions at init's stamp (ns) | -m MiB |",
              "|---|---|---|---|" + "---|" * (len(phase_names) + 3)]
    for r in report.rows:
        lines.append(f"| {r.app} | {r.config} | {r.boot} | {kernel_cell(r)} | "
                     + " | ".join(millions(r.phases.get(p)) for p in phase_names)
                     + f" | {millions(r.boot_to_main_rep_executions)}"
                     + f" | {'-' if r.clock_offset_ns is None else r.clock_offset_ns} | {r.memory_mib} |")
    offsets = [abs(r.clock_offset_ns) for r in report.rows if r.clock_offset_ns is not None and r.clock_offset_ns < 0]
    if offsets:
        lines += ["", f"The plugin's overcount before init's stamp is {min(offsets):,} to {max(offsets):,} "
                  f"instructions here ({max(offsets) / 1e6:.2f} ms at most; see below)."]
    lines += memory_section(report)
    lines += function_sections(report)
    lines += peer_section(report)
    used = list(dict.fromkeys(r.boot for r in [*report.rows, *report.peers]))
    lines += ["", "## Boot methods", "",
              "Each row's `boot`: how QEMU boots the image. The savings are kernel command-line words that tell "
              "the guest what it would otherwise wait to measure or check (tools/ukltool/run/vm.py, BOOT_SAVINGS): "
              "`no_timer_check` skips the IO-APIC timer check's wait for ticks; `random.trust_cpu=on` seeds the "
              "kernel's random number generator from RDRAND at boot, as Debian's kernels do by default, instead "
              "of waiting for entropy (a server that reads random bytes at start waits there); `noapictimer` "
              "skips the local "
              "APIC timer's 100 ms calibration, which a CPU without the TSC deadline timer (TCG's) needs, and "
              "takes the ticks from the HPET (-M pc only: under microvm, which has no HPET, no timer interrupt "
              "came without the APIC timer). `pmtmr=0` leaves the kernel no ACPI PM timer, so it skips that "
              "timer's 4.5 ms check of busy waits; passed only with `noapictimer`, since the APIC timer's "
              "calibration checks itself against the PM timer and without one for 100 ms more against the "
              "jiffies. Direct boot loads the uncompressed "
              "kernel (the bzImage's payload, an ELF file with 2 MiB-aligned segments) and jumps to its PVH "
              "entry: no decompression, and under microvm qboot's minimal firmware instead of SeaBIOS; the "
              "image bytes of such a row are that file's loadable segments' (not the holes their alignment "
              "leaves in the file) and the initramfs's.", "",
              "| boot | what |", "|---|---|", *[f"| {b} | {BOOTS[b].what if b in BOOTS else PEER_BOOTS.get(b, '-')} |"
                                                for b in used]]
    goals = [g for g in load_targets() if any(r.specialized and r.app == g.app for r in report.rows)]
    if goals:
        lines += ["", "## Against issue 36's targets", "",
                  "The specialized rows against the targets in measure/boot-targets.toml ("
                  + "; ".join(f"{g.app}: {g.why}" for g in goals) + "). Guest time under `--icount` counts "
                  "instructions, not the cycles a real CPU takes for them.", "", *target_rows(report, goals)]
    lines += ["", "## Published figures of other systems", "",
              "Not measured here: other machines, VMMs, kernels and definitions of boot time. Sources as cited "
              "in issue 36.", "", *peer_rows(load_peers()), "", "## How it is measured", "", METHOD]
    return "\n".join(lines) + "\n"


def function_table(r: Row, keep: int = PROFILE_KEEP) -> list[str]:
    """One row's profile: the KEEP functions with the most instructions
    over its spans, one column per span, then the rest and the total
    (spans saved before span_functions listed the same functions in each
    may leave a function out of one: shown as "-", counted in the rest)."""
    spans = list(r.functions)
    per = {span: dict(fns) for span, fns in r.functions.items()}
    totals = {span: sum(fns.values()) for span, fns in per.items()}
    other = "(other functions"
    named = {fn for fns in per.values() for fn in fns if not fn.startswith(other)}
    order = sorted(named, key=lambda fn: (-sum(per[s].get(fn, 0) for s in spans), fn))[:keep]

    def cell(n: int) -> str:
        return "-" if n == 0 else f"{n / 1e6:.2f}"

    out = ["| function | " + " | ".join(spans) + " |", "|---|" + "---:|" * len(spans)]
    out += [f"| `{fn}` | " + " | ".join(cell(per[s].get(fn, 0)) for s in spans) + " |" for fn in order]
    out.append("| (the other functions) | "
               + " | ".join(cell(totals[s] - sum(per[s].get(fn, 0) for fn in order)) for s in spans) + " |")
    out.append("| total | " + " | ".join(cell(totals[s]) for s in spans) + " |")
    return out


def function_sections(report: Report) -> list[str]:
    """`--by-function`: where each profiled row's boot goes, by function."""
    profiled = [r for r in report.rows if r.functions]
    if not profiled:
        return []
    lines = ["", "## Where the boot goes, by function", "",
             "Millions of instructions per function in each span from vmlinux's entry on (`--by-function`: one "
             "more boot of the row's image, with our QEMU plugin's profile=points, which counts each executed "
             "translation block in the span it began in; a block is counted whole, and the block holding a "
             "point in the span before it). Functions are named by vmlinux's symbol table (a UKL application's "
             "carry the `ukl_` prefix), also where the kernel runs at its physical addresses; `(user space)` "
             "is init, or the application under `linux`. `-` is none; 0.00 is under 0.005 M."]
    for r in profiled:
        lines += ["", f"### {r.app}, {r.config}, {r.boot}, -m {r.memory_mib}", "", *function_table(r)]
    return lines


METHOD = f"""* **Time origin: the kernel's first instruction**, the real-mode setup code's entry where QEMU's
  `-kernel` loader jumps (linear 0x10200 for a modern bzImage), so the firmware (SeaBIOS) does not count
  and the decompression does (a VMM that loads vmlinux directly skips it; the `decompressor..kernel`
  column shows what that saves). Booted direct, the origin is the kernel's PVH entry (`setup` and
  `decompressor` are both that point).
* **Points**: our QEMU plugin (`tools/qemu-plugin/insnclass.c`, option `at=`) records the instructions executed
  before the first execution of each address in a chain, each armed once the one before has run, the
  idle instructions (HLT, MWAIT) executed before it, and the host's clock then. `main()` is `ukl_main` in
  vmlinux under UKL (the application's symbols carry the `ukl_` prefix), and the static program's `main`
  under `linux` (a non-PIE static binary at its link address; init is linked at 0x10000000, so no
  address of init's is one of the application's).
* **Guest time**: under `-icount shift=0,sleep=off` the guest's clock, and its TSC, advance one ns per
  instruction, and jump ahead while the CPU idles. init (`ukl_stamp=1`) reads the TSC (QEMU's exact count,
  plus idle time, since power-on) just before it starts the application. Boot to `main()` = that TSC
  - the plugin's instructions before the origin + the plugin's instructions from the stamp to `main()`.
  This holds where no idle instruction runs before the origin nor between the stamp and `main()`; the
  plugin counts them, and a row where either happened is marked `*`. The plugin counts a translated block
  whole when it starts, so blocks cut short by an exception are overcounted: the column "TSC -
  instructions at init's stamp" above is that overcount (negative) where nothing idled before the
  stamp. It bounds the error of the count before the origin (the firmware's), so boot to `main()` is
  within that many ns (plus the overcount between the stamp and `main()`, a part of its 0.3-1 million
  instructions). The instruction columns are the plugin's counts, high by up to that overcount.
  Guest time counts instructions, not cycles: a privileged instruction that takes hundreds of cycles
  counts one, and each iteration of a REP string instruction counts one (the plugin counts those
  executions separately, "REP string executions" above).
* **First reply** (servers: recipes with a `[netbench]` or `[tests]` probe): a prober forked by init
  (`ukl_probe=PORT:HEX`) connects to 127.0.0.1:PORT, retrying every {PROBE_INTERVAL_NS // 1000} us of guest time
  until the server listens, sends the recipe's probe, and reads the TSC when the first byte of the answer
  arrives; then it stops the server. Late by at most the retry interval where the server began to listen
  between two tries, plus the prober's wake-up. Its connection attempts before `main()` (a few thousand
  instructions each) are counted in the server's boot to `main()`.
* **Wall, TCG**: the host's clock between the same points under QEMU's software emulation (translation
  included): what this machine took, not what a real CPU would; it varies with the host's load.
* **Least memory**: boots with `-m N` (MiB) the image as shipped, with its default arguments: a server
  must answer its readiness probe (init's prober), a program must end with status 0; bisection in log
  space between the bounds. Nothing else is loaded: the smoke tests' busybox is a test layer that
  images do not carry (docs/guide/running.md), so the initramfs holds init, `/etc` and the
  application's files. As PID 1 a server has no init to probe it: its row has no least memory.
* **Kernel compression**: each row's kernel compression is read from its bzImage. The configurations use
  LZ4 (the fastest decompressor); `ukl bench boot --compressions` measures the others
  (docs/results/results-boot-compression.md).
* **Repeatability**: under `--icount` runs repeat exactly; with `--repeat N` a row is the median run (by
  instructions to `main()`), and each run's instruction count is kept (`runs_instructions` in the JSON)."""


def plot(report: Report, path: Path) -> None:
    """Three panels, image size, boot to main() and least memory: a bar per
    application and configuration, and the peers' published figures for the
    same applications, hatched."""
    plt = reporting.pyplot()

    peers = load_peers()
    panels = [("image MB (kernel + initramfs)", lambda r: r.image_bytes / MB, lambda p, a: p.image_mb.get(a)),
              ("boot to main(), ms of guest time", lambda r: None if r.boot_to_main_ns is None
               else r.boot_to_main_ns / 1e6, lambda p, a: p.boot_ms),
              ("least memory, MiB (peers: MB)", lambda r: r.min_memory_mib, lambda p, a: p.min_memory_mb.get(a))]
    apps = list(dict.fromkeys(r.app for r in report.rows))
    fig, axes = plt.subplots(1, 3, figsize=(15, 0.5 * len(report.rows) + 0.4 * len(peers) * len(apps) + 2.5))
    for ax, (title, ours, theirs) in zip(axes, panels, strict=True):
        labels: list[str] = []
        values: list[float] = []
        hatch: list[bool] = []
        for a in apps:
            for r in (r for r in report.rows if r.app == a):
                labels.append(f"{a} {r.config}")
                v = ours(r)
                values.append(float(v) if v is not None else 0.0)
                hatch.append(False)
            for p in peers:
                pv = theirs(p, a)
                if pv is not None and title.startswith("boot"):
                    continue        # the peers publish one boot time, not one per application: below
                if pv is not None:
                    labels.append(f"{a} {p.name.split(' (')[0]}")
                    values.append(float(pv))
                    hatch.append(True)
        if title.startswith("boot"):
            for p in peers:
                if p.boot_ms is not None:
                    labels.append(f"{p.name.split(' (')[0]} (published, any app)")
                    values.append(p.boot_ms)
                    hatch.append(True)
        bars = ax.barh(range(len(labels)), values, color=["C7" if h else "C0" for h in hatch])
        for b, h in zip(bars, hatch, strict=True):
            if h:
                b.set_hatch("//")
        ax.set_yticks(range(len(labels)))
        ax.set_yticklabels(labels, fontsize=7)
        ax.invert_yaxis()
        ax.set_title(title, fontsize=9)
    fig.suptitle("ukl bench boot (blue) beside published figures of other systems (grey, hatched)"
                 + (" - guest time under -icount" if report.icount else ""), fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    reporting.save_plot(fig, path)


def show(report: Report) -> None:
    ui.report_console().print(table(report))
    for r in [*report.rows, *report.peers]:
        for n in r.notes:
            ui.warn(f"{r.app} under '{r.config}': {n}")

