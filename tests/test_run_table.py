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


def test_an_unsupported_input_names_the_stage_and_its_first_input(tmp_path, monkeypatch):
    """A NotImplementedError (two floating roots...) ends as 'STAGE: RUN/FIRST INPUT: cause', the
    form every one-line error has (cli.error_line)."""
    from types import SimpleNamespace

    from vid2sim.pipeline.cli import error_line

    spec = next(s for s in runner.STAGES if s.name == "identify")

    def refuse(*_):
        raise NotImplementedError("identify: 2 floating roots (a, b); only one floating tree is supported")

    monkeypatch.setattr(runner, "_call_stage", refuse)
    with pytest.raises(runner.StageError) as e:
        runner._call_stage_guarded(spec, None, SimpleNamespace(path=tmp_path / "rec"), tmp_path / "run", {})
    assert e.value.stage == "identify"
    line = error_line(e.value, ["run", str(tmp_path / "rec")])
    assert line == f"identify: {tmp_path / 'run' / 'articulation.json'}: 2 floating roots (a, b); only one floating tree is supported"
