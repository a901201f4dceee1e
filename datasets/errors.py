"""Errors about input files; every message names the file and the problem."""
from __future__ import annotations

from pathlib import Path


class RecordingError(ValueError):
    """A recording (or one of its files) is missing or malformed."""

    def __init__(self, path: str | Path, problem: str):
        self.path = Path(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
