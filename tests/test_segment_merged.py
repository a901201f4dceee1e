"""Segment cuts rods out of masks that hold a rod and its neighbour (segment_merged)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import smooth_depth
from vid2sim.pipeline.segment_match import SURPLUS_SIZE_COST, match_shapes
from vid2sim.pipeline.segment_merged import rods_from_merged
from vid2sim.pipeline.segment_missing import split_rods
from vid2sim.pipeline.segment_size import measure_extents

from image_masks import rod

K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])   # at 2 m: 150 px per m
SHAPES = {"hub": Shape("hub", "box", size=(0.12, 0.12, 0.08)),
          "arm_a": Shape("arm_a", "capsule", radius=0.02, length=0.3),
          "fin_a": Shape("fin_a", "box", size=(0.14, 0.03, 0.06)),
          "arm_b": Shape("arm_b", "capsule", radius=0.02, length=0.25)}
CAPSULE, BOX = CLASSES.index("capsule"), CLASSES.index("box")


def _rod(a, b, width: float = 3.0) -> np.ndarray:
    return rod(a, b, width)


def _box(u0, v0, u1, v1) -> np.ndarray:
    m = np.zeros((240, 320), bool)
    m[v0:v1, u0:u1] = True
    return m


def test_two_arms_end_to_end_in_one_mask_are_cut_across_their_axis():
    """Random scene 117 (RealSense-like): arms of 0.30 and 0.25 m hinged end to end, nearly in line,
    come out as one capsule mask named arm_a (0.47 m seen). Carving arm_a's segment first takes it
    across the joint (its 51 px fit anywhere along the 88 px chain) and leaves no arm_b; the cut
    across the chain's axis gives each arm its own pixels."""
    depth = np.full((240, 320), 2.0, np.float32)
    first, second = _rod((60, 120), (105, 121)), _rod((105, 121), (143, 123))
    det = Detection(first | second, CAPSULE, 0.55, None)
    smoothed = smooth_depth(depth)
    seen = measure_extents(det.mask, depth, K, smoothed)
    dets, ext, names = split_rods(([det], [seen], ["arm_a"]), ["arm_a", "arm_b"], SHAPES, depth, K, smoothed,
                                  1.6, 20, SURPLUS_SIZE_COST)
    assert names == ["arm_a", "arm_b"]
    for m, truth in zip([d.mask for d in dets], (first, second)):
        assert (m & truth).sum() >= 0.9 * m.sum() and (m & truth).sum() >= 0.8 * truth.sum()
    assert ext[0][0] > ext[1][0] > 0.18   # m: arm_a seen longer than arm_b


def _rename(ds, es):
    return match_shapes(ds, es, SHAPES, True, 1.6, Path("shapes.json"), 0, "ignore")


def _tree():
    """Hub, arm_a hanging from it with the fin on its lower end, arm_b below in line; the
    segmenter's masks: hub, the fin (its outer half), arm_b, and one mask over arm_a and the fin."""
    depth = np.full((240, 320), 2.0, np.float32)
    hub, arm_a = _box(142, 40, 160, 58), _rod((151, 58), (151, 109))
    fin, arm_b = _box(154, 100, 175, 109), _rod((151, 110), (151, 153))
    found = [Detection(hub, BOX, 0.7, None), Detection(fin & _box(165, 0, 320, 240), BOX, 0.5, None),
             Detection(arm_b, CAPSULE, 0.4, None), Detection(arm_a | fin, BOX, 0.55, None)]
    return depth, found, arm_a, arm_b


def test_an_arm_merged_with_its_fin_is_cut_out_and_both_arms_are_named():
    """Random scene 108 (RealSense-like): arm_a and the fin on it in one mask (0.35 x 0.16 m, no
    shape that large), the fin also found alone, arm_b named arm_a. The moving arm is cut out of
    the merged mask and named: both arms get their own pixels."""
    depth, found, arm_a, arm_b = _tree()
    smoothed = smooth_depth(depth)
    named = found[:3]
    seen = [measure_extents(d.mask, depth, K, smoothed) for d in named]
    parts = (named, seen, _rename(named, seen))
    assert "arm_b" not in parts[2]
    dets, ext, names = rods_from_merged(parts, found, list(SHAPES), SHAPES, depth, K, smoothed, 1.6, 20,
                                        SURPLUS_SIZE_COST, _rename, 0, lambda ms: np.ones(len(ms), bool))
    assert sorted(names) == ["arm_a", "arm_b", "fin_a", "hub"]
    by_name = dict(zip(names, [d.mask for d in dets]))
    for name, truth in (("arm_a", arm_a), ("arm_b", arm_b)):
        m = by_name[name]
        assert (m & truth).sum() >= 0.85 * m.sum() and (m & truth).sum() >= 0.8 * truth.sum(), name
    still = rods_from_merged(parts, found, list(SHAPES), SHAPES, depth, K, smoothed, 1.6, 20, SURPLUS_SIZE_COST,
                             _rename, 0, lambda ms: np.zeros(len(ms), bool))
    assert still[2] == parts[2]   # a rod that does not move is no part
