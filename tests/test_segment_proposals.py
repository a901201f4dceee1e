"""Segment's moving-region proposals (the fallback where a library shape is unnamed): only
regions that move away from where they are, and that touch the named parts in 3-D."""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import smooth_depth
from vid2sim.pipeline.segment_still import DepthMotion, moves_away, moving_proposals

K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])
CART = Shape("cart", "box", size=(0.3, 0.16, 0.1))
POLE = Shape("pole", "capsule", radius=0.025, length=0.5)


class _Regions:
    """A stand-in for ``DepthMotion`` whose frame has the given moving regions (no per-frame changes)."""

    def __init__(self, regions: np.ndarray):
        self.regions = regions

    def changed(self, i: int):
        return None, None, self.regions


def _box(v0: int, v1: int, u0: int, u1: int) -> np.ndarray:
    m = np.zeros((240, 320), bool)
    m[v0:v1, u0:u1] = True
    return m


def _disc(v: int, u: int, r: int) -> np.ndarray:
    vv, uu = np.mgrid[:240, :320]
    return (vv - v) ** 2 + (uu - u) ** 2 <= r * r


def _motion(depths: dict[int, np.ndarray]) -> DepthMotion:
    """A ``DepthMotion`` over the given sampled depth frames (exact depth: only ``MIN_CHANGE`` counts)."""
    dm = DepthMotion.__new__(DepthMotion)
    dm.depths, dm.frames, dm.k, dm.fx = depths, sorted(depths), 0.0, float(K[0, 0])
    dm._rec, dm._s, dm._cache = None, 1, {}
    return dm


def test_a_moving_region_apart_from_the_named_parts_in_depth_is_no_proposal():
    """A region beside the cart in the image but 0.5 m behind it (a moving distractor) is no
    part; the same region at the cart's depth is proposed for the unnamed pole."""
    cart = _box(100, 124, 100, 145)  # 0.30 x 0.16 m at 2 m
    cart_det = Detection(cart, CLASSES.index("box"), 0.9, np.eye(len(CLASSES))[CLASSES.index("box")] * 0.9)
    pole = _box(124, 198, 120, 125)  # 0.49 x 0.033 m at 2 m, its top row against the cart's bottom row
    shapes = {"cart": CART, "pole": POLE}
    near = np.full((240, 320), 2.0, np.float32)
    out, seen = moving_proposals(_Regions(pole), 0, [cart_det], ["cart"], shapes, near, K, smooth_depth(near), 1.6, 20)
    assert len(out) == 1 and not (out[0].mask & ~pole).any() and out[0].mask.sum() >= 0.95 * pole.sum()
    assert abs(seen[0][0] - 0.49) < 0.03
    behind = near.copy()
    behind[pole] = 2.5  # 0.5 m behind the cart, 0.40 m long there (still a pole's size)
    out, _ = moving_proposals(_Regions(pole), 0, [cart_det], ["cart"], shapes, behind, K, smooth_depth(behind), 1.6, 20)
    assert out == []


def test_the_background_a_ball_sweeps_over_is_no_proposal():
    """A ball 2 m away before a wall 3 m away moves right: in frame 0 its own pixels change
    (later frames show the wall behind them) and so do the wall pixels it will cover (later
    frames show the ball in front). Only the ball is proposed, though the covered wall
    pixels, 3 m away, look the ball's library size and the ball's own pixels 2/3 of it."""
    wall = np.full((240, 320), 3.0, np.float32)
    frames = {}
    for j, u in ((0, 100), (5, 200), (10, 200)):
        d = wall.copy()
        d[_disc(120, u, 15)] = 2.0
        frames[j] = d
    ball = Shape("ball", "sphere", radius=0.15)  # 30 px across at 3 m is 0.30 m
    dm = _motion(frames)
    _, _, regions = dm.changed(0)
    here, there = _disc(120, 100, 15), _disc(120, 200, 15)
    assert (regions & here).sum() > 0.8 * here.sum() and (regions & there).sum() > 0.8 * there.sum()
    assert moves_away(dm, 0, here) and not moves_away(dm, 0, there)
    d0 = frames[0]
    out, _ = moving_proposals(dm, 0, [], [], {"ball": ball}, d0, K, smooth_depth(d0), 1.6, 20)
    assert len(out) == 1 and (out[0].mask & here).sum() > 0.9 * out[0].mask.sum()


def test_a_region_whose_changes_show_no_surface_is_no_proposal():
    """Where a known actuator passes, its pixels are holes: the floor there changes (no
    reading) but shows no surface behind it, so it is not proposed as the unnamed link,
    while a link that moves away, showing the floor behind it, is."""
    floor = np.full((240, 320), 2.0, np.float32)
    link = Shape("link", "box", size=(0.16, 0.05, 0.03))
    path = _box(150, 158, 100, 124)  # 0.16 x 0.05 m at 2 m, where the actuator will pass (holes)
    frames = {0: floor.copy()}
    for j in (5, 10):
        d = floor.copy()
        d[path] = 0.0
        frames[j] = d
    dm = _motion(frames)
    assert dm.changed(0)[2][path].mean() > 0.5 and not moves_away(dm, 0, path)  # its rim sees the floor beside it
    assert moving_proposals(dm, 0, [], [], {"link": link}, floor, K, smooth_depth(floor), 1.6, 20) == ([], [])
    near = floor.copy()
    near[path] = 1.8  # a link 0.2 m above the floor at frame 0, gone later: the floor shows behind it
    frames[0] = near
    dm = _motion(frames | {5: floor, 10: floor})
    assert moves_away(dm, 0, path)
    out, _ = moving_proposals(dm, 0, [], [], {"link": link}, near, K, smooth_depth(near), 1.6, 20)
    assert len(out) == 1 and (out[0].mask & path).sum() > 0.9 * out[0].mask.sum()


def test_a_part_whose_changes_are_mostly_holes_is_proposed():
    """On RealSense-like depth a part that moves away often leaves no reading (a far chain: 68 %
    of its changes holes, 31 % a farther surface): it is still a part moving away."""
    floor = np.full((240, 320), 2.0, np.float32)
    link = Shape("link", "box", size=(0.16, 0.05, 0.03))
    path = _box(150, 158, 100, 124)
    near = floor.copy()
    near[path] = 1.8
    gone = floor.copy()
    gone[path] = 0.0  # the link moved away, the sensor reads nothing there
    dm = _motion({0: near, 4: gone, 8: gone, 12: floor})
    assert moves_away(dm, 0, path)
    out, _ = moving_proposals(dm, 0, [], [], {"link": link}, near, K, smooth_depth(near), 1.6, 20)
    assert len(out) == 1 and (out[0].mask & path).sum() > 0.9 * out[0].mask.sum()
