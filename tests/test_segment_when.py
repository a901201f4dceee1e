"""Moving pixels grouped by when they move: one piece per moving part (segment_when, segment_nested)."""
from __future__ import annotations

import numpy as np

from pathlib import Path

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import match_shapes
from vid2sim.pipeline.segment_nested import split_by_motion
from vid2sim.pipeline.segment_size import measure_extents
from vid2sim.pipeline.segment_when import group_by_signature, when_pieces

from image_masks import BOX, CABINET, K, rect as _rect

SHAPES = CABINET


def _name(ds, es):
    return match_shapes(ds, es, SHAPES, True, 1.6, Path("shapes.json"), 0, "ignore")


CARCASS = _rect(40, 150, 120, 195)   # the front, 0.50 x 0.60 m facing the camera at 2 m, and the top above it
DRAWER = _rect(66, 84, 127, 187)     # 0.40 x 0.12 m, its front
DOOR = _rect(90, 144, 123, 192)      # 0.46 x 0.36 m
DEPTH = (2.0 + 0.02 * np.clip(60 - np.arange(240), 0, None)[:, None]) * CARCASS

FRAMES = list(range(0, 41, 4))   # the sampled frames; the candidate frame is 20
LINK = _rect(84, 90, 125, 135)   # a strip of the door's pixels touching the drawer front
DOOR_AND_LINK = DOOR | LINK


class _TimedMotion:
    """The sampled-depth motion of a cabinet's front at 2 m seen in frame 20: the drawer front slid
    in frames 0-8 and rests after (changed against sampled frames 0 and 4 only), the door swings
    through the clip (changed against every sampled frame), the carcass never moves; no change
    shows a nearer surface. ``changed`` as ``DepthMotion.changed``: (F, H, W), valid, regions
    (pixels changed in at least half the sampled frames)."""

    fx = 300.0

    def __init__(self, depth):
        others = [j for j in FRAMES if j != 20]
        self.changed_ = np.stack([DOOR_AND_LINK | (DRAWER if j < 8 else False) for j in others])
        self.depths = {j: depth for j in FRAMES}   # depth_changes (segment_change) sees no jump
        self.frames, self.k = FRAMES, 0.0
        self._cache = {20: (self.changed_, depth > 0, self.changed_.mean(0) >= 0.5, depth)}

    def changed(self, i):
        return self._cache[i][:3]

    def beyond(self, i):
        return np.zeros_like(self.changed_), np.zeros_like(self.changed_)

    def frame_depth(self, i):
        return self.depths[i]


def test_pixels_are_grouped_by_the_frames_they_change_in():
    """The drawer front (2 changed frames of 10) and the door (10 of 10) touch, yet are two groups."""
    own = _TimedMotion(DEPTH).changed(20)[0]
    groups = group_by_signature(own, CARCASS, 20)
    assert len(groups) == 2
    iou = sorted(max((g & t).sum() / (g | t).sum() for g in groups) for t in (DRAWER, DOOR_AND_LINK))
    assert iou[0] == 1.0
    # one changed frame is no motion: the drawer changed against frame 0 only is no group
    assert len(group_by_signature(own & np.arange(10)[:, None, None].__ne__(1), CARCASS, 20)) == 1


def test_a_drawer_at_rest_after_the_first_frames_gets_its_own_piece_and_name():
    """The carcass's mask over the whole front, the drawer's name on a background patch at a size
    the drawer's box can have; the drawer front changed in 2 of 10 sampled frames (no moving region:
    the moving regions ask for half), the door in all: the split by when the pixels move names the
    drawer front drawer, the door door and the still rest carcass."""
    junk = _rect(200, 209, 20, 60)
    depth = DEPTH + 2.0 * junk
    dets = [Detection(CARCASS, 0, 0.9, BOX), Detection(junk, 0, 0.2, BOX)]
    seen = [measure_extents(d.mask, depth, K) for d in dets]
    names = _name(dets, seen)
    assert names == ["carcass", "drawer"]
    motion = _TimedMotion(depth)
    moving, still = when_pieces(motion, 20, CARCASS, 20)
    assert len(moving) == 2 and still is not None
    assert (still & (DRAWER | DOOR_AND_LINK)).sum() == 0
    out_d, _, out_n = split_by_motion(motion, 20, (dets, seen, names), _name, SHAPES, depth, K, depth, 1.6, 20, 1.0)
    assert sorted(out_n) == ["carcass", "door", "drawer"]
    truth = {"carcass": CARCASS & ~DRAWER & ~DOOR_AND_LINK, "drawer": DRAWER, "door": DOOR_AND_LINK}
    for d, n in zip(out_d, out_n):
        assert (d.mask & truth[n]).sum() / d.mask.sum() > 0.85, n
        assert (d.mask & truth[n]).sum() / truth[n].sum() > (0.6 if n == "carcass" else 0.9), n
