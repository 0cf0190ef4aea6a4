"""Pinned sources: install, download, verify, unpack into the cache.

One scheme for every source ukl builds: a pin names a version and the
sha256 of what is downloaded for it, and check_sha256 verifies it. Where
the pinned version of a Debian package is no longer served, the newest one
is used with a warning (it has no recorded checksum: apt authenticated it).

- the kernel and glibc: sources.lock pins the Debian packages that ship
  their tarballs (linux-source-6.1, glibc-source) and the tarballs'
  checksums (ensure_package, verify);
- applications: apps/NAME/recipe.toml pins a Debian source package and its
  .dsc's checksum, and dpkg-source checks the tarballs against the .dsc
  (debian_source);
- LTP: tests/ltp/source.toml pins a commit and its `git archive`'s checksum
  (apps/ltp.py).

The kernel tree is unpacked once into a git repository whose first commit,
tagged `pristine`, is the untouched tarball; kernel.py applies our patch
series on top of it."""

from __future__ import annotations

import hashlib
import os
import shutil
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from ukltool.util import lock, ui
from ukltool.util.errors import UklError
from ukltool.util.paths import LOCK_FILE, cache_dir
from ukltool.util.proc import capture, git, need_tool, run


@dataclass(frozen=True)
class Pin:
    name: str
    package: str
    version: str
    tarball: Path
    sha256: str


@dataclass(frozen=True)
class Source:
    pin: Pin
    version: str  # the version actually used
    tarball: Path


def load_lock(path: Path = LOCK_FILE) -> dict[str, Pin]:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise UklError(f"cannot read lock file {path}: {e}") from None
    pins = {}
    for name, d in data.items():
        try:
            pins[name] = Pin(name, d["package"], d["version"], Path(d["tarball"]), d["sha256"])
        except KeyError as e:
            raise UklError(f"{path}: section [{name}] lacks key {e}") from None
    return pins


def installed_version(package: str) -> str | None:
    res = capture(["dpkg-query", "-W", "-f=${Status} ${Version}", package])
    if res.returncode != 0 or not res.stdout.startswith("install ok installed"):
        return None
    return res.stdout.split()[-1]


def _apt_install(spec: str) -> bool:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    res = capture(["apt-get", "install", "-y", "-q", "--allow-downgrades", spec], env=env)
    return res.returncode == 0


def ensure_package(pin: Pin) -> Source:
    """Install the pinned version if served, else the newest one (with a warning)."""
    have = installed_version(pin.package)
    if have != pin.version:
        if os.geteuid() != 0:
            raise UklError(f"{pin.package} {pin.version} is not installed (have: {have or 'none'})",
                           f"run as root: apt-get install {pin.package}={pin.version}")
        with ui.step(f"installing {pin.package}"):
            if not _apt_install(f"{pin.package}={pin.version}"):
                run(["apt-get", "update", "-q"], what="apt-get update")
                if not _apt_install(f"{pin.package}={pin.version}") and not _apt_install(pin.package):
                    raise UklError(f"cannot install {pin.package} from Debian's archive",
                                   "check the apt sources and network access to Debian's package servers")
        have = installed_version(pin.package)
    if have != pin.version:
        ui.warn(f"{pin.package} {pin.version} (pinned in sources.lock) is not served any more; "
                f"using {have} instead. Update sources.lock once it is verified.")
    if not pin.tarball.is_file():
        raise UklError(f"{pin.package} is installed but {pin.tarball} is missing",
                       f"reinstall it: apt-get install --reinstall {pin.package}")
    return Source(pin, have or "?", pin.tarball)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: Path, expected: str, pinned_in: str, hint: str) -> str:
    """PATH's sha256, which must be EXPECTED (pinned in PINNED_IN); a
    mismatch is an error with HINT."""
    got = sha256_file(path)
    if got != expected:
        raise UklError(f"checksum mismatch for {path}: expected {expected} ({pinned_in}), got {got}", hint)
    return got


def verify(src: Source) -> None:
    if src.version != src.pin.version:
        return  # no recorded checksum for an unpinned version; ensure_package warned
    check_sha256(src.tarball, src.pin.sha256, LOCK_FILE.name,
                 f"reinstall the package: apt-get install --reinstall {src.pin.package}")


def upstream_version(version: str) -> str:
    """A Debian version without its epoch (as in the files' names)."""
    return version.split(":", 1)[-1]


def debian_source(package: str, version: str, dsc_sha256: str, pinned_in: str, downloads: Path) -> Path:
    """The .dsc of Debian's source package PACKAGE at VERSION, downloaded
    once into DOWNLOADS with apt-get source and checked against DSC_SHA256
    (pinned in PINNED_IN); where that version is no longer served, the
    newest one, with a warning. dpkg-source checks the tarballs against the
    .dsc when it unpacks them."""
    need_tool("apt-get", "apt")
    downloads.mkdir(parents=True, exist_ok=True)
    dsc = downloads / f"{package}_{upstream_version(version)}.dsc"
    if not dsc.is_file():
        with ui.step(f"downloading Debian's source package {package} {version}"):
            try:
                run(["apt-get", "source", "--download-only", "-q", f"{package}={version}"], cwd=downloads,
                    what=f"apt-get source {package}={version}")
            except UklError:
                return _newest_source(package, version, pinned_in, downloads)
    check_sha256(dsc, dsc_sha256, pinned_in,
                 f"delete {dsc} to download it again, or update {pinned_in} after checking the source")
    return dsc


def _newest_source(package: str, version: str, pinned_in: str, downloads: Path) -> Path:
    """The newest version Debian serves, when the pinned one is gone (as
    ensure_package does for sources.lock): apt has authenticated it, but it
    is not the version the pin was checked with."""
    before = set(downloads.glob(f"{package}_*.dsc"))
    try:
        run(["apt-get", "source", "--download-only", "-q", package], cwd=downloads,
            what=f"apt-get source {package}")
    except UklError as e:
        raise UklError(f"{e.message}\n(is a deb-src entry configured?)",
                       "`make setup` adds the deb-src entry for Debian's source packages") from None
    new = sorted(set(downloads.glob(f"{package}_*.dsc")) - before) or sorted(before)
    if not new:
        raise UklError(f"apt-get source {package} left no .dsc in {downloads}", "check the apt sources")
    ui.warn(f"{package} {version} (pinned in {pinned_in}) is not served any more; "
            f"building {new[-1].name} instead: update the version and checksum in {pinned_in}")
    return new[-1]


GIT_ID = {"GIT_AUTHOR_NAME": "ukl", "GIT_AUTHOR_EMAIL": "ukl@localhost",
          "GIT_COMMITTER_NAME": "ukl", "GIT_COMMITTER_EMAIL": "ukl@localhost",
          "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}


def extract_top_dir(tarball: Path, dest: Path, strict: bool = False) -> None:
    """Extract the tarball's single top directory's contents into DEST
    (tar's safe filter; STRICT: the data filter, which also refuses links
    that leave DEST and keeps no owner or special file), showing progress."""
    with ui.step(f"unpacking {tarball.name}") as st, tarfile.open(tarball) as tf:
        for i, member in enumerate(tf):
            parts = Path(member.name).parts
            if len(parts) < 2:
                continue
            member.name = str(Path(*parts[1:]))
            if member.islnk():   # a hard link names its target from the archive's top too
                target = Path(member.linkname).parts
                member.linkname = str(Path(*target[1:])) if len(target) > 1 else member.linkname
            try:
                tf.extract(member, dest, filter="data" if strict else "tar")
            except tarfile.FilterError as e:
                raise UklError(f"{tarball}: {member.name}: {e}", "the tarball is not a plain source tree: "
                               "check where it came from") from None
            if i % 2000 == 0:
                st.update(f"{i} files: {member.name}")


def unpack_git(src: Source, dest: Path) -> Path:
    """Unpack the tarball's single top directory into `dest` as a git repo
    with the pristine tree committed and tagged `pristine`. Idempotent; a
    half-finished unpack is never left at `dest`."""
    marker = dest / ".git" / "ukl-pristine-sha256"
    if marker.is_file():
        return dest
    # Two first runs at once (a build and a test run) would unpack into the
    # same .partial directory and break each other's git add.
    with lock.held(f"unpack-{dest.name}", f"the unpacking of {src.tarball.name}"):
        if marker.is_file():
            return dest
        return _unpack_git(src, dest)


def _unpack_git(src: Source, dest: Path) -> Path:
    tmp = dest.with_name(dest.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    extract_top_dir(src.tarball, tmp)
    with ui.step("recording the pristine tree in git"):
        env = dict(os.environ, **GIT_ID)
        git(tmp, "init", "-q", "-b", "ukl")
        git(tmp, "config", "core.autocrlf", "false")
        git(tmp, "config", "gc.auto", "0")
        # Trees like Linux carry their own .gitignore files; force-add everything.
        git(tmp, "add", "-A", "-f", ".")
        git(tmp, "commit", "-q", "-m", f"pristine {src.pin.package} {src.version}", env=env)
        git(tmp, "tag", "pristine")
    (tmp / ".git" / "ukl-pristine-sha256").write_text(sha256_file(src.tarball) + "\n")
    shutil.rmtree(dest, ignore_errors=True)
    tmp.rename(dest)
    return dest


def _tree(name: str) -> tuple[Source, Path]:
    src = ensure_package(load_lock()[name])
    tree = cache_dir() / "src" / f"{name}-{src.version}"
    if not (tree / ".git" / "ukl-pristine-sha256").is_file():
        verify(src)
    return src, unpack_git(src, tree)


def linux_tree() -> tuple[Source, Path]:
    return _tree("linux")


def glibc_tree() -> tuple[Source, Path]:
    return _tree("glibc")
