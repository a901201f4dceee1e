"""Segment: the library shapes it must find, and the error naming those it did not.

At a far camera and low resolution a part a few pixels across (a pole 3-4 px wide with a
third of its depth pixels missing) may never be proposed by the segmenter, while a
look-alike of another part's class takes that part's name. Where the chosen frame's naming
leaves a library shape unnamed, ``segment.run`` names that frame again with the full motion
cue (``segment_still.DepthMotion``: a still part with nothing moving beside it is
background, a still part pays more for every name, a moving region no part covers is
proposed for an unnamed shape) and keeps that naming where it explains more of the
library; a shape still unnamed is ``check_missing``'s error.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from vid2sim.datasets.recording import RecordingError
from vid2sim.datasets.shapes import CLASSES, Shape

if TYPE_CHECKING:
    from vid2sim.pipeline.segment import SegmentConfig

log = logging.getLogger("vid2sim.pipeline.segment")


def findable(shapes: dict[str, Shape], shapes_path: Path) -> list[str]:
    """The library shapes segment looks for: of a class it knows (box, capsule, sphere,
    cylinder), not a known actuator's (``actuation.npz``'s ``shapes`` beside ``shapes_path``,
    docs/formats.md §1.2: their pixels are no part)."""
    actuators = set()
    if (shapes_path.parent / "actuation.npz").is_file():
        try:
            with np.load(shapes_path.parent / "actuation.npz") as z:
                actuators = {str(n) for n in z["shapes"]} if "shapes" in z.files else set()
        except (OSError, ValueError) as e:
            raise RecordingError(shapes_path.parent / "actuation.npz", f"cannot be read ({e})") from None
    return [n for n, s in shapes.items() if s.type in CLASSES and n not in actuators]


def check_missing(cfg: "SegmentConfig", shapes: dict[str, Shape], names: list[str], frames: list[int],
                  shapes_path: Path) -> None:
    """Every library shape segment can find (``findable``) must have been matched by some
    part: one that was not is a ``StageError`` naming it (``cfg.missing="allow"``: an INFO
    line). Mesh shapes are never looked for, nor the shapes of known actuators."""
    from vid2sim.pipeline.run import StageError

    wanted = findable(shapes, shapes_path)
    absent = [n for n in wanted if n not in set(names)]
    if not absent:
        return
    what = ", ".join(absent[:-1]) + " and " + absent[-1] if len(absent) > 1 else absent[0]
    msg = (f"shapes.json lists {len(wanted)} part(s), segment found {len(set(wanted) & set(names))}: {what} "
           f"{'are' if len(absent) > 1 else 'is'} missing in frames {', '.join(map(str, frames))} "
           f"(smaller than segment.min_pixels={cfg.min_pixels} px, hidden, or not in this scene? "
           "segment.missing=allow goes on without them)")
    if cfg.missing == "error":
        raise StageError(f"segment: {shapes_path}: {msg}")
    log.info("segment: %s", msg)
