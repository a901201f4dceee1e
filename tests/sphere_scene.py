"""A pinhole camera and ray-cast depth of spheres and rods, for the segment tests on library spheres
(tests/test_segment_sphere.py, tests/test_segment_inside.py)."""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.shapes import Shape

H, W, F = 240, 320, 350.0
K = np.array([[F, 0, W / 2], [0, F, H / 2], [0, 0, 1.0]])
R = 0.045
LIB = {"hub": Shape("hub", "box", size=(0.12, 0.12, 0.08)), "arm": Shape("arm", "capsule", radius=0.02, length=0.25),
       "ball": Shape("ball", "sphere", radius=R)}


def rays() -> np.ndarray:
    v, u = np.mgrid[:H, :W]
    d = np.stack([(u - K[0, 2]) / F, (v - K[1, 2]) / F, np.ones((H, W))], -1)
    return d  # (H, W, 3), z component 1: t along it is the depth


def sphere_depth(c: np.ndarray, r: float) -> np.ndarray:
    """(H, W) depth (m) of a sphere, inf where the ray misses it."""
    d = rays()
    a, b, cc = (d * d).sum(-1), -2 * (d @ c), c @ c - r * r
    disc = b * b - 4 * a * cc
    t = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)
    return np.where(disc > 0, t, np.inf)


def rod_x(c: np.ndarray, r: float, x0: float, x1: float) -> np.ndarray:
    """(H, W) depth (m) of a cylinder along camera x through c, from x0 to x1 (m), inf elsewhere."""
    d = rays()
    a, b, cc = d[..., 1] ** 2 + 1, -2 * (d[..., 1] * c[1] + c[2]), c[1] ** 2 + c[2] ** 2 - r * r
    disc = b * b - 4 * a * cc
    t = (-b - np.sqrt(np.maximum(disc, 0))) / (2 * a)
    x = t * d[..., 0]
    return np.where((disc > 0) & (x >= x0) & (x <= x1), t, np.inf)
