"""A warning met once per frame is shown once by the command line; its repeats are counted
in one line before the command's last line (pipeline/logs.py, pipeline/cli.py)."""
from __future__ import annotations

import logging
import sys

import pytest
import typer

from vid2sim.pipeline import cli
from vid2sim.pipeline.logs import RepeatFilter


class _Kept(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def _logger(name: str, filt: RepeatFilter) -> tuple[logging.Logger, _Kept]:
    kept = _Kept()
    kept.addFilter(filt)
    lg = logging.getLogger(name)
    lg.handlers[:] = [kept]
    lg.propagate = False
    lg.setLevel(logging.DEBUG)
    return lg, kept


def test_a_repeated_warning_passes_once_and_is_counted():
    filt = RepeatFilter()
    lg, kept = _logger("vid2sim.test_logs.a", filt)
    for n in (31, 40, 52):
        lg.warning("segment: %d depth regions (a shattered frame)", n)
    lg.warning("segment: another warning")
    for i in range(3):
        lg.info("track: frame %d", i)   # progress lines repeat on purpose
    lg.error("boom %d", 1)
    lg.error("boom %d", 2)
    assert kept.lines == ["segment: 31 depth regions (a shattered frame)", "segment: another warning",
                          "track: frame 0", "track: frame 1", "track: frame 2", "boom 1", "boom 2"]
    assert sum(filt.hidden.values()) == 2
    line = filt.summary()
    assert line.startswith("2 repeated log lines hidden (--verbose shows them): 2 x 'segment: %d depth regions")


def test_nothing_hidden_says_nothing():
    assert RepeatFilter().summary() is None


def test_the_summary_comes_before_the_error_line(monkeypatch, capsys):
    filt = RepeatFilter()
    lg, _ = _logger("vid2sim.test_logs.b", filt)
    monkeypatch.setitem(cli._REPEATS, "filter", filt)

    app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

    @app.command()
    def segment(recording: str):
        for _ in range(4):
            lg.warning("segment: shattered")
        raise cli.runner.StageError(f"segment: {recording}/shapes.json: arm_b is missing")

    @app.command()
    def track(recording: str):  # a second command, so that typer keeps subcommands
        pass

    monkeypatch.setattr(cli, "app", app)
    monkeypatch.setattr(sys, "argv", ["vid2sim", "segment", "rec"])
    with pytest.raises(SystemExit) as ex:
        cli.main()
    assert ex.value.code == 2
    lines = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert lines[-2] == "3 repeated log lines hidden (--verbose shows them): 3 x 'segment: shattered'"
    assert lines[-1].startswith("error: segment: rec/shapes.json: arm_b is missing")
