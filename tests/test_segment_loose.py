"""Segment at a far camera: a library name on a still piece joined to nothing that moves (a table's
leg named as the pole) goes to the moving region of that shape's size no part covers; a still
part joined to a moving one (a base holding its link) and a name nothing moving can take stay."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import smooth_depth
from vid2sim.pipeline.segment_loose import loose_parts, loose_to_moving
from vid2sim.pipeline.segment_match import match_shapes
from vid2sim.pipeline.segment_size import measure_extents
from vid2sim.pipeline.segment_still import DepthMotion

H, W = 240, 320
K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])
SHAPES = {"cart": Shape("cart", "box", size=(0.3, 0.16, 0.1)),
          "pole": Shape("pole", "capsule", radius=0.02, length=0.5)}
WALL_M, CART_M, LEG_M = 3.0, 2.0, 2.4


def _rod(top: tuple[float, float], angle: float, length_px: float, half_width_px: float) -> np.ndarray:
    """(H, W) bool: pixels within ``half_width_px`` of the image segment from ``top`` (u, v)
    ``length_px`` long, ``angle`` rad from straight down."""
    vv, uu = np.mgrid[:H, :W].astype(float)
    d = np.array([np.sin(angle), np.cos(angle)])
    p = np.stack([uu - top[0], vv - top[1]], -1)
    t = np.clip(p @ d, 0.0, length_px)
    return np.hypot(*(p - t[..., None] * d).transpose(2, 0, 1)) <= half_width_px


def _cart(u0: int) -> np.ndarray:
    m = np.zeros((H, W), bool)
    m[100:124, u0:u0 + 45] = True   # 0.30 x 0.16 m at 2 m
    return m


def _frame(j: int, leg_m: float, with_pole: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(depth m, cart mask, pole mask) of frame j: the cart slides 12 px a frame, its pole (0.54 x
    0.04 m) swings 0.35 rad a frame below it, a still rod of the pole's size (a table's leg) stands
    at ``leg_m`` m at the left, in front of a wall at ``WALL_M`` m."""
    depth = np.full((H, W), WALL_M, np.float32)
    depth[_rod((32.0, 120.0), 0.0, 84.0, 2.5)] = leg_m
    cart = _cart(150 + 12 * j)
    pole = _rod((172.0 + 12 * j, 124.0), 0.35 * j * (-1) ** j, 78.0, 3.0) & ~cart if with_pole else cart & False
    depth[pole] = CART_M
    depth[cart] = CART_M
    return depth, cart, pole


def _motion(depths: dict[int, np.ndarray]) -> DepthMotion:
    """A ``DepthMotion`` over the given sampled depth frames (exact depth: only ``MIN_CHANGE`` counts)."""
    dm = DepthMotion.__new__(DepthMotion)
    dm.depths, dm.frames, dm.k, dm.fx = depths, sorted(depths), 0.0, float(K[0, 0])
    dm._rec, dm._s, dm._cache = None, 1, {}
    return dm


def _det(mask: np.ndarray, cls: str) -> Detection:
    return Detection(mask, CLASSES.index(cls), 0.5, np.eye(len(CLASSES))[CLASSES.index(cls)] * 0.5)


def _scene(leg_m: float, with_pole: bool = True):
    frames = {j: _frame(j, leg_m, with_pole) for j in range(8)}
    depth, cart, pole = frames[0]
    leg = _rod((32.0, 120.0), 0.0, 84.0, 2.5)
    smoothed = smooth_depth(depth)
    parts = ([_det(cart, "box"), _det(leg, "capsule")],
             [measure_extents(cart, depth, K, smoothed), measure_extents(leg, depth, K, smoothed)], ["cart", "pole"])
    return _motion({j: f[0] for j, f in frames.items()}), depth, smoothed, parts, pole, leg


def _rename(dets, seen):
    return match_shapes(dets, seen, SHAPES, True, 1.6, Path("shapes.json"), 0, "ignore")


def test_a_pole_name_on_a_still_leg_apart_from_the_moving_cart_goes_to_the_swinging_pole():
    motion, depth, smoothed, parts, pole, leg = _scene(LEG_M)
    assert loose_parts(motion, 0, [d.mask for d in parts[0]], depth, K, 20).tolist() == [False, True]
    dets, seen, names = loose_to_moving(motion, 0, parts, _rename, SHAPES, depth, K, smoothed, 1.6, 20, 1.0)
    assert sorted(names) == ["cart", "pole"]
    got = dets[names.index("pole")].mask
    assert not (got & leg).any()
    assert (got & pole).sum() >= 0.8 * got.sum() and (got & pole).sum() >= 0.7 * pole.sum()
    assert abs(seen[names.index("pole")][0] - 0.54) < 0.1
    assert dets[names.index("cart")].mask is parts[0][0].mask


def test_a_still_plate_touching_the_swinging_pole_in_depth_is_not_loose():
    """A still plate at the cart's depth right under the pole's hinge (a base holding a moving
    link) is joined to what moves; the leg 0.4 m behind the mechanism is not."""
    motion, _, _, parts, _, _ = _scene(LEG_M)
    base = np.zeros((H, W), bool)
    base[124:130, 150:172] = True
    for d in motion.depths.values():
        d[base] = CART_M
    masks = [parts[0][0].mask, base, parts[0][1].mask]
    assert loose_parts(motion, 0, masks, motion.depths[0], K, 20).tolist() == [False, False, True]


def test_a_name_no_moving_region_can_take_stays_on_the_still_piece():
    """Without the swinging pole nothing moving is of the pole's size: the leg keeps the name."""
    motion, depth, smoothed, parts, _, leg = _scene(LEG_M, with_pole=False)
    assert loose_parts(motion, 0, [d.mask for d in parts[0]], depth, K, 20).tolist() == [False, True]
    out = loose_to_moving(motion, 0, parts, _rename, SHAPES, depth, K, smoothed, 1.6, 20, 1.0)
    assert out[2] == ["cart", "pole"] and (out[0][1].mask == leg).all()
