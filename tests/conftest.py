"""Shared fixtures: the ukl CLI and build results reused across test cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
UKL = REPO / "ukl"
sys.path.insert(0, str(REPO / "tools"))

from ukltool.linux import kernel  # noqa: E402

# The configurations under test: every one in kernel/configs, so that a new
# configuration gets its coverage without editing the tests.
# ALL_CONFIGS: the baseline and every UKL configuration, debug kernels
# included (base-model, libc, userspace and fault tests run on these);
# UKL_CONFIGS: those that link the application into the kernel;
# BASIC_CONFIGS: without debug kernels, for the slower application-level
# tests (projects, TCP, files), where a debug kernel adds time, not cases.
# Profiles (CONFIG+OPTION, kernel/options.toml) join ALL_CONFIGS and
# UKL_CONFIGS, sharing their configuration's kernel build; BASIC_CONFIGS
# keep one image per kernel.
#
# Two tiers (docs/dev/testing.md). `make test-all` (UKL_TEST_TIER=all) runs
# the full matrix: the base-model, C library, fault and userspace tests
# under each option set on the normal kernel and under the combination on
# the debug kernel. `make test` (the default) runs them on the baseline,
# on plain `base`, and on the debug kernel with every option at once
# (base-debug+ret+byp): every configuration and every option's code at
# least once, under lockdep, KASAN and the entry checks; the option sets
# one by one on the normal kernel, and the plain debug kernel, are
# test-all's. Tests marked `test_all` run in that tier only.
#
# Configurations marked `# ukl-tests: measurement` (linux-mitigated,
# base-mitigated: the speculation mitigations of a distribution, for `ukl
# bench`) are left out: two more kernel builds and every boot again would
# not fit CI's time. What they change is covered here all the same:
# base-debug builds the same mitigations and boots on the same emulated
# Intel CPU, so their entry and exit code runs under every debug test, and
# linux-mitigated is stock Linux. UKL_TEST_MEASUREMENT_CONFIGS=1 includes
# the UKL ones (base-mitigated; the tests know one stock kernel, linux).
TIERS = ("test", "all")
TIER = os.environ.get("UKL_TEST_TIER", "test")
if TIER not in TIERS:
    raise pytest.UsageError(f"UKL_TEST_TIER={TIER!r}: use one of {', '.join(TIERS)} (see docs/dev/testing.md)")
FULL = TIER == "all"
OPTION_SETS = ["byp", "ret", "ret+byp"]
CONFIGS = [c for c in kernel.config_names()
           if not kernel.measurement_only(c)
           or (os.environ.get("UKL_TEST_MEASUREMENT_CONFIGS") == "1" and kernel.is_ukl(c))]
BASELINE = "linux"
PROFILES = [f"{c}+{o}" for c in CONFIGS if kernel.is_ukl(c)
            for o in (OPTION_SETS[-1:] if c.endswith("-debug") else OPTION_SETS)]
ALL_CONFIGS = CONFIGS + PROFILES
if not FULL:
    ALL_CONFIGS = [c for c in ALL_CONFIGS
                   if "+" not in c and not c.endswith("-debug")  # linux, base
                   or "+" in c and c.split("+")[0].endswith("-debug")]  # base-debug+ret+byp
UKL_CONFIGS = [c for c in ALL_CONFIGS if kernel.is_ukl(c)]
DEBUG_CONFIGS = [c for c in ALL_CONFIGS if c.split("+")[0].endswith("-debug")]
BASIC_CONFIGS = [c for c in CONFIGS if c not in DEBUG_CONFIGS and not c.endswith("-debug")]
assert BASELINE in ALL_CONFIGS and BASELINE not in UKL_CONFIGS and DEBUG_CONFIGS


def pytest_report_header(config) -> list[str]:
    other = "make test-all: UKL_TEST_TIER=all" if not FULL else "the full matrix"
    return [f"ukl tier: {TIER} ({other}); configurations: {', '.join(ALL_CONFIGS)}"]


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "test_all: runs only in `make test-all` (UKL_TEST_TIER=all)")


def pytest_collection_modifyitems(config, items) -> None:
    """Leave test_all tests out of `make test`, counted as deselected."""
    if FULL:
        return
    dropped = [i for i in items if i.get_closest_marker("test_all")]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = [i for i in items if not i.get_closest_marker("test_all")]


def ukl(*args: str, timeout: float = 3600) -> subprocess.CompletedProcess:
    """Run ./ukl, capturing output (stderr folded in)."""
    return subprocess.run([str(UKL), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def build(src: Path | list[Path], config: str, out: Path, *extra: str) -> Path:
    srcs = src if isinstance(src, list) else [src]
    res = ukl("build", *srcs, "--config", config, "-o", out, *extra)
    assert res.returncode == 0, res.stdout
    return out


def fake_image(tmp_path: Path) -> Path:
    """A build result's files, enough for `ukl run`'s checks (a base
    image whose kernel and initramfs are empty): TMP_PATH/out."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "manifest.json").write_text(
        '{"config": "base", "app": "a", "vmlinux": "/nonexistent/vmlinux", "kernel_release": "r", '
        '"kernel_key": "k", "linux_version": "v", "schema": 2, "userspace": false, "args": [], "forwards": []}')
    (out / "bzImage").write_bytes(b"")
    (out / "initramfs.cpio").write_bytes(b"")
    return out


def vmlinux_symbols(image: Path, *names: str) -> dict[str, int]:
    """The addresses of NAMES in the vmlinux IMAGE was built with."""
    from ukltool.bench.bootbench import symbol_address
    from ukltool.build import image as image_mod
    vmlinux = image_mod.load(image).vmlinux_path()
    return {n: symbol_address(vmlinux, n) for n in names}


def ukl_bss_padding(image: Path) -> int:
    """The bytes from the page after the application's bss to the next
    2 MiB boundary in a UKL IMAGE's kernel, which boot neither clears nor
    keeps (kernel patch 0017)."""
    end = vmlinux_symbols(image, "__ukl_data_end")["__ukl_data_end"]
    return -(-end // (2 << 20)) * (2 << 20) - -(-end // 4096) * 4096


def assert_clean(log: Path) -> None:
    from ukltool.run import logscan
    bad = logscan.failure_lines(log.read_text(errors="replace"))
    assert not bad, f"kernel failure lines in {log}: {bad}"


@pytest.fixture(scope="session")
def outdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("images")


@pytest.fixture(scope="session")
def basics_linux(outdir) -> Path:
    return build(REPO / "tests" / "apps" / "basics.c", "linux", outdir / "basics-linux")
