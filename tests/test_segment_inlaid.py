"""Parts inlaid in a much larger named mask are split out by motion at RealSense-like noise
(pipeline/segment_inlaid.py, used by segment_nested.split_by_motion)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import match_shapes
from vid2sim.pipeline.segment_inlaid import parted_by_when
from vid2sim.pipeline.segment_nested import split_by_motion
from vid2sim.pipeline.segment_size import measure_extents
from vid2sim.pipeline.segment_split import split_pieces

from image_masks import BOX, CABINET, K, rect

SHAPES = {n: CABINET[n] for n in ("carcass", "drawer")}
FRONT = rect(60, 150, 120, 195)  # the carcass's 0.50 x 0.60 m front, facing the camera at 2 m
TOP = rect(40, 60, 120, 195)     # its top, 0.4 m deep: depth 2.0-2.4 m upward
CARCASS = FRONT | TOP            # 8250 px
DRAWER = rect(66, 84, 127, 187)  # the drawer's 0.40 x 0.12 m front: 1080 px
DEPTH = (2.0 + 0.02 * np.clip(60 - np.arange(240), 0, None)[:, None]) * CARCASS
F = 11  # sampled frames besides the candidate frame 0


class _Motion:
    """``DepthMotion``'s answers for frame 0 from a given (F, H, W) bool ``changed`` and moving
    regions; no change shows a nearer or farther surface; every sampled depth equals frame 0's."""

    fx, k = 300.0, 0.0

    def __init__(self, changed: np.ndarray, regions: np.ndarray):
        self._changed, self._regions = changed, regions
        self._cache = {0: (changed, DEPTH > 0, regions, DEPTH)}  # DepthMotion.cues reads frame 0's depth here
        self.depths = {4 * j: DEPTH for j in range(F + 1)}
        self.frames = sorted(self.depths)

    def changed(self, i):
        return self._changed, DEPTH > 0, self._regions

    def beyond(self, i):
        return np.zeros_like(self._changed), np.zeros_like(self._changed)

    def frame_depth(self, i):
        return DEPTH


def _noisy_carcass_drawer() -> tuple[np.ndarray, np.ndarray]:
    """(changed (F, H, W) bool, regions (H, W) bool): the drawer front's upper 13 rows (780 px,
    0.095 of the carcass's mask) changed in every sampled frame and in the moving regions, its
    lower 5 rows in 3 of 11 frames; every 12th pixel of the carcass (8.3 %) changed in one sampled
    frame, as single-frame RealSense-like flips."""
    changed = np.zeros((F, 240, 320), bool)
    core = rect(66, 79, 127, 187)
    changed[:, core] = True
    changed[:3, DRAWER & ~core] = True
    ys, xs = np.nonzero(CARCASS & ~DRAWER)
    for n, (y, x) in enumerate(zip(ys[::12], xs[::12])):
        changed[n % F, y, x] = True
    return changed, core


def _name(ds, es):
    return match_shapes(ds, es, SHAPES, True, 1.6, Path("shapes.json"), 0, "ignore")


def test_split_pieces_refuses_the_inlaid_drawer_by_share_and_single_frame_flips():
    changed, regions = _noisy_carcass_drawer()
    freq = changed.mean(0)
    det = Detection(CARCASS, 0, 0.9, BOX)
    assert (CARCASS & regions).sum() / CARCASS.sum() < 0.1  # under MIN_SHARE
    assert split_pieces(det, regions, freq, 20) == []
    # no share asked: the still piece holds 0.083 of its pixels changed in some frame (> STILL_CHANGED)
    assert split_pieces(det, regions, freq, 20, min_share=0.0) == []
    pieces = split_pieces(det, regions, freq, 20, min_share=0.0, changed=changed.sum(0) >= 2)
    assert [int(p.mask.sum()) for p in pieces] == [20 * 62, 8250 - 20 * 62]  # the drawer with its 1 px rim, the rest


def test_a_drawer_front_inlaid_in_the_carcass_mask_takes_its_name_from_a_background_patch():
    """Random scene 125's naming (RealSense-like): the carcass's mask holds the drawer front, whose
    moving core is under a tenth of it, and single-frame flips mark 8 % of the carcass changed; the
    drawer's name sits on a background patch at a size the drawer can have."""
    changed, regions = _noisy_carcass_drawer()
    junk = rect(200, 209, 20, 80)
    depth = DEPTH + 2.0 * junk
    dets = [Detection(CARCASS, 0, 0.9, BOX), Detection(junk, 0, 0.4, BOX)]
    seen = [measure_extents(d.mask, depth, K) for d in dets]
    names = _name(dets, seen)
    assert names == ["carcass", "drawer"]
    out_d, _, out_n = split_by_motion(_Motion(changed, regions), 0, (dets, seen, names), _name, SHAPES, depth, K,
                                      depth, 1.6, 20, 1.0)
    assert sorted(out_n) == ["carcass", "drawer"]
    drawer, carcass = out_d[out_n.index("drawer")].mask, out_d[out_n.index("carcass")].mask
    assert (drawer & DRAWER).sum() / (drawer | DRAWER).sum() > 0.85
    assert (carcass & CARCASS & ~DRAWER).sum() / (carcass | (CARCASS & ~DRAWER)).sum() > 0.95
    assert not (drawer & junk).any() and not (carcass & junk).any()


def test_a_moving_piece_holding_a_slid_drawer_and_a_swinging_door_is_parted_by_when_they_change():
    """Random scene 125 at frame 9: the drawer slid before it (its pixels changed against the first
    sampled frame only), the door swings through the clip (changed in 8 of 11); their depth changes
    do not part them (all sampled depths equal here), their change signatures do."""
    drawer, door = rect(66, 84, 127, 187), rect(84, 140, 125, 190)
    changed = np.zeros((F, 240, 320), bool)
    changed[0, drawer] = True
    changed[3:, door] = True
    changed[0, door] = True
    parts = parted_by_when(_Motion(changed, drawer | door), 0, [drawer | door], 20)
    assert len(parts) == 2
    iou = sorted(max((p & t).sum() / (p | t).sum() for p in parts) for t in (drawer, door))
    assert iou[0] > 0.99
    # one part moving at one time stays whole
    assert len(parted_by_when(_Motion(changed | drawer, drawer | door), 0, [drawer | door], 20)) == 1
