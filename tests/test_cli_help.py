"""``vid2sim <stage> --help`` shows each setting's meaning, read from the comment on its
Config field (pipeline/cli.py field_docs)."""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

import pytest
from typer.testing import CliRunner

from vid2sim.pipeline import run as runner
from vid2sim.pipeline.cli import app, field_docs
from vid2sim.pipeline.config import leaf_paths


@dataclass(frozen=True)
class _Example:
    """A docstring with a # that is not a comment."""

    # above: first line
    # above: second line
    a: int = 1
    b: float = 2.0  # trailing
    c: str = "x # not a comment"  # trailing of c
                                  # continued
    d: bool = True

    # detached by a blank line, so it describes e
    e: int = 3

    def method(self):  # not a field
        x = 1  # not a field either
        return x


def test_field_docs_reads_the_three_comment_placements():
    docs = field_docs(_Example)
    assert docs == {"a": "above: first line above: second line", "b": "trailing",
                    "c": "trailing of c continued", "e": "detached by a blank line, so it describes e"}


def _help(stage: str) -> str:
    res = CliRunner().invoke(app, [stage, "--help"], env={"COLUMNS": "2000", "TERMINAL_WIDTH": "2000"})
    assert res.exit_code == 0, res.output
    return " ".join(res.output.replace("│", " ").split())  # rich boxes the text: compare words only


def test_track_help_shows_what_iterations_means():
    out = _help("track")
    assert "Gauss-Newton steps per frame" in out
    assert "(default 8)" in out


def _settings(cls: type, group: str = "") -> list[tuple[str, str]]:
    """(option, doc) of every setting of ``cls``, settings groups walked."""
    hints, docs, out = typing.get_type_hints(cls), field_docs(cls), []
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            assert docs.get(f.name, "").strip(), f"group {f.name} has no comment"
            out += _settings(hints[f.name], f"{group}{f.name}.")
        else:
            out.append((f"--{group}{f.name.replace('_', '-')}", docs.get(f.name, "")))
    return out


@pytest.mark.parametrize("spec", [s for s in runner.STAGES if s.available()], ids=lambda s: s.name)
def test_every_setting_has_help(spec):
    settings = _settings(getattr(spec.module(), spec.config_class))
    assert len(settings) == len(leaf_paths(getattr(spec.module(), spec.config_class)))
    assert [o for o, doc in settings if not doc.strip()] == []
    out = _help(spec.name)
    for option, doc in settings:
        assert option in out
        first_words = " ".join(doc.split()[:4])
        assert first_words in out, (option, first_words)


def test_track_help_groups_the_settings_under_their_headings():
    out = _help("track")
    for heading in ("steps: the Gauss-Newton steps", "gates: which depth points", "noise: depth noise model",
                    "prior: motion model (constant acceleration)", "lost: lost bodies"):
        assert heading in out
    assert out.index("gates: which depth points") < out.index("--gates.gate-m") < out.index("noise: depth noise model")
    assert "--noise.depth-noise-k" in out  # an optional (float or null) setting is an option too


def test_identify_help_groups_the_settings_under_their_headings():
    out = _help("identify")
    headings = ("inference: the inference method", "shooting: shooting windows", "noise: observation noise",
                "video: the pixel-space observation", "bounds: the prior box", "contact: the floor plane",
                "augmentation: the neural joint force")
    assert [out.index(h) for h in headings] == sorted(out.index(h) for h in headings)
    assert out.index("inference: the inference method") < out.index("--inference.method") < out.index("shooting:")
    assert out.index("bounds: the prior box") < out.index("--bounds.masses") < out.index("contact:")
    assert "(JSON; default {})" in out and '(JSON; default "auto")' in out  # masses (a dict), compile (bool or str)
