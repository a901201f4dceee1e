"""House rules: ``datasets/`` and ``models/`` never import ``pipeline/`` (I/O helpers such as
``vid2sim.datasets.atomic`` live at the bottom layer), and production code does not depend on
the synthetic generator (``datasets/synthetic``): only commands that make synthetic data (``vid2sim
synth``, segmenter training) import it, inside the function that needs it."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imported_modules(path: Path, top_level_only: bool = False) -> list[str]:
    """Modules (and ``module.name`` for ``from module import name``) that ``path`` imports;
    ``top_level_only``: only imports run when the module is imported (not inside functions)."""
    tree = ast.parse(path.read_text(), str(path))
    nodes = _module_level(tree) if top_level_only else ast.walk(tree)
    out = []
    for node in nodes:
        if isinstance(node, ast.Import):
            out += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out += [node.module] + [f"{node.module}.{a.name}" for a in node.names]
    return out


def _module_level(tree: ast.Module):
    """Statements run at import time: the module body and the bodies of its if/try/with blocks
    and class bodies, not function bodies."""
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo += [c for c in ast.iter_child_nodes(node) if isinstance(c, ast.stmt) or isinstance(c, ast.ExceptHandler)]


def _production_files() -> list[Path]:
    files = [p for pkg in ("pipeline", "models", "datasets") for p in sorted((ROOT / pkg).rglob("*.py"))]
    return [p for p in files if "synthetic" not in p.relative_to(ROOT).parts]


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


def test_production_code_imports_the_generator_only_inside_functions():
    files = _production_files()
    assert len(files) > 50
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in files for m in _imported_modules(p, top_level_only=True)
           if m.startswith("vid2sim.datasets.synthetic")]
    assert bad == []


def test_the_primitive_types_come_from_the_shape_library_module():
    bad = [f"{p.relative_to(ROOT)}: {m}" for p in _production_files() for m in _imported_modules(p)
           if m.startswith("vid2sim.datasets.synthetic") and m.endswith(".CLASSES")]
    assert bad == []
    from vid2sim.datasets import shapes
    from vid2sim.datasets.synthetic import primitives

    assert primitives.CLASSES is shapes.CLASSES and shapes.SHAPE_TYPES[:len(shapes.CLASSES)] == shapes.CLASSES


MAX_FUNCTION_LINES = 80
# Functions over the limit, named so that a new long function fails this test (none is left)
LONG_FUNCTIONS: set[str] = set()


def test_functions_are_short():
    """House rule: functions under ~80 lines (pipeline, models, datasets, scripts)."""
    long = set()
    for pkg in ("pipeline", "models", "datasets", "scripts"):
        for p in sorted((ROOT / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(p.read_text(), str(p))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                        node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES:
                    long.add(f"{p.relative_to(ROOT)}:{node.name}")
    assert long <= LONG_FUNCTIONS, sorted(long - LONG_FUNCTIONS)
