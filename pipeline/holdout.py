"""The run's split in time: identify fits the first frames, forecast scores the rest.

A run holds back the last ``forecast.holdout`` fraction of the recording's frames.
Identify fits the frames before them (and, by default, refits on every frame for the
exported twin); forecast restarts the twin fitted on the first part from its last
fitted state and predicts the held-back frames, which no fit has seen. Segment, track
and articulate see the whole clip: they are perception, not the fit being validated.
"""
from __future__ import annotations

import logging
import math

log = logging.getLogger(__name__)

MIN_FIT_FRAMES = 10   # identify's track-noise estimate needs third differences over at least this many frames
MIN_HELD_OUT = 2      # fewer held-back frames than this score nothing worth reporting


def fit_frames(num_frames: int, holdout: float) -> int:
    """Frames identify fits when ``holdout`` (fraction in [0, 1)) of ``num_frames`` is held back.

    Returns ``num_frames`` (nothing held back) when ``holdout`` is 0, or when the clip is too
    short to keep ``MIN_FIT_FRAMES`` for the fit and ``MIN_HELD_OUT`` for validation.
    """
    if not 0.0 <= holdout < 1.0:
        raise ValueError(f"forecast.holdout must be in [0, 1); got {holdout}")
    held = int(math.ceil(holdout * num_frames - 1e-9)) if holdout > 0 else 0
    if held == 0:
        return num_frames
    if held < MIN_HELD_OUT or num_frames - held < MIN_FIT_FRAMES:
        log.warning("forecast.holdout=%g: a clip of %d frames is too short to hold %d back and fit %d "
                    "(identify needs >= %d); the twin is fitted on every frame and not validated",
                    holdout, num_frames, held, num_frames - held, MIN_FIT_FRAMES)
        return num_frames
    return num_frames - held
