"""C++ in ring 0 (issue 12): g++'s programs, with Debian's libstdc++, run
as UKL applications exactly as ordinary processes: global constructors and
destructors, exceptions thrown and caught across frames and translation
units, iostream, std::thread, std::mutex, thread_local, RTTI, the STL.
`ukl build x.cpp` and a Makefile that uses $(CXX) (ukl-c++) both work."""

from __future__ import annotations

import pytest

from conftest import ALL_CONFIGS, BASIC_CONFIGS, REPO, assert_clean, build, ukl

PROGRAM = REPO / "examples" / "cxx" / "cxx.cpp"
PROJECT = REPO / "examples" / "cxx-project"
EXPECTED = ["global constructors: 1", "caught: thrown 10 frames down", "caught int 42, 6 destructors ran",
            "threads: 4, thread_local sum 406, main's 100", "stl: ring0", "all C++ checks passed",
            "global destructor ran"]


def app_lines(out: str) -> list[str]:
    return [l for l in out.splitlines() if not l.startswith(("ukl:", "ukl-init:"))]


@pytest.mark.parametrize("config", ALL_CONFIGS)
def test_cxx_runtime_works_in_every_configuration(outdir, config):
    out = build(PROGRAM, config, outdir / f"cxx-{config}")
    res = ukl("run", out, "--timeout", "300")
    assert res.returncode == 0, res.stdout[-3000:]
    assert app_lines(res.stdout) == EXPECTED
    assert_clean(out / "console.log")


def test_a_makefile_project_with_cxx_runs_the_same_in_both_rings(outdir):
    args = ["rect 2 3", "circle 1", "hexagon 4", "rect 1"]
    got = {}
    for config in BASIC_CONFIGS:
        out = build(PROJECT, config, outdir / f"shapes-{config}")
        res = ukl("run", out, "--timeout", "120", "--", *args)
        assert res.returncode == 2, res.stdout[-3000:]  # two refused shapes
        got[config] = app_lines(res.stdout)
        assert_clean(out / "console.log")
    assert got["base"] == got["linux"] == ["refused: cannot make 'hexagon 4' (1)",
                                           "refused: cannot make 'rect 1' (1)", "circle 3", "rect 6"]
    assert not (PROJECT / "shapes").exists(), "the user's tree must not be written to"
