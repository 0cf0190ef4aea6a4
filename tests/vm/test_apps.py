"""Real applications (issue 12): each recipe in apps/ builds Debian's
unmodified source package with `ukl build NAME`, for every basic
configuration, and passes its smoke test (a shell script run in the guest
beside the application) with a clean kernel log. Run-to-completion
applications also run with the recipe's default arguments."""

from __future__ import annotations

import pytest

from conftest import BASIC_CONFIGS, assert_clean, ukl
from ukltool import recipes


def app_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]


APPS = [n for n in recipes.names() if not recipes.load(n).build.library]


@pytest.mark.parametrize("config", BASIC_CONFIGS)
@pytest.mark.parametrize("name", APPS)
def test_recipe_builds_runs_and_passes_its_smoke_test(outdir, name, config):
    r = recipes.load(name)
    out = outdir / f"app-{name}-{config}"
    res = ukl("build", name, "--config", config, "-o", out)
    assert res.returncode == 0, res.stdout[-3000:]
    assert (out / "build.log").is_file()
    assert r.smoke is not None, f"apps/{name}/recipe.toml has no [smoke] test"
    res = ukl("run", out, "--timeout", str(r.smoke.timeout), "--sh", r.smoke.sh)
    lines = app_lines(res.stdout)
    assert res.returncode == 0, res.stdout[-3000:]
    for want in r.smoke.expect:
        assert any(want in l for l in lines), (want, lines[-40:])
    assert_clean(out / "console.log")
    if not r.forwards:  # not a server: the default run completes
        res = ukl("run", out, "--timeout", str(r.smoke.timeout))
        assert res.returncode == 0, res.stdout[-3000:]
        assert_clean(out / "console.log")


def test_an_unknown_name_lists_the_recipes(outdir):
    res = ukl("build", "no-such-app", "--config", "base", "-o", outdir / "none")
    assert res.returncode == 2 and "neither a file, a directory nor a recipe" in res.stdout
    assert all(n in res.stdout for n in recipes.names()) and "Traceback" not in res.stdout


def test_a_library_recipe_is_built_only_as_a_dependency(outdir):
    res = ukl("build", "libevent", "--config", "base", "-o", outdir / "libevent")
    assert res.returncode == 2 and "library recipe" in res.stdout and "memcached" in res.stdout, res.stdout
    assert not (outdir / "libevent").exists()
