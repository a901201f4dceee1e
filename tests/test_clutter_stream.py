"""The randomised segmentation stream (datasets/synthetic/clutter.py) against closed-form geometry."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from vid2sim.datasets.shapes import CLASSES
from vid2sim.datasets.synthetic import clutter


def _K(f=300.0, w=320, h=240):
    return np.array([[f, 0, (w - 1) / 2], [0, f, (h - 1) / 2], [0, 0, 1.0]])


def test_render_sphere_depth_and_silhouette():
    K, z, r = _K(), 2.0, 0.2
    T = np.eye(4)
    T[:3, 3] = (0, 0, z)
    depth, ids = clutter.render_pieces([("sphere", (r,), T)], K, (320, 240))
    # Nearest point of the sphere on the optical axis (the principal point is between pixels 159, 160).
    assert depth[119:121, 159:161].min() == pytest.approx(z - r, abs=2e-3)
    # Silhouette: a disc of radius f r / sqrt(z^2 - r^2) px.
    rad = 300.0 * r / np.sqrt(z * z - r * r)
    assert (ids == 0).sum() == pytest.approx(np.pi * rad * rad, rel=0.03)
    assert ((ids == 0) == (depth > 0)).all()


def test_resting_box_touches_the_plane():
    rng = np.random.default_rng(3)
    sup = clutter.Support(np.array([0.0, -0.8, -0.6]), 0.9)
    for _ in range(20):
        dims = tuple(rng.uniform(0.05, 0.3, 3))
        p = sup.point_at(_K(), np.array([160.0, 200.0]))
        T = clutter.resting("box", dims, sup, p, rng)
        corners = np.array([[sx, sy, sz] for sx in (-1, 1) for sy in (-1, 1) for sz in (-1, 1)]) * np.asarray(dims) / 2
        heights = (corners @ T[:3, :3].T + T[:3, 3]) @ sup.n + sup.h
        assert heights.min() == pytest.approx(0.0, abs=1e-9)
        assert np.linalg.det(T[:3, :3]) == pytest.approx(1.0)


def test_ir_shadow_width_is_the_parallax():
    z = np.full((10, 100), 2.0, np.float32)
    z[:, :40] = 1.0  # a near surface on the left, the wall behind at 2 m
    fx, b = 300.0, 0.05
    shadow = clutter.ir_shadow(z, fx, b, side=-1)  # occluder to the left of the shadowed pixel
    width = fx * b * (1 / 1.0 - 1 / 2.0)  # 7.5 px
    # A wall pixel s px right of the last near column (39) is lit only if s > 7.5.
    assert shadow[:, 40:47].all() and not shadow[:, 47:].any() and not shadow[:, :40].any()
    assert shadow[0].sum() == int(width)
    assert not clutter.ir_shadow(z, fx, b, side=1).any()  # nothing nearer on the right


def test_sample_masks_cover_parts_only_and_are_deterministic():
    for i in range(6):
        a = clutter.make_clutter_sample(i, seed=5, noise="mixed")
        b = clutter.make_clutter_sample(i, seed=5, noise="mixed")
        assert np.array_equal(a.depth, b.depth) and np.array_equal(a.masks, b.masks)
        assert a.masks.shape[0] == len(a.labels) == len(a.dims) == len(a.poses)
        assert set(a.labels.tolist()) <= set(range(len(CLASSES)))
        assert (a.masks.sum((1, 2)) >= 8).all()
        # Masks are disjoint (one visible surface per pixel) and depth is in whole millimetres.
        assert (a.masks.sum(0) <= 1).all()
        assert np.allclose(a.depth * 1000, np.round(a.depth * 1000), atol=1e-3)


def test_clutter_alone_gives_no_target():
    rng = np.random.default_rng(0)
    K = _K()
    for kind, make in clutter.MAKERS.items():
        pieces = make(np.array([0.0, 0.0, 1.5]), 1.0, None, rng)
        depth, ids = clutter.render_pieces(pieces, K, (320, 240))
        assert (depth > 0).sum() > 20, kind  # the object is in view


def test_stream_imports_without_open3d_or_pybullet():
    # The package __init__ imports the PyBullet/Open3D generator; the stream's own modules must not.
    src = ("import sys, types\n"
           "for m in ('open3d', 'pybullet', 'mujoco', 'trimesh'): sys.modules[m] = None\n"
           "import vid2sim.datasets\n"
           "import pathlib\n"
           "pkg = types.ModuleType('vid2sim.datasets.synthetic')\n"
           "pkg.__path__ = [str(pathlib.Path(vid2sim.datasets.__path__[0]) / 'synthetic')]\n"
           "sys.modules['vid2sim.datasets.synthetic'] = pkg\n"
           "from vid2sim.datasets.synthetic.clutter import make_clutter_sample\n"
           "s = make_clutter_sample(0, noise='kinect')\n"
           "print(s.depth.shape)\n")
    out = subprocess.run([sys.executable, "-c", src], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "(240, 320)" in out.stdout
