"""A library sphere named on a still look-alike, found inside a moving rod's mask (pipeline/segment_inside.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_contact import apart_from_mechanism
from vid2sim.pipeline.segment_inside import drop_apart_repeats, sphere_inside, sphere_search
from vid2sim.pipeline.segment_match import SURPLUS_SIZE_COST, match_shapes
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_sphere import sphere_disk
from vid2sim.pipeline.segment_still import Motion

from sphere_scene import H, K, LIB, R, W, rod_x, sphere_depth

CAPSULE, SPHERE = CLASSES.index("capsule"), CLASSES.index("sphere")


def _ball_behind_a_rod_end() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(depth (H, W) m, the rod's pixels, the ball's, a still look-alike ball's): a rod 0.02 m
    in radius ending over the upper half of a ball of the library radius at 0.8 m, 0.03 m in
    front of its centre and 0.03 m above it; a ball 0.05 m in radius on the floor apart from
    them, at 1.0 m. 0.5 mm of depth noise."""
    c = np.array([0.0, 0.0, 0.8])
    rod = rod_x(c + [0, -0.03, -0.03], 0.02, -0.27, 0.0)
    ball = sphere_depth(c, R)
    other = sphere_depth(np.array([0.25, 0.12, 1.0]), 0.05)
    z = np.minimum.reduce([rod, ball, other])
    masks = [np.isfinite(d) & (d <= z + 1e-9) for d in (rod, ball, other)]
    z = np.where(np.isfinite(z), z + np.random.default_rng(0).normal(0, 0.0005, z.shape), 0.0)
    return z.astype(np.float32), *masks


def test_a_ball_a_rod_crosses_in_front_of_is_found_by_its_surface_not_by_the_largest_disk():
    z, rod, ball, _ = _ball_behind_a_rod_end()
    mask = (rod | ball) & (np.mgrid[:H, :W][0] < 135)   # the ball's centre row is 120
    held = ball & mask
    # the largest disk the mask holds straddles the rod and the ball: no sphere there
    assert sphere_disk(mask, z, K, R) is None
    found = sphere_search(mask, z, K, R)
    assert found is not None
    assert (found & held).sum() >= 0.9 * held.sum()
    assert (found & rod).sum() <= 0.1 * found.sum()
    # a box face holds the disk too, but its depth is a plane: nothing found
    face = np.zeros((H, W), bool)
    face[80:160, 120:200] = True
    assert sphere_search(face, np.where(face, 0.8, 0.0).astype(np.float32), K, R) is None


def test_a_sphere_named_on_a_still_loose_look_alike_is_cut_out_of_the_moving_rod_mask():
    z, rod, ball, other = _ball_behind_a_rod_end()
    mask = (rod | ball) & (np.mgrid[:H, :W][0] < 135)
    dets = [Detection(mask, CAPSULE, 0.5, np.array([0.0, 0.5, 0.0, 0.05])),
            Detection(other, CAPSULE, 0.6, np.array([0.0, 0.6, 0.2, 0.0]))]
    seen = [measure_extents(d.mask, z, K) for d in dets]
    names = ["arm", "ball"]   # the ball's name on the look-alike on the floor

    def name(ds, es):
        return match_shapes(ds, es, LIB, True, 1.6, Path("x"), 0, "ignore")

    before = size_cost(seen[0], LIB["arm"], True, 1.6)
    assert before > 0.7   # the rod's mask is wider than the arm looks (0.80)
    cues = Motion(np.array([0.9, 0.0]), np.array([True, False]))   # the rod moves; the look-alike is still and apart
    out_dets, out_seen, out_names = sphere_inside(cues, (dets, seen, names), name, LIB, z, K, z, 1.6, 20,
                                                  SURPLUS_SIZE_COST)
    assert sorted(out_names) == ["arm", "ball"] and len(out_dets) == 2
    got = dict(zip(out_names, out_dets))
    assert (got["ball"].mask & ball & mask).sum() >= 0.9 * (ball & mask).sum()
    assert not (got["ball"].mask & other).any() and got["ball"].label == SPHERE
    assert (got["arm"].mask & rod).sum() >= 0.95 * got["arm"].mask.sum()
    arm_seen = out_seen[out_names.index("arm")]
    assert size_cost(arm_seen, LIB["arm"], True, 1.6) < 0.3   # 0.24
    # the look-alike attached to moving parts (a ball of the mechanism): the naming stays
    kept = sphere_inside(Motion(np.array([0.9, 0.0]), np.array([True, True])), (dets, seen, names), name, LIB, z, K,
                         z, 1.6, 20, SURPLUS_SIZE_COST)
    assert kept[2] == names and kept[0] is dets


def _hub_face(x0: float, x1: float, y0: float, y1: float, z: float) -> np.ndarray:
    """(H, W) depth (m) of a fronto-parallel rectangle at depth z, inf elsewhere."""
    v, u = np.mgrid[:H, :W]
    x, y = (u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z
    return np.where((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1), z, np.inf)


def test_a_sphere_named_on_a_look_alike_the_ball_crosses_in_front_of_is_cut_out_when_apart_in_depth():
    """The look-alike's depth changes as the ball passes in front of it (share 0.2: 'moving'),
    and a moving region touches it in the image, so it is not loose; in 3-D it lies 0.2 m from
    every part of the mechanism (the arm, with the ball in its mask, and the hub at its end)."""
    c = np.array([0.0, 0.0, 0.8])
    rod = rod_x(c + [0, -0.03, -0.03], 0.02, -0.27, 0.0)
    ball = sphere_depth(c, R)
    hub = _hub_face(-0.39, -0.27, -0.07, 0.01, 0.75)   # the face the rod's end meets
    other = sphere_depth(np.array([0.25, 0.12, 1.0]), 0.05)
    z = np.minimum.reduce([rod, ball, hub, other])
    rod_m, ball_m, hub_m, other_m = (np.isfinite(d) & (d <= z + 1e-9) for d in (rod, ball, hub, other))
    z = np.where(np.isfinite(z), z + np.random.default_rng(0).normal(0, 0.0005, z.shape), 0.0).astype(np.float32)
    arm = (rod_m | ball_m) & (np.mgrid[:H, :W][0] < 135)
    dets = [Detection(arm, CAPSULE, 0.5, np.array([0.0, 0.5, 0.0, 0.05])),
            Detection(hub_m, CLASSES.index("box"), 0.7, np.array([0.7, 0.0, 0.0, 0.0])),
            Detection(other_m, CAPSULE, 0.6, np.array([0.0, 0.6, 0.2, 0.0]))]
    seen = [measure_extents(d.mask, z, K) for d in dets]
    names = ["arm", "hub", "ball"]
    apart = apart_from_mechanism([d.mask for d in dets], z, K, 0.0)
    assert apart.tolist() == [False, False, True]
    # two masks, or the look-alike touching the hub: nothing apart
    assert not apart_from_mechanism([arm, other_m], z, K, 0.0).any()
    near = _hub_face(-0.39, -0.27, 0.012, 0.06, 0.75)
    assert not apart_from_mechanism([arm, hub_m, np.isfinite(near)], np.where(np.isfinite(near), near, z).astype(
        np.float32), K, 0.0).any()

    def name(ds, es):
        return match_shapes(ds, es, LIB, True, 1.6, Path("x"), 0, "ignore")

    cues = Motion(np.array([0.9, 0.0, 0.2]), np.array([True, True, True]))
    kept = sphere_inside(cues, (dets, seen, names), name, LIB, z, K, z, 1.6, 20, SURPLUS_SIZE_COST)
    assert kept[2] == names and kept[0] is dets   # not loose in the image: the naming stays without ``apart``
    out_dets, out_seen, out_names = sphere_inside(cues, (dets, seen, names), name, LIB, z, K, z, 1.6, 20,
                                                  SURPLUS_SIZE_COST, apart)
    assert sorted(out_names) == ["arm", "ball", "hub"]
    got = dict(zip(out_names, out_dets))
    assert (got["ball"].mask & ball_m & arm).sum() >= 0.9 * (ball_m & arm).sum()
    assert not (got["ball"].mask & other_m).any()
    assert size_cost(out_seen[out_names.index("arm")], LIB["arm"], True, 1.6) < 0.3


def test_a_sphere_name_repeated_on_a_look_alike_apart_from_the_mechanism_is_dropped():
    z, rod, ball, other = _ball_behind_a_rod_end()
    dets = [Detection(rod, CAPSULE, 0.5), Detection(ball, SPHERE, 0.8), Detection(other, SPHERE, 0.9)]
    seen = [(0.27, 0.04), (0.09, 0.09), (0.1, 0.1)]
    (d, e, n), apart = drop_apart_repeats((dets, seen, ["arm", "ball", "ball"]), np.array([False, False, True]),
                                          ["ball"])
    assert n == ["arm", "ball"] and d[1] is dets[1] and e == seen[:2] and apart.tolist() == [False, False]
    # the only ball's name on the apart part stays (sphere_inside looks for it inside the moving masks)
    parts = (dets[::2], seen[::2], ["arm", "ball"])
    again, apart = drop_apart_repeats(parts, np.array([False, True]), ["ball"])
    assert again is parts and apart.tolist() == [False, True]
