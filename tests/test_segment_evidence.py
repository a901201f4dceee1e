"""Segment names the chosen frame's parts by their size over every candidate frame
(segment_evidence.linked_sizes), not by the chosen frame's masks alone."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment import _confirmed, match_shapes
from vid2sim.pipeline.segment_evidence import LINK_IOU, linked_sizes
from vid2sim.pipeline.segment_size import size_cost
from vid2sim.pipeline.segment_still import Motion, contested

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


CARTPOLE = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)),
            "pole": Shape("pole", "capsule", radius=0.02, length=0.56)}


def _name(dets, seen, shapes, motion=None):
    """match_shapes, then the low-score parts kept only for open shapes (_confirmed), then
    match_shapes again on those kept: the order segment._name_frame names a frame in."""
    names = match_shapes(dets, seen, shapes, True, 1.6, Path("x"), 0, "ignore", motion)
    keep = _confirmed(dets, names, seen, shapes, True, 1.6, 0.5, motion)
    kept = [dets[k] for k in keep]
    return keep, match_shapes(kept, [seen[k] for k in keep], shapes, True, 1.6, Path("x"), 0, "ignore", motion)


def test_a_still_distractor_loses_the_cart_to_the_moving_cart():
    """Random scene 28's cartpole (424 x 240, 1.2 m): a still distractor box 0.7 m behind
    (0.134 x 0.111 m, score 0.72) is named cart, the moving cart's own detection (0.156 x
    0.086 m, score 0.36, below the threshold) dropped for a name already taken. With the
    narrow cue (StillMotion) the still box pays STILL_COST for the cart, which the moving
    detection fits best, and the moving detection is kept and named cart."""
    dets = [Detection(_box(300, 20, 318, 35), 0, 0.72), Detection(_box(100, 40, 110, 140), 1, 0.61),
            Detection(_box(90, 140, 125, 160), 0, 0.36)]
    seen = [(0.134, 0.111), (0.605, 0.047), (0.156, 0.086)]
    keep, names = _name(dets, seen, CARTPOLE)
    assert keep == [0, 1] and names == ["cart", "pole"]
    cue = Motion(np.array([0.0, 0.95, 0.52]), np.ones(3, bool), narrow=True)
    keep, names = _name(dets, seen, CARTPOLE, cue)
    assert [names[keep.index(k)] if k in keep else None for k in range(3)][1:] == ["pole", "cart"]
    assert 0 not in keep or names[keep.index(0)] is None


def test_the_narrow_cue_leaves_the_still_carcass_its_name():
    """The cabinet's carcass is still by nature. The full cue (every name dearer for a still
    part where one moves) gives its name to the moving door, whose mask fits the carcass at
    size cost 0.53, and the door's to a moving low-score sliver of the carcass's rim beside
    the drawer (0.330 x 0.043 m; frame 3 of random scene 28); the narrow cue charges the
    still part only for the shapes a moving detection fits best (here the drawer: the door's
    mask fits door and drawer alike, and of the shapes the still carcass fits, the drawer
    costs it most; the sliver fits door and drawer about alike and contests the drawer for
    the same reason), so the carcass keeps its name and the sliver is left out."""
    dets = [Detection(DOOR, 0, 0.94), Detection(CARCASS, 0, 0.94), Detection(DRAWER, 0, 0.94),
            Detection(_box(330, 20, 340, 120), 0, 0.18)]
    seen = [(0.390, 0.280), (0.560, 0.265), (0.366, 0.097), (0.330, 0.043)]
    shares = np.array([0.95, 0.03, 0.88, 0.56])
    full = match_shapes(dets, seen, CABINET, True, 1.6, Path("x"), 3, "ignore", Motion(shares, np.ones(4, bool)))
    assert full == ["carcass", None, "drawer", "door"]
    cue = Motion(shares, np.ones(4, bool), narrow=True)
    assert match_shapes(dets, seen, CABINET, True, 1.6, Path("x"), 3, "ignore", cue) == ["door", "carcass", "drawer", None]
    cost = np.array([[0.53, 0.38, 0.38], [0.62, 1.13, 0.85], [2.12, 0.31, 1.96], [3.16, 1.36, 1.30]])
    assert contested(cost, cue).tolist() == [0.0, 1.0, 0.0]


def test_a_moving_part_fitting_two_shapes_alike_contests_the_one_the_still_part_does_not_fit():
    """tree5, clean random scene 57, frame 9: the moving fin's mask (0.102 x 0.057 m) fits the
    hub at 0.50 and the fin at 0.61; the still hub beside it (0.119 x 0.073 m, score 0.22)
    fits them at 0.12 and 0.67. Charging the still hub for the hub (the moving fin's best
    fit) swapped their names; the moving fin contests the fin, and each keeps its own."""
    cost = np.array([[0.50, 0.61, np.inf], [0.12, 0.67, np.inf], [np.inf, np.inf, 0.35]])
    cue = Motion(np.array([0.97, 0.14, 0.97]), np.ones(3, bool), narrow=True)
    assert contested(cost, cue).tolist() == [0.0, 1.0, 1.0]
    # a moving cart that fits only the cart contests it: a still look-alike loses the name
    cart = np.array([[0.30, np.inf], [0.20, np.inf], [np.inf, 0.4]])
    assert contested(cart, cue).tolist() == [1.0, 1.0]
    # a second shape fitted much worse (beyond CONTEST_MARGIN) leaves the best fit contested
    far = np.array([[0.30, 0.90, np.inf], [0.20, 1.50, np.inf], [np.inf, np.inf, 0.4]])
    assert contested(far, cue).tolist() == [1.0, 0.0, 1.0]
    # tree5, RealSense-like random scene 54, frame 12: a moving fragment over two arms, classed
    # cylinder, fits the hub (a box) at 1.64 and the fin at 2.01; it contests neither, and the
    # still hub (0.25) keeps its name
    frag = np.array([[1.64, 2.01, np.inf], [0.25, 0.61, np.inf], [np.inf, np.inf, 0.35]])
    assert contested(frag, cue).tolist() == [1.0, 0.0, 1.0]
    alike = np.array([[False, False, False], [True, True, False], [False, False, True]])
    assert contested(frag, cue, alike).tolist() == [0.0, 0.0, 1.0]
