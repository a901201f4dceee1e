"""A still name on a detection apart in 3-D from the moving parts (pipeline/segment_contact.py)."""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_contact import apart_in_depth, depth_gaps, drop_apart
from vid2sim.pipeline.segment_match import SURPLUS_SIZE_COST, match_shapes
from vid2sim.pipeline.segment_size import measure_extents

from sphere_scene import F, H, K, LIB, W, rod_x

BOX, CAPSULE = CLASSES.index("box"), CLASSES.index("capsule")
WANTED = {"hub", "arm"}


def _face(x0: float, x1: float, y0: float, y1: float, z: float) -> np.ndarray:
    """(H, W) depth (m) of a fronto-parallel rectangle at depth z, inf elsewhere."""
    v, u = np.mgrid[:H, :W]
    x, y = (u - K[0, 2]) / F * z, (v - K[1, 2]) / F * z
    return np.where((x >= x0) & (x <= x1) & (y >= y0) & (y <= y1), z, np.inf)


def _rod_hub_and_look_alike() -> tuple[np.ndarray, list[np.ndarray]]:
    """(depth (H, W) m, [the rod's, the hub's, the look-alike's pixels]): a rod 0.02 m in radius
    at 0.8 m along camera x from -0.27 to 0 m; the hub's 0.12 x 0.08 m face touching its end
    at 0.78 m; a 0.12 x 0.12 m look-alike face 0.14 m behind the rod's surface (0.92 m) that the
    rod crosses in front of in the image."""
    rod = rod_x(np.array([0.0, 0.0, 0.8]), 0.02, -0.27, 0.0)
    hub = _face(0.0, 0.12, -0.04, 0.04, 0.78)
    look = _face(-0.2, -0.08, -0.06, 0.06, 0.92)
    z = np.minimum.reduce([rod, hub, look])
    masks = [np.isfinite(d) & (d <= z + 1e-9) for d in (rod, hub, look)]
    return np.where(np.isfinite(z), z, 0.0).astype(np.float32), masks


class _Motion:
    """The narrow cue of the scene: the rod moves (share 0.9), the faces are still (0.0)."""

    k = 0.0

    def __init__(self, rod: np.ndarray):
        self.rod = rod

    def shares(self, i: int, masks: list[np.ndarray]) -> np.ndarray:
        return np.array([0.9 if (m & self.rod).sum() > 0.5 * m.sum() else 0.0 for m in masks])


class _Candidate(NamedTuple):
    frame: int
    depth: np.ndarray
    found: list[Detection]


def test_a_still_face_the_rod_crosses_in_front_of_is_apart_in_depth_and_the_face_it_touches_is_not():
    z, (rod, hub, look) = _rod_hub_and_look_alike()
    # in the image the rod crosses the look-alike: their masks touch (the old ATTACH_M test's premise)
    grown = np.zeros_like(look)
    grown[1:-1, 1:-1] = look[:-2, 1:-1] | look[2:, 1:-1] | look[1:-1, :-2] | look[1:-1, 2:]
    assert (grown & rod).sum() > 20
    gaps, zs = depth_gaps([rod, hub, look], np.array([0.9, 0.0, 0.0]), z, K)
    assert np.isnan(gaps[0])
    assert gaps[1] < 0.01                 # the hub's face meets the rod's end
    assert 0.11 < gaps[2] < 0.15          # 0.14 m behind the rod's surface, 0.12 m from its nearest point
    assert abs(zs[2] - 0.92) < 1e-3
    assert apart_in_depth([rod, hub, look], np.array([0.9, 0.0, 0.0]), z, K, 0.0).tolist() == [False, False, True]
    # nothing moves: nothing is apart
    assert not apart_in_depth([rod, hub, look], np.zeros(3), z, K, 0.0).any()
    # depth noise k z^2 large enough to reach the look-alike: touching, within 2 change thresholds
    assert not apart_in_depth([rod, hub, look], np.array([0.9, 0.0, 0.0]), z, K, 0.1)[2]


def test_the_look_alikes_name_goes_to_the_part_touching_the_moving_rod_only_where_every_shape_stays_named():
    z, (rod, hub, look) = _rod_hub_and_look_alike()
    found = [Detection(rod, CAPSULE, 0.8, np.array([0.0, 0.8, 0.0, 0.0])),
             Detection(look, BOX, 0.9, np.array([0.9, 0.0, 0.0, 0.0])),
             Detection(hub, BOX, 0.4, np.array([0.4, 0.0, 0.0, 0.0]))]
    seen = [measure_extents(d.mask, z, K) for d in found]

    def finish(c: _Candidate) -> tuple[list, list, list]:
        es = [measure_extents(d.mask, z, K) for d in c.found]
        names = match_shapes(c.found, es, LIB, True, 1.6, Path("x"), 0, "ignore")
        keep = [j for j, n in enumerate(names) if n is not None]
        return [c.found[j] for j in keep], [es[j] for j in keep], [names[j] for j in keep]

    parts = (found[:2], seen[:2], ["arm", "hub"])   # the hub's name on the look-alike, the hub left out
    out = drop_apart(_Motion(rod), _Candidate(0, z, found), parts, finish, WANTED, LIB, K, 1.6, SURPLUS_SIZE_COST)
    got = dict(zip(out[2], out[0]))
    assert sorted(out[2]) == ["arm", "hub"]
    assert (got["hub"].mask & hub).sum() == hub.sum() and not (got["hub"].mask & look).any()
    # without the hub among the detections, dropping the look-alike would leave "hub" unnamed: kept
    kept = drop_apart(_Motion(rod), _Candidate(0, z, found[:2]), parts, finish, WANTED, LIB, K, 1.6,
                      SURPLUS_SIZE_COST)
    assert kept is parts
