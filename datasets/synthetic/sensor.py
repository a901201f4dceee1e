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


# ---------------------------------------------------------------- random scenes' sensor

@dataclass(frozen=True)
class RealSenseNoise:
    """Active-stereo depth camera model of random scenes (``scene.py``), RealSense-like.

    Applied in this order to the exact z-depth (m): readings beyond ``max_range`` lost;
    Gaussian noise sigma = ``depth_sigma_k`` z^2; flying pixels: at depth edges, with
    probability ``flying``, a value drawn uniformly between the nearest and farthest
    depth of the 3x3 neighbourhood; holes: edge pixels lost with ``edge_dropout``,
    others with ``random_dropout``; disparity quantisation: disparity f b / z (f in
    pixels, baseline ``baseline`` m) rounded to ``subpixel`` pixels. RGB gets Gaussian
    noise of ``rgb_sigma`` grey levels.
    """

    depth_sigma_k: float = 0.003  # sigma(z) = k z^2, 1/m (0.001-0.005; a D435 at 848x480 is ~0.0025)
    edge_jump: float = 0.03  # m between 4-neighbours that makes a depth edge
    edge_dropout: float = 0.5  # probability of losing an edge pixel (0.2-0.8)
    random_dropout: float = 0.002  # probability of losing any other pixel
    flying: float = 0.3  # probability that a kept edge pixel flies (0-0.5)
    baseline: float = 0.05  # stereo baseline, m
    subpixel: float = 0.08  # disparity step, pixels (0.05-0.1)
    max_range: float = 6.0  # m; farther readings are 0 (4-10, and beyond the mechanism in random scenes)
    rgb_sigma: float = 3.0  # grey levels (1-6)


def random_realsense(rng: np.random.Generator) -> RealSenseNoise:
    """A RealSenseNoise with its parameters drawn from the ranges in its field comments."""
    return RealSenseNoise(depth_sigma_k=float(rng.uniform(0.001, 0.005)), edge_dropout=float(rng.uniform(0.2, 0.8)),
                          flying=float(rng.uniform(0.0, 0.5)), subpixel=float(rng.uniform(0.05, 0.1)),
                          max_range=float(rng.uniform(4.0, 10.0)), rgb_sigma=float(rng.uniform(1.0, 6.0)))


def apply_realsense_noise(depth: np.ndarray, rng: np.random.Generator, model: RealSenseNoise, fx: float
                          ) -> np.ndarray:
    """depth: (H, W) float32 m, 0 = none; fx: focal length in pixels -> noisy copy (same convention)."""
    d = np.where(depth > model.max_range, 0.0, depth).astype(np.float32)
    valid = d > 0
    out = d + rng.standard_normal(d.shape).astype(np.float32) * (model.depth_sigma_k * d**2)
    edges = cv2.dilate(depth_edges(d, model.edge_jump).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    big = np.where(valid, d, np.float32(1e6))
    near = cv2.erode(big, np.ones((3, 3), np.uint8))
    far = cv2.dilate(d, np.ones((3, 3), np.uint8))
    u = rng.random(d.shape)
    fly = edges & valid & (u < model.flying) & (near < far)
    out = np.where(fly, near + rng.random(d.shape).astype(np.float32) * (far - near), out)
    u = rng.random(d.shape)
    drop = (edges & (u < model.edge_dropout)) | (~edges & (u < model.random_dropout))
    out = np.where(valid & ~drop, np.maximum(out, 0.0), 0.0)
    fb = fx * model.baseline
    with np.errstate(divide="ignore"):
        disp = np.where(out > 0, fb / np.maximum(out, 1e-6), 0.0)
    disp = np.round(disp / model.subpixel) * model.subpixel
    out = np.where(disp > 0, fb / np.maximum(disp, 1e-9), 0.0)
    return np.where(out > model.max_range, 0.0, out).astype(np.float32)
