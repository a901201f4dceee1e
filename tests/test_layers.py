"""House rule: ``datasets/`` and ``models/`` never import ``pipeline/`` (I/O helpers such as
``vid2sim.datasets.atomic`` live at the bottom layer)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path) -> list[str]:
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


@pytest.mark.parametrize("package", ["datasets", "models"])
def test_lower_layers_do_not_import_pipeline(package):
    files = sorted((ROOT / package).rglob("*.py"))
    assert files
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in _imported_modules(p)
           if m == "vid2sim.pipeline" or m.startswith("vid2sim.pipeline.")]
    assert bad == []


def test_the_atomic_helpers_live_in_datasets():
    assert not (ROOT / "pipeline" / "atomic.py").exists()
    from vid2sim.datasets.atomic import atomic_path, write_bytes, write_json, write_npz, write_text  # noqa: F401
