"""A named mask holding a still body and a moving one is doubted and split (segment_rigid, segment_nested)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import match_shapes
from vid2sim.pipeline.segment_nested import split_by_motion
from vid2sim.pipeline.segment_split import split_pieces
from vid2sim.pipeline.segment_rigid import still_keeps_name, still_takes_moving_name, two_bodies
from vid2sim.pipeline.segment_size import measure_extents

from image_masks import BOX, CABINET, K, rect
from test_segment_nested import DEPTH, DOOR, DRAWER, FRONT, _Motion

SIDE = rect(80, 149, 195, 203)   # a strip of the carcass's side, 8 px wide, receding 0.4 m: seen 0.47 x 0.22 m
DEPTH_SIDE = DEPTH + SIDE * (2.0 + 0.4 * np.clip(np.arange(320) - 195, 0, None) / 8)[None, :]


def _name(ds, es):
    return match_shapes(ds, es, CABINET, True, 1.6, Path("shapes.json"), 0, "ignore")


def _s109_parts():
    """Cabinet s109's naming at far framing: the carcass's mask over the carcass's front and the
    whole door, the drawer's over the drawer front, the door's name on a still strip of the
    carcass's side seen at a size the door can have (every name fits its shape's size, one named
    part is still and touches moving pixels: the naming is not doubted by ``_doubtful``)."""
    dets = [Detection(FRONT & ~DRAWER, 0, 0.9, BOX), Detection(DRAWER, 0, 0.9, BOX), Detection(SIDE, 0, 0.3, BOX)]
    seen = [measure_extents(d.mask, DEPTH_SIDE, K) for d in dets]
    return dets, seen, _name(dets, seen)


def _pieces(dets, regions, freq):
    return [split_pieces(d, regions, freq, 20) for d in dets]


def test_a_mask_with_a_still_and_a_moving_piece_of_part_sizes_holds_two_bodies():
    dets, _, names = _s109_parts()
    assert names == ["carcass", "drawer", "door"]
    moving = DRAWER | DOOR
    regions, freq = moving, moving.astype(float)
    assert two_bodies(_pieces(dets, regions, freq), DEPTH_SIDE, K, DEPTH_SIDE, CABINET, 1.6, 1.0) == [0]
    # a moving sliver (3 px, 0.02 m) at the carcass's rim is no part: one body with a rim the mask took
    rim = rect(60, 150, 192, 195)
    assert two_bodies(_pieces(dets, rim, rim.astype(float)), DEPTH_SIDE, K, DEPTH_SIDE, CABINET, 1.6, 1.0) == []
    # nothing still beside the moving pixels: one body
    assert two_bodies(_pieces([Detection(DOOR, 0, 0.9, BOX)], regions, freq), DEPTH_SIDE, K, DEPTH_SIDE, CABINET,
                      1.6, 1.0) == []


def test_the_door_in_the_carcass_mask_gets_its_own_mask_and_name():
    """Before ``two_bodies`` the naming was kept: the door's name on the side strip (0 of its
    552 px on the door), the carcass's on a mask 34 % carcass."""
    dets, seen, names = _s109_parts()
    out_d, _, out_n = split_by_motion(_Motion(DRAWER | DOOR, DEPTH_SIDE), 0, (dets, seen, names), _name, CABINET,
                                      DEPTH_SIDE, K, DEPTH_SIDE, 1.6, 20, 1.0)
    assert sorted(out_n) == ["carcass", "door", "drawer"]
    truth = {"carcass": (FRONT | SIDE) & ~DRAWER & ~DOOR, "drawer": DRAWER, "door": DOOR}
    for d, n in zip(out_d, out_n):   # the moving pieces grow by 1 px over the still rim
        t = truth[n]
        assert (d.mask & t).sum() / d.mask.sum() > (0.99 if n == "carcass" else 0.85), n
        assert (d.mask & t).sum() / t.sum() > (0.75 if n == "carcass" else 0.99), n


def test_a_split_whose_still_piece_loses_its_masks_name_is_refused():
    """Cabinet s131's split (far, 5 m): the carcass's mask cut into a moving piece and the still
    rest, renamed by size, gave the rest door; s109's gave it carcass, the cut mask's name."""
    carcass_mask, rest = FRONT & ~DRAWER, FRONT & ~DRAWER & ~DOOR
    cut = [(carcass_mask, "carcass"), (SIDE, "door")]
    assert not still_keeps_name(rest, cut, [(DOOR, "drawer"), (rest, "door")])
    assert still_keeps_name(rest, cut, [(DOOR, "door"), (rest, "carcass")])
    assert not still_keeps_name(rest, cut, [(DOOR, "door"), (SIDE, "carcass")])   # the rest unnamed


def test_a_split_giving_a_still_piece_the_name_of_a_wholly_moving_mask_is_refused():
    """Cabinet s131's shares (far, 5 m): the door's name on a mask moving as a whole (0.47), the
    carcass's on a mask partly still (0.34, split); the split by size gave the still rest door
    and the moving mask carcass. s109's split (the carcass's name from the mask partly still to the
    still rest, the door's from a still strip to the moving piece) is allowed."""
    s131 = (["door", "carcass", "drawer"], np.array([0.47, 0.34, 0.095]), [1])
    assert still_takes_moving_name(s131, (["carcass", "drawer", "door"], np.array([0.47, 0.62, 0.0])))
    s109 = (["carcass", "drawer", "door"], np.array([0.47, 0.75, 0.12]), [0, 2])
    assert not still_takes_moving_name(s109, (["drawer", "door", "carcass"], np.array([0.75, 0.9, 0.0])))
