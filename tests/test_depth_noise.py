"""The depth noise from the parts' own surfaces (datasets/noise.surface_noise), on depth
images drawn here: a tilted plane and a rod 9 px across turned 30 deg in the image, rounded to
1 mm as the recording's PNG stores them."""
from __future__ import annotations

import numpy as np
import pytest

from vid2sim.datasets.noise import surface_noise

H, W = 120, 160
PIXEL_M = 0.0025  # m per pixel at the scene's depth (fx about 360 at 0.9 m)


def _scene(k: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(depth (H, W) m rounded to 1 mm, masks (2, H, W) bool): a box face tilted 3.4 mm/px
    across and 1.6 mm/px down at about 0.9 m (rows 10-55), and a rod of radius 0.011 m in
    front of it (rows 65-115) whose axis runs 30 deg from the image rows; white noise of
    sigma = k z^2 added before rounding."""
    v, u = np.mgrid[0:H, 0:W].astype(np.float64)
    depth = np.zeros((H, W))
    plane = (v >= 10) & (v < 55) & (u >= 10) & (u < 150)
    depth[plane] = (0.8003 + 0.00337 * u + 0.00161 * v)[plane]
    t = np.array([np.cos(np.radians(30)), np.sin(np.radians(30))])
    s = (u - 40) * -t[1] + (v - 75) * t[0]  # px from the rod's axis
    along = (u - 40) * t[0] + (v - 75) * t[1]
    r_px = 0.011 / PIXEL_M
    rod = (np.abs(s) < r_px) & (v >= 65) & (v < 115) & (along > -20) & (along < 110)
    depth[rod] = (0.9 - np.sqrt(np.maximum(r_px**2 - s**2, 0)) * PIXEL_M)[rod]
    rng = np.random.default_rng(seed)
    noisy = np.where(depth > 0, depth + rng.standard_normal((H, W)) * k * depth**2, 0.0)
    return np.round(noisy * 1000) / 1000, np.stack([plane, rod])


def test_a_clean_render_reads_no_noise_beyond_its_rounding():
    """Rounding to 1 mm alone: k = 0 on the plane and the rod together. The row/column
    second differences of rounded depth on this slope are +-1 mm at most pixels: the
    estimate before reading rounding as no evidence gave 7.0e-4 here."""
    depth, masks = _scene(0.0)
    est = surface_noise(depth, masks, 0.001)
    assert est.source == "surface" and est.pixels > 3000 and est.k < 1e-4, est


@pytest.mark.parametrize("k", [0.004, 0.01])
def test_white_noise_k_is_recovered_from_the_surfaces(k):
    """sigma = k z^2 drawn here (3.2-4.8 mm for k = 0.004 at 0.9-1.1 m, rounding included):
    within 10 % on the plane and rod together, over three noise draws each."""
    for seed in range(3):
        depth, masks = _scene(k, seed)
        est = surface_noise(depth, masks, 0.001)
        assert abs(est.k / k - 1) < 0.10, (k, seed, est)
