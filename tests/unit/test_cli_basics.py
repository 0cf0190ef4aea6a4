"""The CLI's entry points that need no build: --version, --help in every
installation, and `ukl configs`."""

from __future__ import annotations

import os
import subprocess
import tomllib

import ukltool
from conftest import REPO, UKL, ukl
from ukltool.linux import kernel, profiles


def test_version_names_the_release_and_the_checkout():
    res = ukl("--version")
    assert res.returncode == 0 and res.stdout.strip() == f"ukl {ukltool.__version__} (checkout {REPO})", res.stdout
    # one version: the package's, which pyproject.toml reads
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ukltool.__version__"}


def test_help_works_without_a_checkout_and_commands_say_what_they_need(tmp_path):
    """As after a non-editable `pip install .`: the package finds no
    checkout. Help still works; a command that needs one says so in one line."""
    env = dict(os.environ, UKL_REPO=str(tmp_path))
    for args in (["--help"], ["run", "--help"], ["build", "--help"], ["bench", "--help"], ["--version"]):
        res = subprocess.run([UKL, *args], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        assert res.returncode == 0 and "Traceback" not in res.stdout + res.stderr, (args, res.stderr)
        assert res.stdout.startswith(("usage: ukl", "ukl ")), (args, res.stdout)
    res = subprocess.run([UKL, "configs"], env=env, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert res.stderr.strip().count("\n") == 0 and "not a ukl checkout" in res.stderr and "UKL_REPO" in res.stderr


def test_configs_lists_configurations_and_options():
    res = ukl("configs")
    assert res.returncode == 0, res.stdout
    rows = {line.split()[0] for line in res.stdout.splitlines() if line.strip()}
    assert set(kernel.config_names()) <= rows, res.stdout
    for name, opt in profiles.options().items():
        assert (f"{name}=N" if opt.param else name) in rows, (name, res.stdout)
    assert "UKL base model" in res.stdout and "Stock Linux 6.1" in res.stdout
