"""Segment names the chosen frame's parts by their size over every candidate frame
(segment_evidence.linked_sizes), not by the chosen frame's masks alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import match_shapes
from vid2sim.pipeline.segment_evidence import LINK_IOU, linked_sizes
from vid2sim.pipeline.segment_size import size_cost

CABINET = {"carcass": Shape("carcass", "box", size=(0.5, 0.4, 0.6)),
           "drawer": Shape("drawer", "box", size=(0.4, 0.36, 0.12)),
           "door": Shape("door", "box", size=(0.46, 0.02, 0.36))}
NAMES = list(CABINET)


def _box(u0, v0, u1, v1, h=240, w=424):
    m = np.zeros((h, w), bool)
    m[v0:v1, u0:u1] = True
    return m


# random scene 28's cabinet (424 x 240, 0.7 m): the extents segment measured (m) of the door,
# carcass and drawer masks in frame 3 (the frame chosen) and in frames 6, 9, 12
DOOR, CARCASS, DRAWER = _box(40, 40, 160, 200), _box(170, 20, 330, 120), _box(170, 125, 320, 200)
FRAME3 = [(0.396, 0.286), (0.561, 0.231), (0.415, 0.217)]  # the drawer mask also covers a fifth of the carcass
LATER = [[(0.390, 0.280), (0.560, 0.265), (0.366, 0.097)],
         [(0.393, 0.271), (0.564, 0.251), (0.397, 0.165)],
         [(0.386, 0.264), (0.560, 0.247), (0.360, 0.098)]]


def test_a_door_seen_smaller_than_it_is_fits_door_and_drawer_alike():
    """The failure the frames' evidence mends: a region smaller than both the door's front
    (0.46 x 0.36) and the drawer's top (0.4 x 0.36) and longer in proportion than both costs
    the same for each (the length and aspect terms cancel), so frame 3 names by its drawer
    mask, which covering carcass too fits the door better (0.76 against 0.84): a swap."""
    door = [size_cost(FRAME3[0], CABINET[n], True, 1.6) for n in ("door", "drawer")]
    assert abs(door[0] - door[1]) < 1e-9
    drawer = [size_cost(FRAME3[2], CABINET[n], True, 1.6) for n in ("door", "drawer")]
    assert drawer[0] < drawer[1]
    dets = [Detection(m, 0, 0.94) for m in (DOOR, CARCASS, DRAWER)]
    names = match_shapes(dets, FRAME3, CABINET, True, 1.6, Path("x"), 3, "ignore")
    assert names == ["drawer", "carcass", "door"]


def test_the_candidate_frames_name_the_drawer_and_the_door_right():
    """With each part's size cost the mean over the frames its mask is found in, the drawer
    region costs 0.45 as the drawer and 1.55 as the door, and names come out right."""
    masks = [DOOR, CARCASS, DRAWER]
    sizes = linked_sizes(masks, FRAME3, [(masks, s) for s in LATER], CABINET, NAMES, True, 1.6)
    assert sizes.shape == (3, 3)
    k_door, k_drawer = NAMES.index("door"), NAMES.index("drawer")
    assert 0.4 < sizes[2, k_drawer] < 0.5 and sizes[2, k_door] > 1.4
    dets = [Detection(m, 0, 0.94) for m in masks]
    names = match_shapes(dets, FRAME3, CABINET, True, 1.6, Path("x"), 3, "ignore", sizes=sizes)
    assert names == ["door", "carcass", "drawer"]


def test_a_mask_of_another_frame_counts_only_where_it_overlaps_the_part():
    """A mask of another frame overlapping the part less than LINK_IOU is another part: the
    part keeps its own frame's cost. An inf in another frame (its mask there also covers a
    neighbour) is left out, an inf in its own frame stays."""
    part = _box(0, 0, 100, 100)
    shifted = _box(60, 0, 160, 100)  # IoU 40 / 160 = 0.25
    assert 40 * 100 / (160 * 100) < LINK_IOU
    own = [(0.396, 0.286)]
    alone = linked_sizes([part], own, [], CABINET, NAMES, True, 1.6)
    far = linked_sizes([part], own, [([shifted], [(0.366, 0.097)])], CABINET, NAMES, True, 1.6)
    assert np.allclose(alone, far)
    huge = linked_sizes([part], own, [([part], [(5.0, 3.0)])], CABINET, NAMES, True, 1.6)
    assert np.allclose(huge, alone)
    big = linked_sizes([part], [(0.7, 0.5)], [([part], [(0.36, 0.1)])], CABINET, NAMES, True, 1.6)
    assert np.isinf(big[0, NAMES.index("drawer")])
