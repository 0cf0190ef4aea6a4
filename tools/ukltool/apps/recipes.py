"""Application recipes: apps/NAME/recipe.toml says which Debian source
package to build (pinned and verified), how, which program is the
application, what goes into its image, how it is started and how it is
smoke-tested. `ukl build NAME` fetches the source with `apt-get source`,
builds it unmodified with ukl-cc, and writes an ordinary build result."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ukltool.build import image, project
from ukltool.linux import kernel
from ukltool.source import sources
from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import REPO, cache_dir
from ukltool.util.proc import need_tool, run

APPS_DIR = REPO / "apps"
# The recipe formats this ukl reads: every recipe.toml says which it is
# written in (`schema = 1`), so that a change to the format is an error
# naming the file, not a misread.
SCHEMA = 1
SCHEMAS = (1,)


@dataclass
class Tarball:
    """An upstream tarball from the shared sources (SHARED_DIR)."""
    file: str             # its path there (secrecy/secrecy-394ff72.tar.xz)
    sha256: str
    into: str = ""        # where its top directory's contents go in the tree ("": the top)


@dataclass
class Source:
    """Where a recipe's tree comes from: one of a Debian source package
    (package, version, dsc_sha256), upstream tarballs pinned by checksum
    (tarballs, with version naming the tree), or a directory of this
    repository (tree: a library the project carries)."""
    package: str = ""     # Debian source package
    version: str = ""     # pinned version
    dsc_sha256: str = ""  # of the .dsc, which lists the tarballs' checksums
    debian_patches: bool = False  # False: upstream's code as in Debian's orig tarball
    patches: list[Path] = field(default_factory=list)  # ours, applied in order after unpacking (-p1)
    tarballs: list[Tarball] = field(default_factory=list)
    tree: str = ""        # a directory of this repository, relative to its top

    @property
    def kind(self) -> str:
        return "tarballs" if self.tarballs else "tree" if self.tree else "debian"


@dataclass
class Smoke:
    sh: str                         # a shell script run in the guest (busybox userspace)
    expect: list[str]               # lines it must print
    timeout: float = 300.0


@dataclass
class Bench:
    """How `ukl bench app NAME` loads the application (guest/bench/appload.c)."""
    protocol: str                   # redis, memcache, http; or run (to completion)
    args: list[str]                 # the server's (or the run's) arguments
    port: int = 0
    comm: str = ""                  # the server's process name (its CPU time is measured)
    ops: list[str] = field(default_factory=lambda: ["get"])
    conns: list[int] = field(default_factory=lambda: [1])
    pipelines: list[int] = field(default_factory=lambda: [1])
    requests: int = 10000
    latency: Latency | None = None  # [bench.latency]: an open-loop load at each offered rate


@dataclass
class Latency:
    """Latency against offered load (`appload rate`): Poisson arrivals at
    each rate, in requests per second of guest time."""
    op: str
    conns: int
    requests: int                   # per rate
    rates: list[int]


BENCH_PROTOCOLS = ("redis", "memcache", "http", "run")


@dataclass
class NetLoad:
    """One run of a real load generator on the host."""
    name: str                       # the load ("c=30 P=16"); each operation the client reports is prefixed
    command: list[str]              # {host} and {port}: the guest's address and the server's port
    timeout: float = 300.0


@dataclass
class NetBench:
    """How `ukl bench app NAME --clients host` loads the server: real clients on
    the host, through a tap device in a private network namespace."""
    port: int
    probe: str                      # what the server answers once it is up
    args: list[str]                 # the server's arguments
    loads: list[NetLoad]


@dataclass
class Tests:
    """The application's own test suite, run on the host (`ukl apptest`)."""
    command: list[str]              # in the source tree; {port} is the forwarded port
    port: int                       # the server's port in the guest
    verdicts: dict[str, str]        # verdict -> regular expression of a test's result line
    finished: str                   # a line the suite prints when it ran to its end
    probe: str                      # what the server answers once it is up (PING)
    server_args: list[str] = field(default_factory=list)
    units: list[str] = field(default_factory=list)   # what CI runs; --all: everything
    unit_option: str = "--single"
    prepare: list[str] = field(default_factory=list)  # before --all, in a copy of the source tree (host tools)
    notes: str = ""                 # what the report should say about known failures


@dataclass
class Recipe:
    name: str
    description: str
    source: Source
    build: project.Options
    host_packages: list[str] = field(default_factory=list)  # Debian packages the build runs (tclsh, ...)
    files: list[tuple[Path, str]] = field(default_factory=list)
    args: list[str] = field(default_factory=list)             # default arguments of `ukl run`
    forwards: list[tuple[int, int]] = field(default_factory=list)
    smoke: Smoke | None = None
    depends: list[str] = field(default_factory=list)          # library recipes built and installed first
    bench: Bench | None = None
    tests: Tests | None = None
    netbench: NetBench | None = None
    extends: str = ""               # the recipe this one modifies (its patches, its name)
    specialize: list[tuple[str, str]] = field(default_factory=list)  # [specialize] options: (CONFIG_X, reason)
    nodes: int = 1                  # guests its default run needs (`ukl cluster --nodes`); 1: `ukl run`
    reads_etc: bool = False         # reads the image's /etc (users, hosts): not without an initramfs

    @property
    def needs_initramfs(self) -> bool:
        """Does the application read files only the initramfs holds (its
        own, or /etc), so that it cannot boot without one (--no-initramfs)?"""
        return bool(self.files) or self.reads_etc


# In configure and make arguments: {prefix} is where a library recipe
# installs, {prefix:NAME} where its dependency NAME is installed.
PLACEHOLDER = re.compile(r"\{prefix(?::([^}]*))?\}")


def names() -> list[str]:
    return sorted(p.parent.name for p in APPS_DIR.glob("*/recipe.toml"))


def _take(d: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in d:
        if default is None:
            raise UklError(f"{where} lacks '{key}'", "see apps/README.md for the recipe format")
        return default
    v = d.pop(key)
    if not isinstance(v, kind) or (isinstance(v, list) and not all(isinstance(x, (str, list, int, dict)) for x in v)):
        raise UklError(f"{where}: '{key}' must be a {kind.__name__}", "see apps/README.md for the recipe format")
    return v


def _latency(d: dict[str, Any], protocol: str, w: str) -> Latency:
    rates = d.pop("rates") if "rates" in d else _take(d, "rates", list, w)   # (the latter says it lacks)
    if not isinstance(rates, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in rates):
        raise UklError(f"{w}: rates must be a list of whole numbers of requests per second", "see apps/README.md")
    lat = Latency(_take(d, "op", str, w, "get"), _take(d, "conns", int, w, 4), _take(d, "requests", int, w, 4000),
                  rates)
    if isinstance(lat.conns, bool) or isinstance(lat.requests, bool):
        raise UklError(f"{w}: conns and requests are numbers", "see apps/README.md")
    _done(d, w)
    if protocol not in ("redis", "memcache"):
        raise UklError(f"{w}: latency against offered load needs fixed-size answers: protocol redis or memcache",
                       "remove [bench.latency] or measure this server with --clients host")
    if lat.op not in ("get", "set") or not 0 < lat.conns <= 64 or not 0 < lat.requests <= 1_000_000 or \
            not lat.rates or not all(0 < r <= 100_000_000 for r in lat.rates):
        raise UklError(f"{w}: op get or set, conns 1..64, requests 1..10^6, rates 1..10^8 (a non-empty list)",
                       "see apps/README.md")
    return lat


def _done(d: dict[str, Any], where: str) -> None:
    if d:
        raise UklError(f"{where}: unknown key(s) {', '.join(sorted(d))}", "see apps/README.md for the recipe format")


def _read(name: str) -> tuple[dict[str, Any], str]:
    """apps/NAME/recipe.toml as TOML, with the paths it names (image files,
    patches) made absolute, and where it is (for messages)."""
    path = APPS_DIR / name / "recipe.toml"
    if not path.is_file():
        raise UklError(f"no recipe named '{name}'", "recipes: " + ", ".join(names()))
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UklError(f"{path}: {e}", "fix the TOML syntax") from None
    where = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    _schema(data, where)
    src, img = data.get("source"), data.get("image")
    if isinstance(src, dict) and isinstance(src.get("patches"), list):
        if not all(isinstance(p, str) for p in src["patches"]):
            raise UklError(f"{where} [source]: patches are file names in the recipe's directory",
                           'e.g. patches = ["fix.patch"]')
        src["patches"] = [str(APPS_DIR / name / p) for p in src["patches"]]
    bld = data.get("build")
    if isinstance(bld, dict):
        # {recipe} in configure and make arguments: this recipe's directory
        # (a header shipped beside it, on the compiler's include path), as a
        # copy in the cache named by its content: the same path in every
        # checkout, so that the configure stamp does not change with it
        for key in ("configure_args", "make_args"):
            if isinstance(bld.get(key), list) and any(isinstance(x, str) and "{recipe}" in x for x in bld[key]):
                here = str(_recipe_copy(name))
                bld[key] = [x.replace("{recipe}", here) if isinstance(x, str) else x for x in bld[key]]
    if isinstance(img, dict) and isinstance(img.get("files"), list):
        img["files"] = [[str(APPS_DIR / name / f[0]), *f[1:]] if isinstance(f, list) and f and isinstance(f[0], str)
                        else f for f in img["files"]]
    return data, where


def _recipe_copy(name: str) -> Path:
    """apps/NAME's files, copied once into the cache under a name that is
    their content's hash."""
    src = APPS_DIR / name
    # recipe.toml's own arguments are in the configure stamp already: an
    # edit of the recipe (a smoke test) is not a new directory
    files = sorted(p for p in src.rglob("*") if p.is_file() and "__pycache__" not in p.parts
                   and p != src / "recipe.toml")
    h = hashlib.sha256()
    for f in files:
        h.update(f"{f.relative_to(src)}\0{f.stat().st_mode & 0o777:o}\0".encode() + f.read_bytes() + b"\0")
    dest = cache_dir() / "apps" / "recipes" / f"{name}-{h.hexdigest()[:12]}"
    if not dest.is_dir():
        tmp = dest.with_name(f".{dest.name}.{os.getpid()}")
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(src, tmp, ignore=shutil.ignore_patterns("__pycache__"))
        try:
            tmp.rename(dest)
        except OSError:  # another process made it first
            shutil.rmtree(tmp, ignore_errors=True)
            if not dest.is_dir():
                raise UklError(f"cannot copy apps/{name} to {dest}", f"remove {dest} and build again") from None
    return dest


def _schema(data: dict[str, Any], where: str) -> None:
    """Check (and take out) the recipe's `schema`: the format it is written in."""
    if "schema" not in data:
        raise UklError(f"{where} lacks 'schema', the version of the recipe format it is written in",
                       f"add `schema = {SCHEMA}` at its top (apps/README.md describes format {SCHEMA})")
    schema = data.pop("schema")
    if not isinstance(schema, int) or isinstance(schema, bool) or schema not in SCHEMAS:
        raise UklError(f"{where}: schema = {schema!r} is not a recipe format this ukl reads "
                       f"(it reads {', '.join(map(str, SCHEMAS))})",
                       f"write it in format {SCHEMA} (apps/README.md), or use the ukl it was written for")


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """OVER's keys replace BASE's; a top-level table ([source], [build],
    ...) present in both takes OVER's keys over BASE's. Anything deeper
    (inline tables, arrays) is replaced whole."""
    out = dict(base)
    for k, v in over.items():
        out[k] = {**base[k], **v} if isinstance(v, dict) and isinstance(base.get(k), dict) else v
    return out


def load(name: str) -> Recipe:
    data, where = _read(name)
    parent = ""
    if "extends" in data:
        parent = data.pop("extends")
        if not isinstance(parent, str) or parent == name:
            raise UklError(f"{where}: 'extends' names the recipe this one modifies", "e.g. extends = \"redis\"")
        base, base_where = _read(parent)
        if "extends" in base:
            raise UklError(f"{where}: extends {base_where}, which extends another recipe",
                           "extend the recipe at the root of the chain")
        tests = base.get("tests")
        if isinstance(tests, dict) and isinstance(tests.get("command"), list):
            # {recipe} in the parent's test command is the parent's directory
            tests["command"] = [x.replace("{recipe}", str(APPS_DIR / parent)) if isinstance(x, str) else x
                                for x in tests["command"]]
        data = _merge(base, data)
    source = _source(_take(data, "source", dict, where), f"{where} [source]")
    for patch in source.patches:
        if not patch.is_file():
            raise UklError(f"{where} [source]: the patch {patch} does not exist", "add it to the recipe's directory")
    b = _take(data, "build", dict, where)
    w = f"{where} [build]"
    library = _take(b, "library", bool, w, False)
    opts = project.Options(system=_take(b, "system", str, w, "auto"),
                           configure_args=_take(b, "configure_args", list, w, []),
                           make_args=_take(b, "make_args", list, w, []),
                           make_targets=_take(b, "make_targets", list, w, []),
                           program=None if library else _take(b, "program", str, w),
                           subdir=_take(b, "subdir", str, w, ""), library=library)
    host_packages = _take(b, "host_packages", list, w, [])
    depends = [str(d) for d in _take(b, "depends", list, w, [])]
    _done(b, w)
    for arg in [*opts.configure_args, *opts.make_args]:
        for m in PLACEHOLDER.finditer(arg):
            if m.group(1) is None and not library:
                raise UklError(f"{w}: '{arg}': {{prefix}} is for library recipes",
                               "name a dependency's prefix as {prefix:NAME}")
            if m.group(1) is not None and m.group(1) not in depends:
                raise UklError(f"{w}: '{arg}' names '{m.group(1)}', which is not in depends",
                               f"add it to depends, or use one of: {', '.join(depends) or 'none'}")
    img = _take(data, "image", dict, where, {})
    w = f"{where} [image]"
    files = []
    for item in _take(img, "files", list, w, []):
        if not (isinstance(item, list) and len(item) == 2 and str(item[1]).startswith("/")):
            raise UklError(f"{w}: files entries are [SOURCE, /DEST]", "see apps/README.md")
        src_file = Path(item[0])   # made absolute by _read()
        if not src_file.is_file():
            raise UklError(f"{w}: {src_file} does not exist", "add it to the recipe's directory")
        files.append((src_file, item[1]))
    args = [str(a) for a in _take(img, "args", list, w, [])]
    forwards = [(int(f[0]), int(f[1])) for f in _take(img, "forward", list, w, [])]
    nodes = _take(img, "nodes", int, w, 1)
    reads_etc = _take(img, "reads_etc", bool, w, False)
    _done(img, w)
    if isinstance(nodes, bool) or not 1 <= nodes <= 16:
        raise UklError(f"{w}: nodes = {nodes} is not 1 to 16 (the guests its default run needs)", "see apps/README.md")
    smoke = None
    if "smoke" in data:
        s = _take(data, "smoke", dict, where)
        w = f"{where} [smoke]"
        smoke = Smoke(_take(s, "sh", str, w), [str(x) for x in _take(s, "expect", list, w)],
                      float(_take(s, "timeout", int, w, 300)))
        _done(s, w)
    bench = None
    if "bench" in data:
        bd = _take(data, "bench", dict, where)
        w = f"{where} [bench]"
        bench = Bench(_take(bd, "protocol", str, w), [str(a) for a in _take(bd, "args", list, w, [])],
                      _take(bd, "port", int, w, 0), _take(bd, "comm", str, w, ""),
                      [str(o) for o in _take(bd, "ops", list, w, ["get"])],
                      [int(c) for c in _take(bd, "conns", list, w, [1])],
                      [int(p) for p in _take(bd, "pipelines", list, w, [1])], _take(bd, "requests", int, w, 10000))
        if "latency" in bd:
            bench.latency = _latency(_take(bd, "latency", dict, w), bench.protocol, f"{where} [bench.latency]")
        _done(bd, w)
        if bench.protocol not in BENCH_PROTOCOLS:
            raise UklError(f"{w}: protocol '{bench.protocol}' is not one of {', '.join(BENCH_PROTOCOLS)}",
                           "see apps/README.md")
        if bench.protocol != "run" and not (0 < bench.port < 65536 and bench.comm):
            raise UklError(f"{w}: a server needs a port and comm (its process name)", "see apps/README.md")
        if bench.requests <= 0 or not all(0 < c <= 64 for c in bench.conns) or \
                not all(0 < p <= 256 for p in bench.pipelines) or \
                not all(o in ("get", "set") for o in bench.ops):
            raise UklError(f"{w}: requests > 0, conns 1..64, pipelines 1..256, ops get or set",
                           "see apps/README.md")
    tests = None
    if "tests" in data:
        td = _take(data, "tests", dict, where)
        w = f"{where} [tests]"
        verdicts = _take(td, "verdicts", dict, w)
        tests = Tests([str(a) for a in _take(td, "command", list, w)], _take(td, "port", int, w),
                      {str(k): str(v) for k, v in verdicts.items()}, _take(td, "finished", str, w),
                      _take(td, "probe", str, w),
                      [str(a) for a in _take(td, "server_args", list, w, [])],
                      [str(u) for u in _take(td, "units", list, w, [])], _take(td, "unit_option", str, w, "--single"),
                      [str(a) for a in _take(td, "prepare", list, w, [])], _take(td, "notes", str, w, ""))
        _done(td, w)
        for v, pat in [*tests.verdicts.items(), ("finished", tests.finished)]:
            try:
                re.compile(pat)
            except re.error as e:
                raise UklError(f"{w}: '{v}' is not a regular expression: {e}", "fix the pattern") from None
    netbench = _netbench(_take(data, "netbench", dict, where), f"{where} [netbench]") if "netbench" in data else None
    special = _specialize(_take(data, "specialize", dict, where), f"{where} [specialize]") \
        if "specialize" in data else []
    description = _take(data, "description", str, where)
    _done(data, where)
    return Recipe(name, description, source, opts, [str(p) for p in host_packages], files, args,
                  forwards, smoke, depends, bench, tests, netbench, parent, special, nodes, reads_etc)


TARBALL_FILE = re.compile(r"[A-Za-z0-9._+-]+(/[A-Za-z0-9._+-]+)*")
SHA256 = re.compile(r"[0-9a-f]{64}")


def _source(src: dict[str, Any], w: str) -> Source:
    """[source]: a Debian source package, upstream tarballs, or a tree of
    this repository."""
    patches = [Path(str(x)) for x in _take(src, "patches", list, w, [])]
    kinds = [k for k in ("package", "tarballs", "tree") if k in src]
    if len(kinds) != 1:
        raise UklError(f"{w}: name one of package (Debian's source package), tarballs or tree"
                       + (f", not {' and '.join(kinds)}" if kinds else ""), "see apps/README.md")
    if "package" in src:
        source = Source(_take(src, "package", str, w), _take(src, "version", str, w), _take(src, "dsc_sha256", str, w),
                        _take(src, "debian_patches", bool, w, False), patches)
    elif "tarballs" in src:
        balls = []
        for i, t in enumerate(_take(src, "tarballs", list, w)):
            tw = f"{w} tarballs[{i}]"
            if not isinstance(t, dict):
                raise UklError(f"{tw}: a table {{ file = ..., sha256 = ..., into = ... }}", "see apps/README.md")
            ball = Tarball(_take(t, "file", str, tw), _take(t, "sha256", str, tw), _take(t, "into", str, tw, ""))
            _done(t, tw)
            if not TARBALL_FILE.fullmatch(ball.file) or ".." in ball.file.split("/"):
                raise UklError(f"{tw}: file '{ball.file}' is not a path inside the shared sources",
                               "e.g. file = \"secrecy/secrecy-394ff72.tar.xz\"")
            if not SHA256.fullmatch(ball.sha256):
                raise UklError(f"{tw}: sha256 is not 64 lowercase hex digits", f"sha256sum {Path(ball.file).name}")
            if ball.into and (Path(ball.into).is_absolute() or ".." in Path(ball.into).parts):
                raise UklError(f"{tw}: into '{ball.into}' is not a directory inside the tree",
                               "name it relative to the tree's top, e.g. into = \"include/external-lib/x\"")
            balls.append(ball)
        if not balls:
            raise UklError(f"{w}: tarballs is empty", "list at least one")
        source = Source(version=_take(src, "version", str, w), patches=patches, tarballs=balls)
    else:
        tree = _take(src, "tree", str, w)
        if Path(tree).is_absolute() or ".." in Path(tree).parts or not (REPO / tree).is_dir():
            raise UklError(f"{w}: tree '{tree}' is not a directory of this repository", "e.g. tree = \"guest/mpi\"")
        source = Source(patches=patches, tree=tree)
    _done(src, w)
    if source.version and not re.fullmatch(r"[A-Za-z0-9.:~+-]+", source.version):
        raise UklError(f"{w}: version '{source.version}' has characters a version does not", "e.g. 394ff72")
    return source


def _specialize(sd: dict[str, Any], w: str) -> list[tuple[str, str]]:
    """[specialize] options = [{ name = "CONFIG_X", reason = "..." }]: kernel
    options `ukl build --specialize` adds by hand, each with its reason."""
    out = []
    for i, item in enumerate(_take(sd, "options", list, w)):
        if not isinstance(item, dict):
            raise UklError(f"{w}: options[{i}] must be a table {{ name = \"CONFIG_X\", reason = \"...\" }}",
                           "see apps/README.md")
        iw = f"{w} options[{i}]"
        name, reason = _take(item, "name", str, iw), _take(item, "reason", str, iw)
        _done(item, iw)
        if not re.fullmatch(r"CONFIG_[A-Z0-9_]+", name):
            raise UklError(f"{iw}: '{name}' is not a kernel option name", "write it as Kconfig does, e.g. CONFIG_IPV6")
        if not reason.strip():
            raise UklError(f"{iw}: {name} needs a reason", "say why the application needs it")
        out.append((name, reason.strip()))
    _done(sd, w)
    return out


def _netbench(nd: dict[str, Any], w: str) -> NetBench:
    from ukltool.apps import clients
    port = _take(nd, "port", int, w)
    loads = []
    for i, ld in enumerate(_take(nd, "loads", list, w)):
        if not isinstance(ld, dict):
            raise UklError(f"{w}: loads are tables {{ name = ..., command = [...] }}", "see apps/README.md")
        lw = f"{w} loads[{i}]"
        load = NetLoad(_take(ld, "name", str, lw), [str(a) for a in _take(ld, "command", list, lw)],
                       float(_take(ld, "timeout", int, lw, 300)))
        _done(ld, lw)
        if not load.command or load.command[0] not in clients.PARSERS:
            raise UklError(f"{lw}: the command must start with one of {', '.join(clients.PARSERS)}",
                           "see apps/README.md")
        loads.append(load)
    nb = NetBench(port, _take(nd, "probe", str, w), [str(a) for a in _take(nd, "args", list, w, [])], loads)
    _done(nd, w)
    if not (0 < port < 65536 and loads):
        raise UklError(f"{w}: a port (1..65535) and at least one load are needed", "see apps/README.md")
    return nb


def shared_candidates(file: str) -> list[Path]:
    """Where a shared source tarball is looked for, in order: $UKL_SHARED_DIR,
    the shared/ directory beside this checkout, the download cache."""
    env = os.environ.get("UKL_SHARED_DIR")
    return [*([Path(env) / file] if env else []), REPO.parent / "shared" / file,
            cache_dir() / "apps" / "downloads" / Path(file).name]


def _shared_tarball(r: Recipe, ball: Tarball) -> Path:
    for p in shared_candidates(ball.file):
        if p.is_file():
            sources.check_sha256(p, ball.sha256, f"apps/{r.name}/recipe.toml",
                                 "the file is not the pinned source: fetch it again, or check and update the recipe")
            return p
    raise UklError(f"apps/{r.name}: the source tarball {ball.file} is missing (looked in "
                   f"{', '.join(str(p) for p in shared_candidates(ball.file))})",
                   "put it in one of those places, or set UKL_SHARED_DIR to the directory that holds it")


BUILD_DEBRIS = ("*.o", "*.a", "*.so", "__pycache__")   # never part of a tree copied from this repository


def _tree_files(tree: str) -> list[str]:
    """The source files under TREE (a directory of this repository): what
    git tracks or would track there (not what it ignores, such as objects
    built there by hand), or, outside a git checkout, every file but build
    debris."""
    top = REPO / tree
    if (REPO / ".git").exists():
        # safe.directory: root building in another user's checkout
        out = run(["git", "-c", f"safe.directory={REPO}", "-C", str(REPO), "ls-files", "-z", "--cached", "--others",
                   "--exclude-standard", "--", tree], what=f"listing {tree} (git ls-files)")
        files = sorted(f for f in out.split("\0") if f and (REPO / f).is_file())
    else:
        files = sorted(str(f.relative_to(REPO)) for f in top.rglob("*")
                       if f.is_file() and not any(f.match(d) or d in f.parts for d in BUILD_DEBRIS))
    if not files:
        raise UklError(f"{tree} has no source file", f"restore {tree} from the repository")
    return files


def _tree_hash(files: list[str]) -> str:
    h = hashlib.sha256()
    for f in files:
        path = REPO / f
        h.update(f"{f}\0{path.stat().st_mode & 0o777:o}\0".encode() + path.read_bytes() + b"\0")
    return h.hexdigest()[:12]


def _tarballs_key(balls: list[Tarball]) -> str:
    """The tarballs' pins: a new checksum or place is a new tree, even
    where the recipe's version stays."""
    return hashlib.sha256("".join(f"{b.file}\0{b.sha256}\0{b.into}\0" for b in balls).encode()).hexdigest()[:8]


def fetch(r: Recipe) -> Path:
    """The recipe's source tree, unpacked once in the cache: from Debian's
    source package (sources.debian_source: downloaded with apt-get source
    and checked against the pinned .dsc checksum; dpkg-source checks the
    tarballs against the .dsc), from upstream tarballs checked against
    their pinned checksums, or copied from this repository (named by its
    content, so that an edit is a new tree)."""
    s = r.source
    ours = hashlib.sha256(b"".join(p.read_bytes() for p in s.patches)).hexdigest()[:12] if s.patches else ""
    if s.kind == "debian":
        base = f"{s.package}-{sources.upstream_version(s.version)}{'' if s.debian_patches else '-upstream'}"
    elif s.kind == "tarballs":
        base = f"{r.name}-{s.version}-{_tarballs_key(s.tarballs)}"
    else:
        files = _tree_files(s.tree)
        base = f"{r.name}-{_tree_hash(files)}"
    tree = cache_dir() / "apps" / "src" / f"{base}{'-' + ours if ours else ''}"
    if (tree / ".ukl-unpacked").is_file():
        return tree
    needs = [("apt-get", "apt"), ("dpkg-source", "dpkg-dev")] if s.kind == "debian" else []
    for tool, pkg in (*needs, *((("patch", "patch"),) if s.patches else ())):
        need_tool(tool, pkg)
    with lock.held(f"source-{base}", f"the source of {r.name}"):
        if (tree / ".ukl-unpacked").is_file():
            return tree
        tmp = tree.with_name(tree.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        if s.kind == "debian":
            dsc = sources.debian_source(s.package, s.version, s.dsc_sha256, f"apps/{r.name}/recipe.toml",
                                        cache_dir() / "apps" / "downloads")
            what = dsc.name
            with ui.step(f"unpacking {dsc.name}"):
                run(["dpkg-source", "-x", *([] if s.debian_patches else ["--skip-patches"]), dsc, tmp],
                    what=f"dpkg-source -x {dsc.name}")
        elif s.kind == "tarballs":
            what = ", ".join(Path(b.file).name for b in s.tarballs)
            try:
                for ball in s.tarballs:
                    dest = tmp / ball.into
                    tmp.mkdir(exist_ok=True)
                    # never through a link an earlier tarball made
                    if not dest.resolve().is_relative_to(tmp.resolve()):
                        raise UklError(f"apps/{r.name}: into '{ball.into}' leads out of the tree (through a link "
                                       "an earlier tarball made)", "unpack it somewhere else")
                    dest.mkdir(parents=True, exist_ok=True)
                    sources.extract_top_dir(_shared_tarball(r, ball), dest, strict=True)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        else:
            what = s.tree
            for f in files:
                target = tmp / Path(f).relative_to(s.tree)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(REPO / f, target)
        for patch in s.patches:
            with ui.step(f"applying {patch.name}"):
                try:
                    run(["patch", "-p1", "--batch", "--forward", "--fuzz=0", "--no-backup-if-mismatch", "-i", patch],
                        cwd=tmp, what=f"applying {patch} (apps/{r.name}) to {what}")
                except UklError:
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
        (tmp / ".ukl-unpacked").write_text(f"{what}\n" + "".join(f"{p.name}\n" for p in s.patches))
        shutil.rmtree(tree, ignore_errors=True)
        tmp.rename(tree)
    return tree


def check_host_packages(r: Recipe) -> None:
    missing = [p for p in r.host_packages if sources.installed_version(p) is None]
    if missing:
        raise UklError(f"building {r.name} needs the host package(s) {', '.join(missing)}",
                       f"apt-get install {' '.join(missing)} (`make setup` installs what the recipes need)")


def options(r: Recipe, target: str) -> project.Options:
    """R's build options for TARGET (base or linux), with its dependencies
    built and installed first, each into a prefix kept in its own build
    directory, and the {prefix...} placeholders replaced."""
    return _options(r, target, [r.name])


def _options(r: Recipe, target: str, chain: list[str]) -> project.Options:
    prefixes: dict[str | None, str] = {}
    for dep in r.depends:
        if dep in chain:
            raise UklError(f"apps/{r.name}: the dependency '{dep}' depends on itself "
                           f"({' -> '.join([*chain, dep])})", "break the cycle in the recipes' depends")
        d = load(dep)
        if not d.build.library:
            raise UklError(f"apps/{r.name}: depends on '{dep}', which is not a library recipe",
                           f"set library = true in apps/{dep}/recipe.toml, or drop the dependency")
        check_host_packages(d)
        tree = fetch(d)
        project.build(tree, target, _options(d, target, [*chain, dep]))
        prefixes[dep] = str(install_prefix(tree, target))
    if r.build.library:
        prefixes[None] = str(install_prefix(fetch(r), target))

    def subst(arg: str) -> str:
        return PLACEHOLDER.sub(lambda m: prefixes[m.group(1)], arg)
    b = r.build
    return project.Options(b.system, [subst(a) for a in b.configure_args], [subst(a) for a in b.make_args],
                           list(b.make_targets), b.program, b.subdir, b.library)


def install_prefix(tree: Path, target: str) -> Path:
    """Where a library recipe built from TREE for TARGET installs."""
    return project.build_dir_for(tree, target) / "prefix"


def image_spec(r: Recipe, config: str, out: Path, files: list[tuple[Path, str]] | None = None,
               configure_args: list[str] | None = None, make_args: list[str] | None = None,
               overlays: list[Path] | None = None) -> image.BuildSpec:
    """The image build of R for CONFIG into OUT: its source fetched, its
    dependencies built, its files (and FILES) in the image (no busybox:
    its smoke test runs with the test layer, image.test_layer()); extra
    configure and make arguments after the recipe's."""
    check_host_packages(r)
    tree = fetch(r)
    opts = options(r, "base" if kernel.is_ukl(config) else "linux")
    opts.configure_args += configure_args or []
    opts.make_args += make_args or []
    return image.BuildSpec([tree], config, out, opts.program, userspace=False, files=[*r.files, *(files or [])],
                           overlays=overlays or [], project_opts=opts, args=r.args, forwards=r.forwards,
                           recipe=r.name)
