"""Every generated report under docs/results/ is written by a make target
(issue 48): the output of a `--json`, `--markdown` or `--plot` option in
the Makefile, or written beside one by the command that writes it (a
`--plot FILE.png` of `ukl bench apps` also writes FILE-latency.png). A
report nobody can regenerate is a defect: an earlier ukl's FILE-runs.json
beside a wall-time bench's `--json FILE.json`, which `--from-json` still
reads, is one, as no command writes it now."""

from __future__ import annotations

import re
from pathlib import Path

from ukltool.bench import appbench

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "docs" / "results"

# outputs of a make target that has not been run since it was added; an
# entry must be dropped once its file is committed
PENDING: set[str] = set()

OUTPUT = re.compile(r"--(?:json|markdown|plot)\s+docs/results/([\w.-]+\.(?:md|json|png))\b")


def makefile_outputs(text: str | None = None) -> set[str]:
    """The docs/results/ files the Makefile's commands write."""
    return set(OUTPUT.findall((REPO / "Makefile").read_text() if text is None else text))


def written(outputs: set[str]) -> set[str]:
    out = set(outputs)
    for name in outputs:
        if name.endswith(".png"):
            out.add(appbench.latency_plot_file(Path(name)).name)
    return out


def test_every_report_has_a_make_target() -> None:
    orphans = sorted(p.name for p in RESULTS.iterdir()
                     if p.is_file() and p.name not in written(makefile_outputs()))
    assert not orphans, ("docs/results/ files no make target writes (add them to a results-* "
                         "target, or remove them): " + ", ".join(orphans))


def test_every_make_target_report_is_there() -> None:
    missing = sorted(n for n in makefile_outputs() if not (RESULTS / n).exists() and n not in PENDING)
    assert not missing, "make targets write these, but they are not committed: " + ", ".join(missing)


def test_pending_names_only_missing_outputs() -> None:
    assert PENDING <= makefile_outputs(), "PENDING names files no make target writes"
    done = sorted(n for n in PENDING if (RESULTS / n).exists())
    assert not done, "committed now, drop them from PENDING: " + ", ".join(done)


def test_only_output_options_count() -> None:
    text = ("# docs/results/comment.md\n"
            "\t./ukl bench boot --from-json docs/results/in.json --json docs/results/a.json \\\n"
            "\t\t--markdown docs/results/a.md --plot docs/results/a.png\n")
    assert makefile_outputs(text) == {"a.json", "a.md", "a.png"}


def test_beside_rule() -> None:
    assert written({"a.png", "b.json", "c.md"}) == {"a.png", "a-latency.png", "b.json", "c.md"}
