"""`ukl conformance ltp`: the Linux Test Project's system-call tests as UKL
applications, run under `linux` and UKL configurations and compared.

Design. A kernel relink costs ~7 s and a boot 5-10 s under TCG, so one
image per test does not scale to hundreds of tests times several
configurations. Instead many tests go into one program behind a
dispatcher (guest/ltp-dispatch.c):

* LTP is built out of tree from a pinned source (tests/ltp/source.toml,
  unpacked into the cache), once per target: `linux` (an ordinary static
  program) and `base` (code for the kernel image: the flags of
  flags.ring0). LTP's own makefiles compile the library and each test's
  object (`make NAME.o` in the test's directory, so every directory's own
  flags apply); configure runs with the plain host compiler for both,
  since its link tests must run on the host.
* Each test's main() (LTP's new API defines it in tst_test.h) is renamed
  to ltp_main_NAME and every other global symbol of its object made local
  (objcopy), so that tests may define the same names. All tests share one
  copy of libltp: the dispatcher forks each test before anything of the
  library ran, so each starts from the library's pristine state, as after
  an exec.
* The program is linked into the kernel (UKL configurations) or put in
  the initramfs (`linux`); a boot runs a batch of tests one after the
  other, each in its own process, process group and directory, with a
  timeout inside the guest. A test that crashes the VM ends its batch; the
  batch's remaining tests run in a further boot.

A test's result is the worst of what it reported: TBROK (also: killed,
timed out, or no end) over TFAIL (also: a TWARN) over TPASS over TCONF. So
TPASS means at least one pass and no failure; TCONF that nothing ran.

Every test that passes under `linux` must pass under each UKL
configuration, or be listed with its reason in tests/ltp/divergences.toml."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
import tomllib
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ukltool.build import app, flags, image, initramfs
from ukltool.glibc import libc
from ukltool.linux import kernel
from ukltool.run import logscan, vm
from ukltool.source import sources
from ukltool.util import lock, reporting, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import GUEST_DIR, REPO, cache_dir
from ukltool.util.proc import host_cc, need_tool, run, stream

DATA_DIR = REPO / "tests" / "ltp"
SOURCE_FILE = DATA_DIR / "source.toml"
DIVERGENCES_FILE = DATA_DIR / "divergences.toml"
ENVIRONMENT_FILE = DATA_DIR / "environment.toml"   # why tests break under linux too
DEFAULT_LIST = "quick"
DISPATCHER = GUEST_DIR / "ltp-dispatch.c"
SYSCALLS = "testcases/kernel/syscalls"
APP_NAME = "ltp"
RESULTS = ("TPASS", "TFAIL", "TBROK", "TCONF")
WORST_FIRST = ("TBROK", "TFAIL", "TPASS", "TCONF")
# LTP's exit status bits (include/tst_res_flags.h)
TFAIL_BIT, TBROK_BIT, TWARN_BIT, TCONF_BIT = 1, 2, 4, 32
# Tests in one kernel image: the image grows with each test's code (one
# libltp is shared), and a few hundred keep it within a few MiB.
MAX_PER_IMAGE = 150
DEFAULT_BATCH = 30      # tests per boot
DEFAULT_TIMEOUT = 300.0  # seconds per test, inside the guest (LTP's own is 30 s x LTP_TIMEOUT_MUL=4)
TCG_TIMEOUT_MUL = 4      # LTP_TIMEOUT_MUL under TCG (guest/ltp-dispatch.c's default), times a kernel's slowdown
BOOT_ALLOWANCE = 120.0   # seconds for a boot besides its tests


# ---------------------------------------------------------------- source

@dataclass(frozen=True)
class Source:
    repository: str
    commit: str
    tarball: str
    sha256: str

    @property
    def short(self) -> str:
        return self.commit[:12]


def load_source(path: Path = SOURCE_FILE) -> Source:
    try:
        data = tomllib.loads(path.read_text())
        return Source(str(data["repository"]), str(data["commit"]), str(data["tarball"]), str(data["sha256"]))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read {path}: {e}", "restore it from git") from None
    except KeyError as e:
        raise UklError(f"{path} lacks the key {e}", "restore it from git") from None


def tarball_candidates(src: Source) -> list[Path]:
    """Where the tarball is looked for, in order."""
    env = os.environ.get("UKL_LTP_TARBALL")
    return [*([Path(env)] if env else []), REPO.parent / "shared" / "ltp" / src.tarball,
            cache_dir() / "downloads" / src.tarball]


def find_tarball(src: Source) -> Path:
    for p in tarball_candidates(src):
        if p.is_file():
            return p
    where = ", ".join(str(p) for p in tarball_candidates(src))
    raise UklError(f"the LTP source tarball {src.tarball} is missing (looked in {where})",
                   f"make it: git clone {src.repository} ltp && git -C ltp archive --prefix=ltp-{src.short}/ "
                   f"{src.commit} | xz > {cache_dir() / 'downloads' / src.tarball} (or set UKL_LTP_TARBALL)")


def source_tree(src: Source | None = None) -> Path:
    """The unpacked, verified LTP tree in the cache, with its configure
    script generated (`make autotools`)."""
    src = src or load_source()
    dest = cache_dir() / "src" / f"ltp-{src.short}"
    ready = dest / ".ukl-ready"
    if ready.is_file():
        return dest
    with lock.held(f"unpack-ltp-{src.short}", "the unpacking of LTP"):
        if ready.is_file():
            return dest
        tarball = find_tarball(src)
        got = sources.check_sha256(tarball, src.sha256, SOURCE_FILE.name,
                                   f"fetch it again: commit {src.commit} of {src.repository}")
        tmp = dest.with_name(dest.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        sources.extract_top_dir(tarball, tmp)
        need_tool("autoconf", "autoconf")
        need_tool("automake", "automake")
        with ui.step("generating LTP's configure script (make autotools)"):
            run(["make", "autotools"], cwd=tmp, what="make autotools in the LTP tree")
        (tmp / ".ukl-ready").write_text(got + "\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    return dest


# ---------------------------------------------------------------- tests

def list_path(name: str) -> Path:
    return DATA_DIR / f"{name}.txt"


def list_names() -> list[str]:
    return sorted(p.stem for p in DATA_DIR.glob("*.txt"))


def parse_list(text: str) -> list[str]:
    """Test names of a list file: one per line, `#` starts a comment."""
    names = []
    for line in text.splitlines():
        word = line.split("#", 1)[0].strip()
        if word:
            names.append(word)
    return list(dict.fromkeys(names))


def selection(spec: str) -> list[str]:
    """--tests: comma-separated test names and names of lists in tests/ltp
    (quick, ci, ...), in order, each test once."""
    out: list[str] = []
    words = [w.strip() for w in spec.split(",") if w.strip()]
    if not words:
        raise UklError(f"--tests {spec!r} names no test", f"name tests or a list: {', '.join(list_names())}")
    for w in words:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", w):
            raise UklError(f"--tests: {w!r} is not a test name", "LTP's test names are like read01 or dup3_01")
        out += parse_list(list_path(w).read_text()) if list_path(w).is_file() else [w]
    return list(dict.fromkeys(out))


def test_index(tree: Path) -> dict[str, Path]:
    """Every C file under testcases/kernel/syscalls by its name, relative to the tree."""
    index: dict[str, Path] = {}
    for c in sorted((tree / SYSCALLS).rglob("*.c")):
        index.setdefault(c.stem, c.relative_to(tree))
    return index


OLD_API = re.compile(r"^\s*(?:const\s+)?char\s*\*\s*TCID\b|^#include\s+\"test\.h\"", re.M)


def check_tests(names: list[str], index: dict[str, Path], tree: Path) -> None:
    unknown = [n for n in names if n not in index]
    if unknown:
        raise UklError(f"unknown LTP test{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
                       f"tests are named after their source in {tree / SYSCALLS}/*/NAME.c")
    old = [n for n in names if OLD_API.search((tree / index[n]).read_text(errors="replace"))]
    if old:
        raise UklError(f"{', '.join(old)}: written for LTP's old API (test.h), which the dispatcher cannot run",
                       "choose tests that include tst_test.h")


def symbol(test: str) -> str:
    return "ltp_main_" + re.sub(r"\W", "_", test)


def tests_header(tests: list[str]) -> str:
    """ltp-tests.h for the dispatcher."""
    return "".join(f'LTP_TEST("{t}", {symbol(t)})\n' for t in tests)


# ---------------------------------------------------------------- building

TARGETS = ("linux", "base")


def target_of(config: str) -> str:
    return "base" if kernel.is_ukl(config) else "linux"


def compiler(target: str) -> list[str]:
    """CC for LTP's makefiles: the host compiler, with the flags of code in
    the kernel image for `base`."""
    return [host_cc(), *flags.ring0([])] if target == "base" else [host_cc()]


def build_dir(tree: Path, target: str) -> Path:
    cc = " ".join(compiler(target))
    key = hashlib.sha256((cc + "\0" + flags.SYSCALL_MACRO.read_text()).encode()).hexdigest()[:12]
    return cache_dir() / "build" / f"{tree.name}-{target}-{key}"


def make_command(tree: Path, bdir: Path, target: str, rel: str) -> list[str]:
    """make in directory REL of the out-of-tree build. -pipe is left out of
    LTP's flags: the SYSCALL macros reach the assembler as a file of their
    own (flags.without_pipe)."""
    (bdir / rel).mkdir(parents=True, exist_ok=True)
    return ["make", "-C", str(bdir / rel), "-f", str(tree / rel / "Makefile"), f"top_srcdir={tree}",
            f"top_builddir={bdir}", f"CC={' '.join(compiler(target))}", "OPT_CFLAGS=-O2 -fno-strict-aliasing",
            f"-j{os.cpu_count() or 2}"]


# configure's settings, the same for both targets. _FORTIFY_SOURCE=0: LTP
# would define it as 2, and the fortified longjmp() it then calls (glibc's
# ____longjmp_chk, as our port builds it) keeps data in the red zone across
# a system call, which link_ukl refuses.
CONFIGURE_SETTINGS = ["CFLAGS=-O2", "CPPFLAGS=-D_FORTIFY_SOURCE=0"]


def configure(tree: Path, target: str) -> Path:
    """The configured build directory for TARGET."""
    bdir = build_dir(tree, target)
    stamp = bdir / ".ukl-configured"
    cmd = [str(tree / "configure"), f"CC={host_cc()}", *CONFIGURE_SETTINGS]
    if stamp.is_file() and stamp.read_text() == json.dumps(cmd):
        return bdir
    shutil.rmtree(bdir, ignore_errors=True)  # objects of other settings
    bdir.mkdir(parents=True)
    with ui.step(f"configuring LTP ({target}); log: {bdir / 'ukl-configure.log'}") as st:
        stream(cmd, bdir / "ukl-configure.log",
               lambda line: st.update(line[:70]) if line.startswith("checking") else None, cwd=bdir,
               what="LTP's configure")
    stamp.write_text(json.dumps(cmd))
    return bdir


def _logged_make(cmd: list[str], log: Path, st: ui.Step, what: str) -> None:
    def progress(line: str) -> None:
        if line.startswith(("CC ", "AR ")):
            st.update(line.split()[-1].rsplit("/", 1)[-1])
    stream(cmd, log, progress, what=what, append=True, hint=f"the build directory is {log.parent}")


# LTP's libraries (libs/NAME) written for the old API: they call the test's cleanup()
OLD_API_LIBS = {"ipc"}


@dataclass
class DirInfo:
    ltplibs: list[str]   # LTP's internal libraries the directory links (libs/NAME)
    ldlibs: list[str]    # -l flags besides -lltp


def dir_info(tree: Path, bdir: Path, target: str, rel: str) -> DirInfo:
    """What the directory's Makefile links, as its own make says."""
    probe = "ukl-vars: ; @echo '$(LTPLIBS)|$(LDLIBS)'"
    out = run([*make_command(tree, bdir, target, rel), "-s", "--eval", probe, "ukl-vars"],
              what=f"reading {rel}/Makefile").strip().splitlines()[-1]
    ltplibs, ldlibs = out.split("|", 1)
    return DirInfo(ltplibs.split(), [w for w in ldlibs.split() if w.startswith("-l") and w != "-lltp"])


@dataclass
class Built:
    """A target's LTP objects for a set of tests."""
    target: str
    objects: dict[str, Path]      # test -> its object, main() renamed and other symbols local
    archives: list[Path]          # libltp.a and the internal libraries the tests' directories use
    ldlibs: list[str]             # -l flags
    unbuilt: dict[str, str] = field(default_factory=dict)  # test -> why it has no object


def build_tests(tree: Path, target: str, tests: list[str], index: dict[str, Path], work: Path) -> Built:
    bdir = configure(tree, target)
    work.mkdir(parents=True, exist_ok=True)
    log = bdir / "ukl-build.log"
    log.write_text("")
    by_dir: dict[str, list[str]] = {}
    for t in tests:
        by_dir.setdefault(index[t].parent.as_posix(), []).append(t)
    with lock.held(f"ltp-build-{bdir.name}", f"LTP ({target})"), \
            ui.step(f"building LTP's library and {len(tests)} tests ({target}); log: {log}") as st:
        _logged_make([*make_command(tree, bdir, target, "lib"), "libltp.a"], log, st, "building libltp")
        infos = {d: dir_info(tree, bdir, target, d) for d in by_dir}
        unbuilt: dict[str, str] = {}
        for d in [d for d, i in infos.items() if set(i.ltplibs) & OLD_API_LIBS]:
            unbuilt.update({n: f"{d} links an old-API library of LTP's ({', '.join(infos[d].ltplibs)}), which "
                            "needs the test's own cleanup()" for n in by_dir.pop(d)})
            del infos[d]
        archives = [bdir / "lib" / "libltp.a"]
        for name in sorted({lib for i in infos.values() for lib in i.ltplibs}):
            _logged_make(make_command(tree, bdir, target, f"libs/{name}"), log, st, f"building LTP's lib{name}")
            archives += sorted((bdir / "libs" / name).glob("lib*.a"))
        for d, names in by_dir.items():
            try:  # -k: a test that does not compile is reported, the others run
                _logged_make([*make_command(tree, bdir, target, d), "-k", *(f"{n}.o" for n in names)], log, st,
                             f"compiling the tests in {d}")
            except UklError:
                unbuilt.update({n: f"did not compile (log: {log})" for n in names
                                if not (bdir / d / f"{n}.o").is_file()})
        objects = {}
        for t in tests:
            if t not in unbuilt:
                try:
                    objects[t] = localize(bdir / index[t].parent / f"{t}.o", t, work)
                except UklError as e:
                    unbuilt[t] = e.message
    ldlibs = list(dict.fromkeys(f for i in infos.values() for f in i.ldlibs))
    return Built(target, objects, archives, ldlibs, unbuilt)


def localize(obj: Path, test: str, work: Path) -> Path:
    """OBJ with main() renamed to symbol(TEST) and every other global it
    defines made local (named sections get the test's name too)."""
    defined = app._symbols(obj)[0]
    if "main" not in defined:
        raise UklError(f"{obj.name} defines no main(): {test} is not an LTP test program",
                       "name test programs (NAME.c with tst_test.h)")
    named = []
    for n in app.named_sections([obj]):
        named += [f"--rename-section={n}={n}_{symbol(test)}",
                  f"--redefine-sym=__start_{n}=__start_{n}_{symbol(test)}",
                  f"--redefine-sym=__stop_{n}=__stop_{n}_{symbol(test)}"]
    out = work / f"{test}.o"
    run(["objcopy", f"--redefine-sym=main={symbol(test)}", f"--keep-global-symbol={symbol(test)}", *named,
         obj, out], what=f"renaming main() of {test}")
    return out


def compile_dispatcher(target: str, tests: list[str], work: Path) -> Path:
    (work / "ltp-tests.h").write_text(tests_header(tests))
    out = work / "ltp-dispatch.o"
    run([*compiler(target), "-O2", "-Wall", "-I", work, "-c", DISPATCHER, "-o", out],
        what="compiling the LTP dispatcher")
    return out


def link_program(built: Built, tests: list[str], work: Path) -> Path:
    """The UKL object (base) or the static program (linux) with TESTS."""
    drv = compile_dispatcher(built.target, tests, work)
    objs = [drv, *(built.objects[t] for t in tests)]
    if built.target == "linux":
        exe = work / APP_NAME
        run([host_cc(), "-static", "-o", exe, *objs, *built.archives, *built.ldlibs, "-lpthread", "-lm"],
            what="linking the LTP program")
        return exe
    lc = libc.build()
    from ukltool.build import cc  # imported here: cc pulls in the compiler driver's modules
    archives = [*built.archives, *(cc.find_archive(f[2:], [], lc) for f in built.ldlibs)]
    obj = work / f"{APP_NAME}.ukl.o"
    app.link_ukl(objs, list(dict.fromkeys(archives)), obj, work, lc)
    return obj


def make_image(config: str, program: Path, outdir: Path) -> Path:
    """A bootable image (image.assemble) of CONFIG with PROGRAM in OUTDIR."""
    ukl = kernel.is_ukl(config)
    kimg = kernel.build(config, app=program if ukl else None)
    shutil.rmtree(outdir, ignore_errors=True)
    outdir.mkdir(parents=True)
    with tempfile.TemporaryDirectory(prefix="ukl-ltp-") as td:
        starter = Path(td) / APP_NAME
        if ukl:
            starter.write_bytes(image.UKL_MAGIC + APP_NAME.encode() + b"\n")
        else:
            shutil.copy(program, starter)
        image.assemble(outdir, kimg, config, APP_NAME, starter, ukl)
    return outdir


# ---------------------------------------------------------------- results

@dataclass
class Outcome:
    """One test under one configuration."""
    test: str
    config: str
    result: str                  # one of RESULTS
    passed: int = 0
    failed: int = 0
    broken: int = 0
    skipped: int = 0
    warnings: int = 0
    end: str = ""                # how it ended: "exit N", "signal N", "timeout S", or why it has no end
    seconds: float | None = None
    notes: list[str] = field(default_factory=list)  # its first TFAIL/TBROK/TWARN/TCONF lines


MARKER = re.compile(r"^ukl-ltp: (begin|end) (\S+)(?: (exit|signal|timeout) (\d+)(?: in (\d+(?:\.\d+)?)s)?)?\s*$")
SUMMARY = re.compile(r"^(passed|failed|broken|skipped|warnings)\s+(\d+)\s*$")
REPORT = re.compile(r"^\S+:\d+: (TFAIL|TBROK|TWARN|TCONF): (.*)$")
MAX_NOTES = 4
SOURCE_PATH = re.compile(r"^\S*?/(?=(?:testcases|lib|libs)/)")  # the tree's location, left out of notes


def summarize(counts: dict[str, int], how: str, code: int | None) -> str:
    """The test's one result: the worst of what it reported (module doc)."""
    if how != "exit" or code is None or code & ~(TFAIL_BIT | TBROK_BIT | TWARN_BIT | TCONF_BIT):
        return "TBROK"
    if counts.get("broken") or code & TBROK_BIT:
        return "TBROK"
    if counts.get("failed") or counts.get("warnings") or code & (TFAIL_BIT | TWARN_BIT):
        return "TFAIL"
    if counts.get("passed") or code == 0:
        return "TPASS"
    return "TCONF"


def outcome_of(test: str, config: str, lines: list[str], how: str, value: int | None,
               seconds: float | None) -> Outcome:
    """TEST's outcome from its output LINES and how it ended."""
    counts: dict[str, int] = {}
    notes: list[str] = []
    kernel_failure = False
    for line in lines:
        m = SUMMARY.match(line)
        if m:
            counts[m.group(1)] = int(m.group(2))
        r = REPORT.match(line)
        if r and len(notes) < MAX_NOTES:
            notes.append(SOURCE_PATH.sub("", line.strip())[:200])
        if logscan.is_failure(line) and not kernel_failure:
            kernel_failure = True
            notes.insert(0, "kernel: " + line.strip()[:200])
    # The kernel's failure during the test (a WARNING, an oops) breaks it, whatever it reported
    result = "TBROK" if kernel_failure else summarize(counts, how, value)
    end = f"{how} {value}" if value is not None else how
    return Outcome(test, config, result, counts.get("passed", 0), counts.get("failed", 0),
                   counts.get("broken", 0), counts.get("skipped", 0), counts.get("warnings", 0), end,
                   seconds, notes)


@dataclass
class Console:
    """What a boot's console says of its tests."""
    done: dict[str, Outcome]      # tests that ended
    unfinished: str | None        # the test that began and never ended
    unfinished_lines: list[str]


def parse_console(text: str, config: str) -> Console:
    done: dict[str, Outcome] = {}
    current: str | None = None
    lines: list[str] = []
    for raw in text.replace("\r\n", "\n").split("\n"):
        m = MARKER.match(raw.strip())
        if m and m.group(1) == "begin":
            current, lines = m.group(2), []
        elif m and m.group(1) == "end" and m.group(3) and current is not None and m.group(2) == current:
            secs = float(m.group(5)) if m.group(5) else None
            done[current] = outcome_of(current, config, lines, m.group(3), int(m.group(4)), secs)
            current, lines = None, []
        elif current is not None:
            lines.append(raw)
    return Console(done, current, lines)


def vm_end(res: vm.RunResult, timeout: float) -> str:
    """Why a boot ended before its tests did."""
    if res.failures:
        return "kernel failure: " + next((l.strip() for l in res.failures if l.strip()), "?")[:160]
    if res.timed_out:
        return f"the VM timed out after {timeout:.0f} s"
    return "the VM ended" + (f" (status {res.status})" if res.status is not None else " without a status")


# ---------------------------------------------------------------- running

@dataclass
class Image:
    config: str
    path: Path
    tests: list[str]


def run_batch(img: Image, tests: list[str], timeout: float, logdir: Path, tag: str) -> list[Outcome]:
    """Boot IMG for TESTS; a test that ends the VM is TBROK and the rest run
    in a further boot."""
    outcomes: list[Outcome] = []
    left = list(tests)
    boot = 0
    while left:
        boot += 1
        log = logdir / f"{tag}-{boot}.log"
        limit = BOOT_ALLOWANCE + timeout * len(left)
        with tempfile.TemporaryDirectory(prefix="ukl-ltp-args-") as td:
            args = initramfs.args_archive(["--timeout", f"{timeout:g}", *left], Path(td))
            # LTP's own timeouts, stretched further for a slow (debug) kernel
            slow = kernel.slowdown(img.config)
            res = vm.boot(vm.RunSpec(bzimage=img.path / "bzImage", initrds=[img.path / "initramfs.cpio", args],
                                     log=log, timeout=limit, smp=2, show=False, side_dir=logdir,
                                     append=[f"LTP_TIMEOUT_MUL={TCG_TIMEOUT_MUL * slow}"] if slow > 1 else []))
        con = parse_console(log.read_text(errors="replace"), img.config)
        outcomes += [con.done[t] for t in left if t in con.done]
        if con.unfinished is not None:
            o = outcome_of(con.unfinished, img.config, con.unfinished_lines, "no end", None, None)
            o.result, o.end = "TBROK", f"no end: {vm_end(res, limit)} (log: {log})"
            outcomes.append(o)
        started = set(con.done) | ({con.unfinished} if con.unfinished else set())
        rest = [t for t in left if t not in started]
        if len(rest) == len(left):  # not one test began: the image does not run
            why = vm_end(res, limit)
            outcomes += [Outcome(t, img.config, "TBROK", end=f"not run: {why} (log: {log})") for t in rest]
            rest = []
        left = rest
    return outcomes


def batches(tests: list[str], size: int) -> list[list[str]]:
    return [tests[i:i + size] for i in range(0, len(tests), size)]


def build_images(configs: list[str], tests: list[str], outdir: Path) -> tuple[list[Image], list[Outcome]]:
    """Images of every configuration, MAX_PER_IMAGE tests each; and a TBROK
    outcome for each test that did not build for a configuration."""
    tree = source_tree()
    index = test_index(tree)
    check_tests(tests, index, tree)
    images = []
    unbuilt: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="ukl-ltp-build-") as td:
        built: dict[str, Built] = {}
        for target in dict.fromkeys(target_of(c) for c in configs):
            built[target] = build_tests(tree, target, tests, index, Path(td) / target)
        for target, b in built.items():
            unbuilt += [Outcome(t, c, "TBROK", end=f"not built: {why}") for c in configs if target_of(c) == target
                        for t, why in b.unbuilt.items()]
            for n, part in enumerate(batches([t for t in tests if t in b.objects], MAX_PER_IMAGE)):
                work = Path(td) / f"{target}-link-{n}"
                work.mkdir(parents=True)
                with ui.step(f"linking {len(part)} LTP tests ({target})"):
                    program = link_program(b, part, work)
                for config in (c for c in configs if target_of(c) == target):
                    path = make_image(config, program, outdir / "images" / f"{config}-{n}")
                    images.append(Image(config, path, part))
    return images, unbuilt


def run_images(images: list[Image], batch: int, timeout: float, logdir: Path) -> list[Outcome]:
    """Every image's tests, BATCH per boot, two boots at a time."""
    logdir.mkdir(parents=True, exist_ok=True)
    jobs = [(img, part, f"{img.path.name}-{n}") for img in images for n, part in enumerate(batches(img.tests, batch))]
    outcomes: list[Outcome] = []
    total = sum(len(img.tests) for img in images)
    with ui.step(f"running {total} LTP tests in {len(jobs)} boots") as st, ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(run_batch, img, part, timeout, logdir, tag) for img, part, tag in jobs]
        for f in futures:
            got = f.result()
            outcomes += got
            st.update(f"{len(outcomes)}/{total}: " + ", ".join(f"{o.test} {o.result}" for o in got[-3:]))
    return outcomes


def run_all(configs: list[str], tests: list[str], outdir: Path, batch: int = DEFAULT_BATCH,
        timeout: float = DEFAULT_TIMEOUT) -> list[Outcome]:
    t0 = time.monotonic()
    images, outcomes = build_images(configs, tests, outdir)
    ui.info(f"built {len(images)} images in {time.monotonic() - t0:.0f} s")
    if outcomes:
        ui.warn(f"{len({o.test for o in outcomes})} tests did not build: they count as TBROK")
    outcomes += run_images(images, batch, timeout, outdir / "logs")
    order = {(c, t): i for i, (c, t) in enumerate((c, t) for c in configs for t in tests)}
    return sorted(outcomes, key=lambda o: order.get((o.config, o.test), len(order)))


# ---------------------------------------------------------------- divergences

@dataclass(frozen=True)
class Divergence:
    test: str
    configs: tuple[str, ...]   # where it differs from linux; "*": every UKL configuration
    kind: str                  # "model": a true difference of the UKL model; "bug": an open bug
    reason: str

    def covers(self, config: str) -> bool:
        return "*" in self.configs or config in self.configs


KINDS = ("model", "bug")


def load_divergences(path: Path = DIVERGENCES_FILE) -> list[Divergence]:
    try:
        data = tomllib.loads(path.read_text()) if path.is_file() else {}
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read {path}: {e}", "fix the file (TOML)") from None
    out = []
    for i, d in enumerate(data.get("divergence", [])):
        try:
            div = Divergence(str(d["test"]), tuple(str(c) for c in d["configs"]), str(d["kind"]), str(d["reason"]))
        except (KeyError, TypeError) as e:
            raise UklError(f"{path}: divergence {i + 1} lacks {e}", "give test, configs, kind and reason") from None
        if div.kind not in KINDS:
            raise UklError(f"{path}: divergence {i + 1} ({div.test}): kind {div.kind!r}",
                           f"kind is one of {', '.join(KINDS)}")
        out.append(div)
    return out


def explanation(test: str, config: str, divergences: Iterable[Divergence]) -> Divergence | None:
    return next((d for d in divergences if d.test == test and d.covers(config)), None)


def by_test(outcomes: list[Outcome]) -> dict[str, dict[str, Outcome]]:
    table: dict[str, dict[str, Outcome]] = {}
    for o in outcomes:
        table.setdefault(o.test, {})[o.config] = o
    return table


def divergent(outcomes: list[Outcome], baseline: str = "linux") -> list[Outcome]:
    """Outcomes of tests that pass under BASELINE but not under this configuration."""
    out = []
    for row in by_test(outcomes).values():
        base = row.get(baseline)
        if base is None or base.result != "TPASS":
            continue
        out += [o for c, o in row.items() if c != baseline and o.result != "TPASS"]
    return out


def unexplained(outcomes: list[Outcome], divergences: list[Divergence], baseline: str = "linux") -> list[Outcome]:
    return [o for o in divergent(outcomes, baseline) if explanation(o.test, o.config, divergences) is None]


# ---------------------------------------------------------------- reports

def save_json(outcomes: list[Outcome], path: Path) -> None:
    reporting.save_json(outcomes, path)


def load_json(path: Path) -> list[Outcome]:
    return reporting.load_json(path, lambda rows: [Outcome(**r) for r in rows], "LTP results",
                               "write them with --json")


def counts(outcomes: list[Outcome], config: str) -> dict[str, int]:
    return {r: sum(o.config == config and o.result == r for o in outcomes) for r in RESULTS}


@dataclass(frozen=True)
class Gap:
    tests: tuple[str, ...]
    reason: str


def load_gaps(path: Path = ENVIRONMENT_FILE) -> list[Gap]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read {path}: {e}", "fix the file (TOML)") from None
    try:
        return [Gap(tuple(str(t) for t in g["tests"]), str(g["reason"])) for g in data.get("gap", [])]
    except (KeyError, TypeError) as e:
        raise UklError(f"{path}: a gap lacks {e}", "give tests and reason") from None


def gap_lines(outcomes: list[Outcome], baseline: str, gaps: list[Gap]) -> list[str]:
    """Why each test that broke under BASELINE broke, by GAPS."""
    broken = [o.test for o in outcomes if o.config == baseline and o.result == "TBROK"]
    if not broken:
        return []
    lines = ["", f"## Why tests break under {baseline} too", "",
             f"What this setup lacks ({ENVIRONMENT_FILE.relative_to(REPO)}), not a difference of UKL:", ""]
    for g in gaps:
        hit = [t for t in g.tests if t in broken]
        if hit:
            lines.append(f"- {', '.join(hit)}: {g.reason}")
    known = {t for g in gaps for t in g.tests}
    unknown = [t for t in broken if t not in known]
    if unknown:
        lines.append(f"- {', '.join(unknown)}: no reason recorded yet.")
    return lines


def markdown(outcomes: list[Outcome], configs: list[str], divergences: list[Divergence], command: str) -> str:
    src = load_source()
    lines = [
        "# LTP's system-call tests as UKL applications", "",
        reporting.generated_by(command), "",
        f"LTP commit {src.short} ({src.repository}); each test is linked with the others behind a "
        "dispatcher into one program, run as its own process (see tools/ukltool/apps/ltp.py). A test's result is "
        "the worst it reported: TBROK (or killed, timed out) over TFAIL (or a TWARN) over TPASS over TCONF.", "",
        "| configuration | " + " | ".join(RESULTS) + " |", "|---|" + "---|" * len(RESULTS),
    ]
    for c in configs:
        n = counts(outcomes, c)
        lines.append(f"| {c} | " + " | ".join(str(n[r]) for r in RESULTS) + " |")
    lines += ["", "| test | " + " | ".join(configs) + " | divergence |", "|---|" + "---|" * (len(configs) + 1)]
    for test, row in by_test(outcomes).items():
        why = []
        for c in configs[1:]:
            o = row.get(c)
            base = row.get(configs[0])
            if o and base and o.result != base.result:
                d = explanation(test, c, divergences)
                why.append(f"{c}: " + (f"{d.kind}: {d.reason}" if d else "not yet explained"))
        lines.append(f"| {test} | " + " | ".join(row[c].result if c in row else "-" for c in configs)
                     + f" | {'; '.join(why)} |")
    lines += gap_lines(outcomes, configs[0], load_gaps())
    return "\n".join(lines) + "\n"
