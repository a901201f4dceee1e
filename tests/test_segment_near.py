"""A library name held only by a look-alike apart from the mechanism, given to a moving detection
joined to it in 3-D (pipeline/segment_near.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_contact import apart_from_mechanism
from vid2sim.pipeline.segment_match import SURPLUS_SIZE_COST, match_shapes
from vid2sim.pipeline.segment_near import near_mechanism
from vid2sim.pipeline.segment_size import measure_extents, size_cost

from sphere_scene import F, H, K, LIB, R, W, rod_x, sphere_depth

BOX, CAPSULE, SPHERE, CYLINDER = (CLASSES.index(c) for c in ("box", "capsule", "sphere", "cylinder"))
WANTED = {"arm", "hub", "ball"}


def _face(x0: float, x1: float, y0: float, y1: float, z: float) -> np.ndarray:
    """(H, W) depth (m) of a fronto-parallel rectangle at depth z, inf elsewhere."""
    v, u = np.mgrid[:H, :W]
    x, y = (u - K[0, 2]) / F * z, (v - K[1, 2]) / F * z
    return np.where((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1), z, np.inf)


def _tree_and_look_alike() -> tuple[np.ndarray, list[np.ndarray]]:
    """(depth (H, W) m, [the arm's, the hub's, the ball's, the look-alike's pixels]): a rod 0.02 m
    in radius at 0.8 m along camera x from -0.27 to 0 m; the hub's 0.12 x 0.08 m face touching
    its end at 0.78 m; a ball of the library radius at (-0.29, 0, 0.82) m, the rod's end in
    front of a third of it; a whole ball of the library radius at 1.1 m, 0.3 m from the arm."""
    arm = rod_x(np.array([0.0, 0.0, 0.8]), 0.02, -0.27, 0.0)
    hub = _face(0.0, 0.12, -0.04, 0.04, 0.78)
    ball = sphere_depth(np.array([-0.29, 0.0, 0.82]), R)
    look = sphere_depth(np.array([0.25, 0.12, 1.1]), R)
    z = np.minimum.reduce([arm, hub, ball, look])
    masks = [np.isfinite(d) & (d <= z + 1e-9) for d in (arm, hub, ball, look)]
    return np.where(np.isfinite(z), z, 0.0).astype(np.float32), masks


def _det(mask: np.ndarray, label: int, score: float) -> Detection:
    return Detection(mask, label, score, np.eye(len(CLASSES))[label] * score)


def _rename(z: np.ndarray):
    def rename(ds: list[Detection], es: list[tuple[float, float]]) -> list[str | None]:
        return match_shapes(ds, es, LIB, True, 1.6, Path("x"), 0, "ignore")
    return rename


def test_a_ball_name_on_a_look_alike_apart_goes_to_the_moving_ball_joined_to_the_arm():
    z, (arm, hub, ball, look) = _tree_and_look_alike()
    assert 0.2 < (ball & ~(arm | hub)).sum() / (sphere_depth(np.array([-0.29, 0.0, 0.82]), R) < np.inf).sum() < 0.9
    found = [_det(arm, CAPSULE, 0.8), _det(hub, BOX, 0.7), _det(ball, SPHERE, 0.45), _det(look, SPHERE, 0.5)]
    seen = [measure_extents(d.mask, z, K) for d in found]
    # by size alone the whole look-alike fits the ball's shape better than the half-hidden ball
    assert size_cost(seen[3], LIB["ball"], True, 1.6) < size_cost(seen[2], LIB["ball"], True, 1.6)
    assert _rename(z)(found, seen)[3] == "ball"   # the one-per-shape assignment gives it the look-alike
    parts = ([found[0], found[1], found[3]], [seen[0], seen[1], seen[3]], ["arm", "hub", "ball"])
    apart = apart_from_mechanism([arm, hub, look], z, K, 0.0)
    assert apart.tolist() == [False, False, True]

    def moves(share_ball: float):
        # the arm and the ball swing (0.9); the hub is still; the look-alike is a moving distractor (0.3)
        return lambda ms: np.array([0.9 if (m & arm).sum() > 0.5 * m.sum() else share_ball if (m & ball).sum()
                                    > 0.5 * m.sum() else 0.3 if (m & look).sum() > 0.5 * m.sum() else 0.0 for m in ms])

    out, out_apart = near_mechanism(parts, apart, found, WANTED, moves(0.9), _rename(z), LIB, z, K, z, 0.0, 1.6, 10,
                                    SURPLUS_SIZE_COST)
    got = dict(zip(out[2], out[0]))
    assert sorted(out[2]) == ["arm", "ball", "hub"] and not out_apart.any()
    assert (got["ball"].mask & ball).sum() >= 0.95 * ball.sum()
    assert not (got["ball"].mask & look).any()
    assert got["arm"] is found[0] and got["hub"] is found[1]
    # a still ball (share 0.0) is no part that moves: the names stay
    kept, kept_apart = near_mechanism(parts, apart, found, WANTED, moves(0.0), _rename(z), LIB, z, K, z, 0.0, 1.6, 10,
                                      SURPLUS_SIZE_COST)
    assert kept is parts and kept_apart is apart


def test_a_moving_look_alike_apart_from_the_arm_takes_no_name_from_a_look_alike():
    z, (arm, hub, ball, look) = _tree_and_look_alike()
    # the half-hidden ball moved 0.3 m back, away from the arm: apart from the mechanism too
    far = sphere_depth(np.array([-0.29 * 1.4 / 0.82, 0.0, 1.4]), R)
    zf = np.minimum.reduce([rod_x(np.array([0.0, 0.0, 0.8]), 0.02, -0.27, 0.0), _face(0.0, 0.12, -0.04, 0.04, 0.78),
                            far, sphere_depth(np.array([0.25, 0.12, 1.1]), R)])
    zf = np.where(np.isfinite(zf), zf, 0.0).astype(np.float32)
    far_mask = np.isfinite(far) & (far <= np.where(zf > 0, zf, np.inf) + 1e-9)
    found = [_det(arm, CAPSULE, 0.8), _det(hub, BOX, 0.7), _det(far_mask, SPHERE, 0.45), _det(look, SPHERE, 0.5)]
    seen = [measure_extents(d.mask, zf, K) for d in found]
    parts = ([found[0], found[1], found[3]], [seen[0], seen[1], seen[3]], ["arm", "hub", "ball"])
    apart = np.array([False, False, True])
    out, _ = near_mechanism(parts, apart, found, WANTED, lambda ms: np.full(len(ms), 0.9), _rename(zf), LIB, zf, K, zf,
                            0.0, 1.6, 10, SURPLUS_SIZE_COST)
    assert out is parts
    # nothing apart: nothing looked at
    none, _ = near_mechanism(parts, np.zeros(3, bool), found, WANTED, lambda ms: np.full(len(ms), 0.9), _rename(z),
                             LIB, z, K, z, 0.0, 1.6, 10, SURPLUS_SIZE_COST)
    assert none is parts


def test_an_unnamed_hub_seen_as_a_cylinder_touching_the_arm_is_named_and_a_still_box_apart_is_not():
    z, (arm, hub, ball, look) = _tree_and_look_alike()
    # a still box of the hub's size 0.3 m behind the arm, off to the side
    box = _face(0.15, 0.27, 0.06, 0.18, 1.1)
    zb = np.where(box < np.inf, np.minimum(np.where(z > 0, z, np.inf), box), z)
    zb = np.where(np.isfinite(zb), zb, 0.0).astype(np.float32)
    box_mask = (box < np.inf) & (box <= np.where(zb > 0, zb, np.inf) + 1e-9)
    found = [_det(arm, CAPSULE, 0.8), _det(ball, SPHERE, 0.6), _det(hub, CYLINDER, 0.7), _det(box_mask, BOX, 0.7)]
    seen = [measure_extents(d.mask, zb, K) for d in found]
    assert size_cost(seen[2], LIB["hub"], True, 1.6) <= 0.4 and size_cost(seen[3], LIB["hub"], True, 1.6) <= 0.4
    # a cylinder takes no box's name: the hub is left unnamed
    assert _rename(zb)(found[:3], seen[:3])[2] is None
    parts = (found[:2], seen[:2], ["arm", "ball"])
    still_but_arm = lambda ms: np.array([0.9 if (m & (arm | ball)).sum() > 0.5 * m.sum() else 0.0 for m in ms])
    out, out_apart = near_mechanism(parts, np.zeros(2, bool), found, WANTED, still_but_arm, _rename(zb), LIB, zb, K,
                                    zb, 0.0, 1.6, 10, SURPLUS_SIZE_COST)
    assert out[2] == ["arm", "ball", "hub"] and out_apart.tolist() == [False, False, False]
    assert (out[0][2].mask & hub).sum() >= 0.99 * hub.sum() and not (out[0][2].mask & box_mask).any()
    assert out[0][1] is found[1]
    # the still box apart from the arm alone: nothing named
    kept, _ = near_mechanism(parts, np.zeros(2, bool), [found[0], found[1], found[3]], WANTED, still_but_arm,
                             _rename(zb), LIB, zb, K, zb, 0.0, 1.6, 10, SURPLUS_SIZE_COST)
    assert kept is parts
