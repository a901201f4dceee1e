"""A library sphere found by its radius in the depth (pipeline/segment_sphere.py) and look-alike
rods named longer to longer (segment_match._order_lookalikes)."""
from pathlib import Path

import numpy as np
import pytest

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_match import match_shapes
from vid2sim.pipeline.segment_size import measure_extents
from vid2sim.pipeline.segment_sphere import confirm_spheres, fits_sphere, sphere_disk, split_sphere

from sphere_scene import H, K, LIB, R, W, rays, rod_x, sphere_depth

def _box_corner() -> np.ndarray:
    """(H, W) depth (m) of two faces of a box meeting at a vertical edge, 45 deg to the camera, 0.12 m wide each."""
    d = rays()
    out = np.full((H, W), np.inf)
    for n in (np.array([1.0, 0, -1]) / np.sqrt(2), np.array([-1.0, 0, -1]) / np.sqrt(2)):
        t = (np.array([0, 0, 0.8]) @ n) / (d @ n)
        p = d * t[..., None]
        ok = (np.abs(p[..., 1]) < 0.06) & (np.abs(p[..., 0]) < 0.06 / np.sqrt(2) + 1e-9) & (t > 0)
        out = np.where(ok & (t < out), t, out)
    return out


def _scene(*depths: np.ndarray, noise: float = 0.0) -> tuple[np.ndarray, list[np.ndarray]]:
    z = np.minimum.reduce(depths)
    masks = [np.isfinite(dd) & (dd <= z + 1e-9) for dd in depths]
    z = np.where(np.isfinite(z), z, 0.0)
    if noise:
        z = np.where(z > 0, z + np.random.default_rng(0).normal(0, noise, z.shape), 0.0)
    return z.astype(np.float32), masks


@pytest.mark.parametrize("noise", [0.0, 0.001])
def test_a_ball_fits_its_radius_and_a_plane_or_a_box_corner_do_not(noise):
    z, (ball,) = _scene(sphere_depth(np.array([0.0, 0.0, 0.8]), R), noise=noise)
    assert fits_sphere(ball, z, K, R)
    zc, (corner,) = _scene(_box_corner(), noise=noise)
    assert corner.sum() > 1000 and not fits_sphere(corner, zc, K, R)
    plane = np.zeros((H, W), bool)
    plane[100:140, 140:180] = True
    assert not fits_sphere(plane, np.where(plane, 0.8, 0.0).astype(np.float32), K, R)


def test_a_ball_classed_a_capsule_takes_the_library_sphere_where_its_depth_fits_it():
    z, (ball,) = _scene(sphere_depth(np.array([0.0, 0.0, 0.8]), R))
    cs = np.array([0.0, 0.62, 0.06, 0.0])   # the network: a capsule, hardly a sphere (random scene 56)
    det = Detection(ball, CLASSES.index("capsule"), 0.62, cs)
    seen = [measure_extents(ball, z, K)]
    assert match_shapes([det], seen, LIB, True, 1.6, Path("x"), 0, "ignore") == ["arm"]   # its class, at any size
    (confirmed,) = confirm_spheres([det], z, K, LIB)
    assert confirmed.class_scores[CLASSES.index("sphere")] == pytest.approx(0.62)
    assert match_shapes([confirmed], seen, LIB, True, 1.6, Path("x"), 0, "ignore") == ["ball"]
    # no library sphere: nothing changes
    assert confirm_spheres([det], z, K, {"arm": LIB["arm"]})[0] is det


def test_a_ball_in_one_mask_with_its_rod_is_cut_out_and_named():
    c = np.array([0.0, 0.0, 0.8])
    z, (rod, ball) = _scene(rod_x(c, 0.02, -0.27, 0.0), sphere_depth(c + [0.02, 0, 0], R), noise=0.0005)
    both = rod | ball
    det = Detection(both, CLASSES.index("capsule"), 0.5, np.array([0.0, 0.5, 0.0, 0.05]))
    seen = [measure_extents(both, z, K)]
    names = match_shapes([det], seen, LIB, True, 1.6, Path("x"), 0, "ignore")
    cut = sphere_disk(both, z, K, R)
    assert cut is not None and (cut & ball).sum() >= 0.9 * ball.sum() and (cut & rod).sum() <= 0.15 * cut.sum()
    dets, names, seen = split_sphere([det], names, seen, z, K, z, LIB, 20,
                                     lambda p, e: match_shapes(p, e, LIB, True, 1.6, Path("x"), 0, "ignore"))
    assert names == ["arm", "ball"] and len(dets) == 2
    assert (dets[1].mask & ball).sum() >= 0.9 * ball.sum()
    # a box face holds the disk too, but its depth is a plane: not cut
    face = np.zeros((H, W), bool)
    face[80:160, 120:200] = True
    assert sphere_disk(face, np.where(face, 0.8, 0.0).astype(np.float32), K, R) is None


def test_look_alike_rods_seen_shorter_than_both_are_named_longer_to_longer():
    """Random scene 70: arms of 0.30 and 0.25 m (capsules of one radius) seen 0.290 and 0.242 m
    long; the longer one's width measured 0.038, the shorter's 0.031 m: the proportions named
    them the other way round."""
    shapes = {"arm_a": Shape("arm_a", "capsule", radius=0.02, length=0.30),
              "arm_b": Shape("arm_b", "capsule", radius=0.02, length=0.25)}
    mask = np.zeros((4, 4), bool)
    dets = [Detection(mask, CLASSES.index("capsule"), 0.58, np.array([0.0, 0.58, 0.0, 0.17])),
            Detection(mask, CLASSES.index("cylinder"), 0.51, np.array([0.02, 0.43, 0.0, 0.51]))]
    seen = [(0.242, 0.031), (0.290, 0.038)]
    assert match_shapes(dets, seen, shapes, True, 1.6, Path("x"), 3, "ignore") == ["arm_b", "arm_a"]
    # rods of different radii are no look-alikes: their widths decide (rott's leg 0.025, arm 0.02)
    thick = {"leg": Shape("leg", "capsule", radius=0.03, length=0.30), "arm_b": shapes["arm_b"]}
    assert match_shapes(dets, [(0.242, 0.060), (0.290, 0.038)], thick, True, 1.6, Path("x"), 3,
                        "ignore") == ["leg", "arm_b"]
