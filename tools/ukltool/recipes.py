"""Application recipes: apps/NAME/recipe.toml says which Debian source
package to build (pinned and verified), how, which program is the
application, what goes into its image, how it is started and how it is
smoke-tested. `ukl build NAME` fetches the source with `apt-get source`,
builds it unmodified with ukl-cc, and writes an ordinary build result."""

from __future__ import annotations

import hashlib
import shutil
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ukltool import lock, project, sources, ui
from ukltool.errors import UklError
from ukltool.paths import REPO, cache_dir
from ukltool.proc import need_tool, run

APPS_DIR = REPO / "apps"


@dataclass
class Source:
    package: str          # Debian source package
    version: str          # pinned version
    dsc_sha256: str       # of the .dsc, which lists the tarballs' checksums
    debian_patches: bool = False  # False: upstream's code as in Debian's orig tarball


@dataclass
class Smoke:
    sh: str                         # a shell script run in the guest (busybox userspace)
    expect: list[str]               # lines it must print
    timeout: float = 300.0


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


def names() -> list[str]:
    return sorted(p.parent.name for p in APPS_DIR.glob("*/recipe.toml"))


def _take(d: dict[str, Any], key: str, kind: type, where: str, default: Any = None) -> Any:
    if key not in d:
        if default is None:
            raise UklError(f"{where} lacks '{key}'", "see apps/README.md for the recipe format")
        return default
    v = d.pop(key)
    if not isinstance(v, kind) or (isinstance(v, list) and not all(isinstance(x, (str, list, int)) for x in v)):
        raise UklError(f"{where}: '{key}' must be a {kind.__name__}", "see apps/README.md for the recipe format")
    return v


def _done(d: dict[str, Any], where: str) -> None:
    if d:
        raise UklError(f"{where}: unknown key(s) {', '.join(sorted(d))}", "see apps/README.md for the recipe format")


def load(name: str) -> Recipe:
    path = APPS_DIR / name / "recipe.toml"
    if not path.is_file():
        raise UklError(f"no recipe named '{name}'", "recipes: " + ", ".join(names()))
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as e:
        raise UklError(f"{path}: {e}", "fix the TOML syntax") from None
    where = str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)
    src = _take(data, "source", dict, where)
    source = Source(_take(src, "package", str, f"{where} [source]"), _take(src, "version", str, f"{where} [source]"),
                    _take(src, "dsc_sha256", str, f"{where} [source]"),
                    _take(src, "debian_patches", bool, f"{where} [source]", False))
    _done(src, f"{where} [source]")
    b = _take(data, "build", dict, where)
    w = f"{where} [build]"
    opts = project.Options(system=_take(b, "system", str, w, "auto"),
                           configure_args=_take(b, "configure_args", list, w, []),
                           make_args=_take(b, "make_args", list, w, []),
                           make_targets=_take(b, "make_targets", list, w, []),
                           program=_take(b, "program", str, w), subdir=_take(b, "subdir", str, w, ""))
    host_packages = _take(b, "host_packages", list, w, [])
    _done(b, w)
    img = _take(data, "image", dict, where, {})
    w = f"{where} [image]"
    files = []
    for item in _take(img, "files", list, w, []):
        if not (isinstance(item, list) and len(item) == 2 and str(item[1]).startswith("/")):
            raise UklError(f"{w}: files entries are [SOURCE, /DEST]", "see apps/README.md")
        src_file = APPS_DIR / name / item[0]
        if not src_file.is_file():
            raise UklError(f"{w}: {src_file} does not exist", "add it to the recipe's directory")
        files.append((src_file, item[1]))
    args = [str(a) for a in _take(img, "args", list, w, [])]
    forwards = [(int(f[0]), int(f[1])) for f in _take(img, "forward", list, w, [])]
    _done(img, w)
    smoke = None
    if "smoke" in data:
        s = _take(data, "smoke", dict, where)
        w = f"{where} [smoke]"
        smoke = Smoke(_take(s, "sh", str, w), [str(x) for x in _take(s, "expect", list, w)],
                      float(_take(s, "timeout", int, w, 300)))
        _done(s, w)
    description = _take(data, "description", str, where)
    _done(data, where)
    return Recipe(name, description, source, opts, [str(p) for p in host_packages], files, args,
                  forwards, smoke)


def _upstream_version(version: str) -> str:
    return version.split(":", 1)[-1]


def fetch(r: Recipe) -> Path:
    """The recipe's source tree, unpacked once in the cache from Debian's
    source package (downloaded with apt-get source and checked against the
    pinned .dsc checksum; dpkg-source checks the tarballs against the .dsc)."""
    s = r.source
    tree = cache_dir() / "apps" / "src" / f"{s.package}-{_upstream_version(s.version)}" \
        f"{'' if s.debian_patches else '-upstream'}"
    if (tree / ".ukl-unpacked").is_file():
        return tree
    for tool, pkg in (("apt-get", "apt"), ("dpkg-source", "dpkg-dev")):
        need_tool(tool, pkg)
    with lock.held(f"source-{s.package}", f"the source of {s.package}"):
        if (tree / ".ukl-unpacked").is_file():
            return tree
        dl = cache_dir() / "apps" / "downloads"
        dl.mkdir(parents=True, exist_ok=True)
        dsc = dl / f"{s.package}_{_upstream_version(s.version)}.dsc"
        pinned = True
        if not dsc.is_file():
            with ui.step(f"downloading Debian's source package {s.package} {s.version}"):
                try:
                    run(["apt-get", "source", "--download-only", "-q", f"{s.package}={s.version}"], cwd=dl,
                        what=f"apt-get source {s.package}={s.version}")
                except UklError:
                    pinned = False
            if not pinned:
                dsc = _newest(r, dl)
        got = hashlib.sha256(dsc.read_bytes()).hexdigest()
        if pinned and got != s.dsc_sha256:
            raise UklError(f"{dsc} has sha256 {got}, apps/{r.name}/recipe.toml pins {s.dsc_sha256}",
                           f"delete {dsc} to download it again, or update the recipe after checking the source")
        tmp = tree.with_name(tree.name + ".partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.parent.mkdir(parents=True, exist_ok=True)
        with ui.step(f"unpacking {dsc.name}"):
            run(["dpkg-source", "-x", *([] if s.debian_patches else ["--skip-patches"]), dsc, tmp],
                what=f"dpkg-source -x {dsc.name}")
        (tmp / ".ukl-unpacked").write_text(f"{dsc.name}\n")
        shutil.rmtree(tree, ignore_errors=True)
        tmp.rename(tree)
    return tree


def _newest(r: Recipe, dl: Path) -> Path:
    """The newest version Debian serves, when the pinned one is gone (as
    sources.lock does for the kernel and glibc): apt has authenticated it,
    but it is not the version the recipe was checked with."""
    s = r.source
    before = set(dl.glob(f"{s.package}_*.dsc"))
    try:
        run(["apt-get", "source", "--download-only", "-q", s.package], cwd=dl,
            what=f"apt-get source {s.package}")
    except UklError as e:
        raise UklError(f"{e.message}\n(is a deb-src entry configured?)",
                       "`make setup` adds the deb-src entry for Debian's source packages") from None
    new = sorted(set(dl.glob(f"{s.package}_*.dsc")) - before) or sorted(before)
    if not new:
        raise UklError(f"apt-get source {s.package} left no .dsc in {dl}", "check the apt sources")
    ui.warn(f"{s.package} {s.version} (pinned in apps/{r.name}/recipe.toml) is not served any more; "
            f"building {new[-1].name} instead: update the recipe's version and dsc_sha256")
    return new[-1]


def check_host_packages(r: Recipe) -> None:
    missing = [p for p in r.host_packages if sources.installed_version(p) is None]
    if missing:
        raise UklError(f"building {r.name} needs the host package(s) {', '.join(missing)}",
                       f"apt-get install {' '.join(missing)} (`make setup` installs what the recipes need)")
