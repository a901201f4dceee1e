"""Sensor noise for synthetic recordings (RealSense-like), seeded per frame.

``none``: the exact render (only the 1 mm quantisation of the depth PNG remains).
``realistic``:
  - depth noise: zero-mean Gaussian, sigma = ``depth_sigma_k * z**2`` (structured-light
    / stereo error grows with depth squared; k = 0.004 /m gives 1 mm at 0.5 m, 16 mm
    at 2 m — Keselman et al. 2017, "Intel RealSense Stereoscopic Depth Cameras");
  - missing depth at depth edges: where neighbouring pixels differ by more than
    ``edge_jump`` m, pixels are dropped with probability ``edge_dropout``;
  - a few isolated missing pixels everywhere (``random_dropout``);
  - depth quantised to ``depth_scale`` (done by writing millimetre PNGs);
  - RGB: Gaussian noise of ``rgb_sigma`` grey levels.
It deliberately does not model flying pixels, IR shadows or rolling shutter.
"""
from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

NOISE_MODES = ("none", "realistic")


@dataclass(frozen=True)
class SensorNoise:
    depth_sigma_k: float = 0.004  # sigma(z) = k z^2 (m, z in m)
    edge_jump: float = 0.03  # m between 4-neighbours that makes a depth edge
    edge_dropout: float = 0.6  # probability of losing an edge pixel
    random_dropout: float = 0.002  # probability of losing any other pixel
    rgb_sigma: float = 3.0  # grey levels


REALISTIC = SensorNoise()


def depth_edges(depth: np.ndarray, jump: float) -> np.ndarray:
    """(H, W) bool: pixels next to a depth discontinuity (or to a missing reading)."""
    d = depth.astype(np.float32)
    e = np.zeros(d.shape, bool)
    dx = np.abs(np.diff(d, axis=1)) > jump
    dy = np.abs(np.diff(d, axis=0)) > jump
    e[:, 1:] |= dx
    e[:, :-1] |= dx
    e[1:, :] |= dy
    e[:-1, :] |= dy
    return e


def apply_depth_noise(depth: np.ndarray, rng: np.random.Generator, noise: SensorNoise = REALISTIC) -> np.ndarray:
    """depth: (H, W) float32 metres, 0 = none -> noisy copy (same convention)."""
    valid = depth > 0
    out = depth + rng.standard_normal(depth.shape).astype(np.float32) * (noise.depth_sigma_k * depth**2)
    edges = cv2.dilate(depth_edges(depth, noise.edge_jump).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    u = rng.random(depth.shape)
    drop = (edges & (u < noise.edge_dropout)) | (~edges & (u < noise.random_dropout))
    out = np.where(valid & ~drop, out, 0.0)
    return np.maximum(out, 0.0).astype(np.float32)


def apply_rgb_noise(rgb: np.ndarray, rng: np.random.Generator, noise: SensorNoise = REALISTIC) -> np.ndarray:
    out = rgb.astype(np.float32) + rng.standard_normal(rgb.shape).astype(np.float32) * noise.rgb_sigma
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def frame_rng(seed: int, frame: int) -> np.random.Generator:
    """Independent stream per (seed, frame): frames can be rendered in any order."""
    return np.random.default_rng([seed, frame, 0x5E05])
