"""The ``StageSpec`` table drives every stage call: each entry point's arguments, the files
they come from and the files its results are saved to must agree with the stage code."""
from __future__ import annotations

import inspect

import pytest

from vid2sim.pipeline import run as runner


def _sources(spec: runner.StageSpec) -> list[str]:
    return list(spec.args) + [src for _, src in spec.kwargs]


@pytest.mark.parametrize("spec", runner.STAGES, ids=lambda s: s.name)
def test_entry_point_accepts_the_arguments_the_table_gives(spec):
    entry = getattr(spec.module(), spec.entry)
    bound = inspect.signature(entry).bind(*spec.args, **{k: src for k, src in spec.kwargs})
    assert bound.arguments  # binding raises TypeError on a missing, extra or misnamed argument


@pytest.mark.parametrize("spec", runner.STAGES, ids=lambda s: s.name)
def test_every_argument_source_is_known(spec):
    for src in _sources(spec):
        if src.startswith("setting:"):
            assert src.split(":", 1)[1] in spec.reads, src
        elif src not in runner.RUN_OBJECTS:
            assert src in spec.inputs and src in runner.ARTIFACT_LOADERS, src
    assert spec.args[0] == "cfg"


@pytest.mark.parametrize("spec", runner.STAGES, ids=lambda s: s.name)
def test_saved_files_are_declared_outputs(spec):
    for f in spec.saves:
        assert f == runner.SAVE_TO_RUN or f in spec.outputs, f


def test_stages_that_need_the_shape_library():
    assert {s.name for s in runner.STAGES if s.needs_shapes} == {"segment", "identify", "export"}
