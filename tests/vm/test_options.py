"""UKL options chosen at boot (kernel/options.toml, profiles CONFIG+OPTION,
`ukl run --opts`): the application sees the options its profile names,
sets, clears and inherits them per thread, and an ordinary process gets
ENOSYS; under `byp`, work made pending by a bypassed system call (a
signal) is done before the call returns, blocked calls are interrupted
and restarted as usual, and two threads make many calls, with a clean
log on the debug kernel. Bad profiles and options are clear errors. That
`byp` really bypasses is measured: getppid costs fewer instructions."""

from __future__ import annotations

import json

import pytest

from conftest import BASELINE, DEBUG_CONFIGS, REPO, UKL_CONFIGS, assert_clean, build, ukl

SRC = REPO / "tests" / "apps" / "opts.c"
BYP = [c for c in UKL_CONFIGS if "+byp" in c]
PLAIN = [c for c in UKL_CONFIGS if "+" not in c]
BITS = {"byp": 1, "ret": 2}  # UKL_OPT_* in runtime/ukl.h


def start_opts(profile: str) -> int:
    return sum(BITS[o] for o in profile.split("+")[1:])


@pytest.fixture(scope="module")
def images(outdir):
    """One image per profile, shared by the tests that boot it."""
    built: dict[str, object] = {}

    def get(config: str):
        if config not in built:
            built[config] = build(SRC, config, outdir / f"opts-{config}")
        return built[config]
    return get


def app_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if not line.startswith(("ukl:", "ukl-init:"))]


@pytest.mark.parametrize("config", BYP)
def test_threads_set_clear_and_inherit_their_options(images, config):
    image = images(config)
    res = ukl("run", image, "--timeout", "300", "--", "calls")
    assert res.returncode == 0, res.stdout
    s = start_opts(config)
    on, off = s | BITS["byp"], s & ~BITS["byp"]
    assert app_lines(res.stdout) == [
        f"start: {s}", f"set returns old: {s}", f"after set: {on}", "unknown bit: Invalid argument",
        f"after unknown: {on}", f"thread inherits: {on}", f"thread cleared: {off}", f"main keeps: {on}",
        f"child inherits: {on}", f"clear returns old: {on}", f"after clear: {off}"], res.stdout
    assert_clean(image / "console.log")


@pytest.mark.parametrize("config", BYP)
def test_work_made_pending_by_a_bypassed_call_is_done_on_its_return(images, config):
    image = images(config)
    res = ukl("run", image, "--timeout", "600", "--", "work")
    assert res.returncode == 0, res.stdout
    assert app_lines(res.stdout) == [
        f"opts: {start_opts(config)}", "signals handled before the call returned: 1000",
        "read without SA_RESTART: -1 Interrupted system call", "read with SA_RESTART: 1 x, handler ran 1002 times",
        "calls from two threads: 400000"], res.stdout
    assert_clean(image / "console.log")


# The options reach the kernel's command line: parsed at boot, the same on
# the debug kernel, whose boots take twice as long (it runs every option's
# paths in the other tests of this file).
@pytest.mark.parametrize("config", [c for c in PLAIN if c not in DEBUG_CONFIGS])
def test_run_opts_chooses_the_options_of_one_boot(images, config):
    image = images(config)
    for opts, want in ((None, "opts: 0"), ("byp,byp-every=3", "opts: 1"), ("ret", "opts: 2"),
                       ("ret,byp", "opts: 3"), ("", "opts: 0")):
        args = [] if opts is None else ["--opts", opts]
        res = ukl("run", image, *args, "--", "show")
        assert res.returncode == 0 and app_lines(res.stdout) == [want], (opts, res.stdout)
    byp = images(f"{config}+byp")
    assert json.loads((byp / "manifest.json").read_text())["config"] == f"{config}+byp"
    res = ukl("run", byp, "--opts", "", "--", "show")
    assert res.returncode == 0 and app_lines(res.stdout) == ["opts: 0"], res.stdout


def test_an_ordinary_process_gets_enosys(outdir):
    image = build(SRC, BASELINE, outdir / "opts-linux")
    res = ukl("run", image, "--", "show")
    assert res.returncode == 0 and app_lines(res.stdout) == ["opts: Function not implemented"], res.stdout
    res = ukl("run", image, "--opts", "byp")
    assert res.returncode == 2 and "runs the application as an ordinary process" in res.stdout, res.stdout


@pytest.mark.parametrize("profile,message", [
    ("linux+byp", "UKL options need a configuration that links the application into the kernel"),
    ("base+nope", "unknown UKL option 'nope'"),
    ("base+byp+byp", "UKL option 'byp' is given twice"),
    ("base+byp-every", "UKL option 'byp-every' needs a value"),
    ("base+byp=2", "UKL option 'byp' is a switch and takes no value"),
    ("base+byp-every=0", "the value must be a whole number"),
    ("+byp", "names no kernel configuration"),
])
def test_bad_profiles_are_clear_errors(tmp_path, profile, message):
    res = ukl("build", SRC, "--config", profile, "-o", tmp_path / "out")
    assert res.returncode == 2 and message in res.stdout and "Traceback" not in res.stdout, res.stdout
    assert not (tmp_path / "out").exists()
