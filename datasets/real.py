"""Where the real measurements by others live (the team's shared data folder).

One setting: the environment variable ``VID2SIM_REAL_DATA``; without it, ``shared/data/real``
beside the repository checkout. Each sub-folder keeps its licence (see its README).
"""
from __future__ import annotations

import os
from pathlib import Path

REAL_DATA_ENV = "VID2SIM_REAL_DATA"


def real_data_dir() -> Path:
    """The folder of real data sets (it may not exist: callers skip or say so)."""
    env = os.environ.get(REAL_DATA_ENV)
    if env:
        return Path(env).expanduser()
    return Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"
