"""The patched kernel tree and per-configuration kernel builds.

The tree is a git repository in the cache (see sources.py). The patch series
in kernel/patches is turned into commits on top of `pristine` with git
plumbing and a private index, and the work tree is then moved to the result
with `git reset --hard`, which rewrites only files whose content changes, so
an edit to one patch rebuilds incrementally.

The series is applied by series.py. Developer workflow: edit and commit in
the tree (`./ukl kernel tree` prints its path), build with `./ukl build`
(an edited tree is built as it is), and `./ukl kernel export` writes the
commits back to kernel/patches."""

from __future__ import annotations

import hashlib
import inspect
import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ukltool.linux import profiles
from ukltool.source import series as series_mod
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import CONFIG_DIR, PATCH_DIR, cache_dir
from ukltool.util.proc import capture, need_tool, run, stream

BASE_FRAGMENT = "vm-base.config"
TREE_LOCK = "kernel-tree"
# Specialized configurations (`ukl build --specialize`, specialize.py):
# special-HASH, named by the content of a fragment kept in the cache.
SPECIAL_PREFIX = "special-"


def special_fragment(name: str) -> Path:
    """Where the fragment of the specialized configuration NAME is kept."""
    return cache_dir() / "specialize" / "configs" / f"{name}.config"


MACHINE_HEADER = re.compile(r"^#\s*ukl-specialized-for:\s*(\S+)\s*$", re.M)


def config_machine(name: str) -> str | None:
    """The one QEMU machine configuration NAME (a profile's configuration
    included) is for: a specialized configuration's `# ukl-specialized-for:`
    header (`ukl build --specialize --machine`); None: any machine."""
    config = profiles.parse(name).config
    if not config.startswith(SPECIAL_PREFIX):
        return None
    try:
        m = MACHINE_HEADER.search(special_fragment(config).read_text())
    except OSError:
        return None
    return m.group(1) if m else None


def config_names() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.config") if p.name != BASE_FRAGMENT)


def summary(name: str) -> str:
    """The first sentence of configuration NAME's fragment comment."""
    lines = []
    for line in (CONFIG_DIR / f"{name}.config").read_text().splitlines():
        if not line.startswith("#") or line.startswith("# ukl-"):
            break
        lines.append(line.lstrip("# ").strip())
    text = " ".join(lines)
    end = re.search(r"\.(\s|$)", text)
    return text[:end.start()] if end else text


def fragments(name: str) -> list[Path]:
    """vm-base.config, then the fragments named by `# ukl-extends: X` lines,
    then NAME's; NAME may be a profile (CONFIG+OPTION...), whose options
    need a UKL configuration."""
    prof = profiles.parse(name)
    chain = _fragments(prof.config)
    if prof.opts and not _wanted(chain).get("CONFIG_UNIKERNEL_LINUX") == "y":
        raise UklError(f"'{name}': UKL options need a configuration that links the application into the kernel",
                       "use a UKL configuration, for example base+" + "+".join(prof.opts))
    return chain


COMPRESSION_DIR = CONFIG_DIR / "compression"


def compressions() -> list[str]:
    """The kernel compressions `ukl build --compression` offers (LZ4, the
    configurations' own, first)."""
    names = sorted(p.stem for p in COMPRESSION_DIR.glob("*.config"))
    return sorted(names, key=lambda n: n != "lz4")


def _variant_fragment(directory: Path, name: str, what: str, hint: str) -> Path:
    """DIRECTORY/NAME.config, a fragment that varies a configuration's
    kernel (its compression, its optimization), or a clear error."""
    path = directory / f"{name}.config"
    if not re.fullmatch(r"[a-z0-9]+", name) or not path.is_file():
        raise UklError(f"unknown kernel {what} '{name}'", hint)
    return path


def compression_fragment(name: str) -> Path:
    return _variant_fragment(COMPRESSION_DIR, name, "compression", f"choose one of: {', '.join(compressions())}")


OPTIMIZE_DIR = CONFIG_DIR / "optimize"


def optimizations() -> list[str]:
    """What `ukl build --optimize` offers besides the configurations' -O2."""
    return sorted(p.stem for p in OPTIMIZE_DIR.glob("*.config"))


def optimize_fragment(name: str) -> Path:
    return _variant_fragment(OPTIMIZE_DIR, name, "optimization",
                             f"choose one of: {', '.join(optimizations())} (the default is the configurations' -O2)")


# The host program Kbuild runs for each kernel compression, and its package
COMPRESSORS = {"CONFIG_KERNEL_LZ4": ("lz4", "lz4"), "CONFIG_KERNEL_GZIP": ("gzip", "gzip"),
               "CONFIG_KERNEL_ZSTD": ("zstd", "zstd"), "CONFIG_KERNEL_XZ": ("xz", "xz-utils")}


def need_compressor(name: str, compression: str | None = None) -> None:
    """Before a build of NAME's kernel (compressed with COMPRESSION, None:
    the configuration's): the compressor it needs is installed (a missing
    one would fail the build at its very end)."""
    wanted = _wanted(fragments(name) + ([compression_fragment(compression)] if compression else []))
    for sym, (tool, package) in COMPRESSORS.items():
        if wanted.get(sym) == "y":
            need_tool(tool, package)


def _wanted(frags: list[Path]) -> dict[str, str]:
    wanted: dict[str, str] = {}
    for f in frags:
        wanted.update(parse_fragment(f.read_text()))
    return wanted


def _fragments(name: str) -> list[Path]:
    if name.startswith(SPECIAL_PREFIX):
        special = special_fragment(name)
        if not re.fullmatch(r"[0-9a-f]{12}", name[len(SPECIAL_PREFIX):]) or not special.is_file():
            raise UklError(f"no specialized configuration '{name}' in this cache ({special.parent})",
                           "build the application with `ukl build APP --config base --specialize`, which makes it")
        return [special]   # self-contained: the core, the origin's fragments, the application's options
    path = CONFIG_DIR / f"{name}.config"
    if name == Path(BASE_FRAGMENT).stem or not path.is_file():
        raise UklError(f"unknown configuration '{name}'",
                       f"choose one of: {', '.join(config_names())} (fragments in {CONFIG_DIR})")
    chain: list[Path] = []
    for line in path.read_text().splitlines():
        m = re.match(r"#\s*ukl-extends:\s*(\S+)", line)
        if m:
            chain += [f for f in _fragments(m.group(1)) if f not in chain]
    if not chain:
        chain = [CONFIG_DIR / BASE_FRAGMENT]
    return chain + [path]


DEFAULT_TCG_CPU = "max"  # has SMEP and SMAP, which UKL must work with


def tcg_cpu(name: str) -> str:
    """The QEMU CPU model a configuration boots on under TCG: the last
    `# ukl-tcg-cpu: MODEL` line of its fragments, else 'max'. (Under KVM
    the host's CPU.) Linux turns its speculation mitigations on only for
    CPUs it knows to be affected, and TCG's 'max' is an unaffected AMD
    model, so a configuration that measures mitigations names an Intel one."""
    cpu = DEFAULT_TCG_CPU
    for frag in fragments(name):
        for value in _headers(frag, "ukl-tcg-cpu", r"\S+"):
            cpu = value
    return cpu


def _headers(frag: Path, key: str, value: str) -> list[str]:
    """The values of `# KEY: VALUE` lines in FRAG; a line that names KEY
    but whose value does not match VALUE (a regex) is an error, not
    ignored."""
    out = []
    for line in frag.read_text().splitlines():
        if re.match(rf"#\s*{key}:", line):
            m = re.match(rf"#\s*{key}:\s*({value})\s*$", line)
            if not m:
                raise UklError(f"{frag}: bad '{key}' line: {line.strip()}",
                               f"write '# {key}: VALUE' with a value matching {value}")
            out.append(m.group(1))
    return out


def measurement_only(name: str) -> bool:
    """Does the configuration's own fragment say `# ukl-tests: measurement`?
    Such configurations exist to be measured (`ukl bench`); the test suite
    leaves them out (tests/conftest.py says what covers them instead)."""
    return "measurement" in _headers(_fragments(profiles.parse(name).config)[-1], "ukl-tests", "measurement")


def slowdown(name: str) -> int:
    """How many times slower than its base configuration NAME runs, by its
    own fragment's `# ukl-slowdown: N` (default 1): test suites that time
    themselves are given this factor (LTP's LTP_TIMEOUT_MUL)."""
    found = _headers(_fragments(profiles.parse(name).config)[-1], "ukl-slowdown", r"[1-9][0-9]?")
    return int(found[-1]) if found else 1


def image_tcg_cpu(image_dir: Path) -> str:
    """tcg_cpu() of the configuration an image was built for."""
    return profile_tcg_cpu(profiles.image_config(image_dir))


def profile_tcg_cpu(config: str) -> str:
    """tcg_cpu() of CONFIG, an image's profile ("": unknown)."""
    if not config:
        return DEFAULT_TCG_CPU
    try:
        return tcg_cpu(config)
    except UklError:  # a configuration this checkout no longer has
        return DEFAULT_TCG_CPU


def parse_fragment(text: str) -> dict[str, str]:
    """CONFIG_X=v lines and '# CONFIG_X is not set' lines (as 'n')."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"^(CONFIG_\w+)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2)
            continue
        m = re.match(r"^# (CONFIG_\w+) is not set$", line)
        if m:
            out[m.group(1)] = "n"
    return out


def config_mismatches(wanted: dict[str, str], final: dict[str, str]) -> list[str]:
    """Symbols a fragment asked for that the final .config does not have."""
    bad = []
    for sym, val in wanted.items():
        got = final.get(sym, "n")
        if got != val:
            bad.append(f"{sym}={val} (got {got})")
    return bad


SERIES = series_mod.Series("kernel", PATCH_DIR, "./ukl kernel")


def series() -> list[Path]:
    return SERIES.patches()


def series_key(patches: list[Path]) -> str:
    return series_mod.key(patches)


def sync_tree(tree: Path) -> str:
    """Bring the tree to kernel/patches; return a key for its content."""
    return series_mod.sync(SERIES, tree)


@dataclass(frozen=True)
class KernelImage:
    config: str
    key: str
    bzimage: Path
    vmlinux: Path
    release: str


def make_progress(st: ui.Step):
    def on_line(line: str) -> None:
        m = re.match(r"^\s+([A-Z]+\S*)\s+(\S+)", line)
        if m:
            st.update(f"{m.group(1)} {m.group(2)}")
    return on_line


def build_logic() -> str:
    """A key for the code that configures and builds kernels: a change to
    it is a change to every kernel, with no constant to bump by hand."""
    code = "".join(inspect.getsource(f) for f in (parse_fragment, config_mismatches, configure, build))
    return hashlib.sha256(code.encode()).hexdigest()


def configure(tree: Path, bdir: Path, name: str, tree_key: str, frags: list[Path]) -> None:
    """.config for NAME from FRAGS in BDIR, redone when the fragments, the
    tree (whose Kconfig decides dependencies) or this code change."""
    wanted: dict[str, str] = {}
    for f in frags:
        wanted.update(parse_fragment(f.read_text()))
    cfg_key = hashlib.sha256(b"".join(f.read_bytes() for f in frags) + tree_key.encode() +
                             build_logic().encode()).hexdigest()
    key_file = bdir / ".ukl-config-key"
    if key_file.is_file() and key_file.read_text().strip() == cfg_key and (bdir / ".config").is_file():
        return
    bdir.mkdir(parents=True, exist_ok=True)
    allconfig = bdir / ".ukl-allconfig"
    allconfig.write_text("".join(f"# from {f.name}\n{f.read_text()}\n" for f in frags))
    env = dict(os.environ, KCONFIG_ALLCONFIG=str(allconfig))
    # allnoconfig rewrites .config; kconfig then touches only the changed
    # symbols' dependency files, so an unchanged result rebuilds nothing.
    run(["make", "-s", "-C", tree, f"O={bdir}", "allnoconfig"], env=env, what=f"configuring kernel '{name}'")
    final = parse_fragment((bdir / ".config").read_text())
    bad = config_mismatches(wanted, final)
    if bad:
        raise UklError(f"kernel configuration '{name}' could not set: " + ", ".join(bad),
                       "a dependency is missing or the symbol does not exist; fix the fragments in kernel/configs")
    key_file.write_text(cfg_key + "\n")


def is_ukl(name: str) -> bool:
    """Does configuration (or profile) NAME link an application into the kernel?"""
    return _wanted(fragments(name)).get("CONFIG_UNIKERNEL_LINUX") == "y"


def build(name: str, app: Path | None = None, compression: str | None = None,
          optimize: str | None = None) -> KernelImage:
    """Build the kernel for configuration NAME, with the UKL application
    object APP linked in if given (cached by content), compressed with
    COMPRESSION (kernel/configs/compression; None: the configuration's).
    A compression shares NAME's build directory: only the compressed
    image is remade. OPTIMIZE (kernel/configs/optimize; None: the
    configuration's -O2) changes every object: it has its own build
    directory. Every configuration
    is built from the one patched tree, so builds (and anything that
    brings the tree to a series) hold its lock: two checkouts with
    different series, or two test runs, take turns instead of building
    from a tree the other is rewriting."""
    fragments(name)  # checks a profile's options
    name = profiles.parse(name).config  # every profile of a configuration shares its kernel
    src, tree = sources.linux_tree()
    with lock.held(TREE_LOCK, "the kernel tree"):
        tree_key = sync_tree(tree)
        frags = fragments(name) + ([compression_fragment(compression)] if compression else []) + \
            ([optimize_fragment(optimize)] if optimize else [])
        app_key = hashlib.sha256(app.read_bytes()).hexdigest() if app else ""
        h = hashlib.sha256()
        for part in (src.version, tree_key, build_logic(), app_key):
            h.update(part.encode() + b"\0")
        for f in frags:
            h.update(f.read_bytes())
        key = h.hexdigest()[:16]
        out = cache_dir() / "kernels" / f"{name}-{key}"
        if (out / "bzImage").is_file():
            return KernelImage(name, key, out / "bzImage", out / "vmlinux", (out / "release").read_text().strip())
        bdir = cache_dir() / "build" / (name + (f"-{optimize}" if optimize else ""))
        configure(tree, bdir, name, tree_key, frags)
        make_vars = []
        if app:
            # A fixed path, rewritten only when the content changes: make
            # relinks vmlinux when it is newer.
            linked = bdir / "ukl-app.o"
            if not linked.is_file() or linked.read_bytes() != app.read_bytes():
                shutil.copy(app, linked)
            make_vars.append(f"UKL_APP={linked}")
        # make cannot see a change of UKL_APP itself (another application
        # with the same object, or none): the last link's is recorded, and
        # vmlinux removed when it differs.
        linked_key = bdir / ".ukl-linked-app"
        if not linked_key.is_file() or linked_key.read_text() != app_key:
            (bdir / "vmlinux").unlink(missing_ok=True)
            linked_key.unlink(missing_ok=True)
        jobs = str(os.cpu_count() or 2)
        with ui.step(f"building kernel '{name}'") as st:
            stream(["make", "-C", tree, f"O={bdir}", f"-j{jobs}", "LOCALVERSION=", "bzImage", *make_vars],
                   bdir / "ukl-build.log", make_progress(st), what=f"kernel build '{name}'",
                   hint=f"see the log; the build directory is {bdir}")
        linked_key.write_text(app_key)
        release = (bdir / "include" / "config" / "kernel.release").read_text().strip()
        tmp = out.with_name(out.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        shutil.copy(bdir / "arch" / "x86" / "boot" / "bzImage", tmp / "bzImage")
        shutil.copy(bdir / "vmlinux", tmp / "vmlinux")
        shutil.copy(bdir / "System.map", tmp / "System.map")
        (tmp / "release").write_text(release + "\n")
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)
    return KernelImage(name, key, out / "bzImage", out / "vmlinux", release)


def checkpatch_errors(returncode: int, output: str) -> int:
    """The number of errors checkpatch.pl --terse reported, from its exit
    status and output: silence and 0 when clean, a "total:" line when not.
    Anything else means it did not run, which is an error of its own."""
    total = re.search(r"^total: (\d+) errors, \d+ warnings", output, re.M)
    if returncode == 0 and (total is None or total.group(1) == "0"):
        return 0
    if returncode == 1 and total is not None:
        return int(total.group(1))
    tail = "\n  ".join(output.strip().splitlines()[-5:])
    raise UklError(f"checkpatch.pl did not run (exit {returncode}):\n  {tail}",
                   "it needs perl; `ukl kernel tree` restores the kernel tree")


def checkpatch() -> int:
    """scripts/checkpatch.pl --strict on every patch; non-zero if any has errors."""
    _, tree = sources.linux_tree()
    script = tree / "scripts" / "checkpatch.pl"
    if not script.is_file():
        raise UklError(f"{script} is missing", "`ukl kernel reset` restores the kernel tree")
    patches = series()
    if not patches:
        raise UklError(f"no patches in {PATCH_DIR}", "restore kernel/patches from git")
    worst = 0
    for p in patches:
        # checkpatch leaves a cache file in its working directory.
        with tempfile.TemporaryDirectory() as td:
            res = capture([script, "--strict", "--no-tree", "--terse", "--show-types", p], cwd=Path(td))
        errors = checkpatch_errors(res.returncode, res.stdout + res.stderr)
        ui.info(f"{p.name}: {errors} errors")
        for l in res.stdout.splitlines():
            if ": ERROR:" in l or ": WARNING:" in l or ": CHECK:" in l:
                print("  " + l)
        worst = max(worst, 1 if errors else 0)
    return worst
