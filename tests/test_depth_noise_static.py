"""The depth-noise estimate from static pixels (datasets/noise.estimate_depth_noise) on a
stereo sensor's quantised depth, against the k the synthetic RealSense-like model was given
(datasets/synthetic/sensor.py)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from vid2sim.datasets.noise import estimate_depth_noise
from vid2sim.datasets.synthetic.sensor import RealSenseNoise, apply_realsense_noise

H, W, FX = 240, 320, 232.0  # a far 320x240 camera: disparity steps of 20-90 mm at 2-3.8 m


def _scene(t: int, distractor: float) -> np.ndarray:
    """(H, W) m: a floor tilted from 1.5 to 3.8 m, a box at 1.9 m and, covering ``distractor``
    of the image, a block at 1.2 m sliding 7 px a frame."""
    v, u = np.mgrid[0:H, 0:W]
    z = 1.5 + 2.0 * v / H + 0.3 * u / W
    z[80:140, 100:180] = 1.9
    if distractor:
        w = int(np.sqrt(distractor * H * W))
        x0 = (7 * t) % (W - w)
        z[10:10 + w, x0:x0 + w] = 1.2
    return z.astype(np.float32)


def _recording(k: float, subpixel: float, distractor: float = 0.0, frames: int = 17):
    """A static scene through the RealSense-like model (noise drawn afresh each frame), rounded
    to the PNG's millimetres, as the few Recording attributes the estimate reads."""
    rng = np.random.default_rng(0)
    model = RealSenseNoise(depth_sigma_k=k, subpixel=subpixel, flying=0.3, edge_dropout=0.5)
    depth = [np.round((apply_realsense_noise(_scene(t, distractor), rng, model, FX) if k else _scene(t, distractor))
                      * 1000) / 1000 for t in range(frames)]
    return SimpleNamespace(path="plane", has_depth=True, num_frames=frames, depth=lambda i: depth[i],
                           camera=SimpleNamespace(depth_scale=0.001))


@pytest.mark.parametrize("k", [0.001, 0.003, 0.005])
@pytest.mark.parametrize("subpixel", [0.05, 0.1])
def test_k_is_measured_through_disparity_quantisation(k, subpixel):
    """Most static pixels read the same rounded depth in both frames (40-90 % here), so the
    median difference said 0 or up to 1.8 k (0.0, 0.0045, 0.0090 before); the mean absolute
    difference reads the given k within 6 %."""
    est = estimate_depth_noise(_recording(k, subpixel))
    assert est.source == "static" and abs(est.k / k - 1) < 0.06, est


def test_a_moving_distractor_and_a_clean_render():
    """A block over 3 % of the image, moving: k still within 6 % on noisy depth, and 0 on a
    clean render, where only the moving block's pixels change."""
    est = estimate_depth_noise(_recording(0.003, 0.08, distractor=0.03))
    assert abs(est.k / 0.003 - 1) < 0.06, est
    assert estimate_depth_noise(_recording(0.0, 0.08, distractor=0.03)).k == 0.0
