"""docs/dev/layout.md's layers hold: every import between tools/ukltool's
subpackages goes down the pipeline, never up or sideways, with no
exception (imports inside functions included). A new subpackage must be
given its place here and in layout.md."""

from __future__ import annotations

import ast
from pathlib import Path

from conftest import REPO

PACKAGE = REPO / "tools" / "ukltool"
# Each subpackage's layer: it imports only from lower layers.
LAYERS = [
    ["util"],
    ["source"],
    ["linux", "glibc", "plugin"],
    ["build"],
    ["run"],
    ["apps"],
    ["bench"],
    ["cli"],
    ["__main__"],
]
# ukltool/__init__.py imports nothing of the tool.
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def imported_subpackages(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import (the tool imports by absolute name)"
            names = [node.module or ""]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found |= {n.split(".")[1] for n in names if n.startswith("ukltool.")}
    return found


def owner(path: Path) -> str:
    return path.relative_to(PACKAGE).with_suffix("").parts[0]


def test_every_subpackage_has_a_layer():
    subpackages = {owner(p) for p in PACKAGE.rglob("*.py")} - {"__init__"}
    assert subpackages == set(RANK), "give each subpackage its layer here and in docs/dev/layout.md"


def test_imports_go_down_the_layers_only():
    wrong = []
    for path in sorted(PACKAGE.rglob("*.py")):
        me = owner(path)
        if me == "__init__":
            assert not imported_subpackages(path), path
            continue
        for other in imported_subpackages(path) - {me}:
            if RANK[other] >= RANK[me]:
                wrong.append(f"{path.relative_to(REPO)} ({me}) imports {other}")
    assert not wrong, "\n".join(wrong)


def test_layout_md_draws_the_same_layers():
    text = (REPO / "docs" / "dev" / "layout.md").read_text()
    line = " < ".join(", ".join(names) for names in LAYERS[:-2])
    assert line in text, f"docs/dev/layout.md should state the layers as: {line}"
