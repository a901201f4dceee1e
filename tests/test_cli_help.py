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

SCALARS = (int, float, str, bool)


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


@pytest.mark.parametrize("spec", [s for s in runner.STAGES if s.available()], ids=lambda s: s.name)
def test_every_scalar_setting_has_help(spec):
    cls = getattr(spec.module(), spec.config_class)
    hints = typing.get_type_hints(cls)
    docs = field_docs(cls)
    scalars = [f.name for f in dataclasses.fields(cls) if hints[f.name] in SCALARS]
    assert scalars
    assert [n for n in scalars if not docs.get(n, "").strip()] == []
    out = _help(spec.name)
    for n in scalars:
        assert f"--{n.replace('_', '-')}" in out
        first_words = " ".join(docs[n].split()[:4])
        assert first_words in out, (n, first_words)
