"""`ukl bench app` saves after each application, so a later failure keeps
the finished ones' results (no VM)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ukltool.cli import bench as cli_bench
from ukltool.util.errors import UklError


def test_a_failing_application_keeps_the_finished_ones(tmp_path: Path):
    saved: list[list[str]] = []
    done: list[str] = []

    def run(name: str) -> None:
        if name == "nginx":
            raise UklError("the benchmark failed under 'base'", "see console.log")
        done.append(name)

    with pytest.raises(UklError) as e:
        cli_bench._each_app(["redis", "memcached", "nginx", "sqlite3"], run, lambda: saved.append(list(done)),
                      tmp_path / "r.json")
    assert saved == [["redis"], ["redis", "memcached"]]
    assert e.value.message == "the benchmark failed under 'base'"
    assert e.value.hint == (f"see console.log; the results of redis, memcached are saved in {tmp_path / 'r.json'} "
                            "(show them with --from-json)")


def test_without_json_or_before_any_result_the_error_is_unchanged(tmp_path: Path):
    def fail(name: str) -> None:
        raise UklError("boom", "hint")

    for names, path in ((["redis"], tmp_path / "r.json"), (["a", "b"], None)):
        with pytest.raises(UklError) as e:
            cli_bench._each_app(names, fail, lambda: None, path)
        assert (e.value.message, e.value.hint) == ("boom", "hint")
