"""Depth noise of a recording, measured from the recording itself.

Depth sensors' noise grows with depth squared (structured light and stereo: sigma = k z^2,
Keselman et al. 2017), and k differs by sensor, range setting and scene: a clean render has
only the 1 mm quantisation of its PNG, a RealSense at 2 m about 16 mm. The tracker weighs
residuals, gates points and tells "seen through" from "on the surface" by sigma, so a k
far from the truth costs accuracy: assuming RealSense noise (k = 0.004) on clean depth made
a surface 35 mm behind a part count as "on it" at 1.7 m, and the cabinet's drawer slid 25 mm
off its front face.

The estimate: consecutive frames of a static pixel differ by noise alone, with standard
deviation sqrt(2) sigma. Over up to ``pairs`` frame pairs spread over the recording, the
differences of pixels outside the moving parts (``exclude``) are divided by sqrt(2) z^2, and
k is their robust scale (1.4826 x the median absolute value; parts that move through the
"static" pixels are a minority the median ignores). A camera that moves makes every pixel
change and over-estimates k; that is conservative (wider gates), not wrong-way.

A far-framed scene with nothing but the mechanism in depth range has too few static pixels
(fewer than ``MIN_PIXELS``). Then the parts' own surfaces in one frame (``surface``) give k:
the second difference of depth along a row, d[u-1] - 2 d[u] + d[u+1], is 0 on a plane and
has standard deviation sqrt(6) sigma for white noise; the smaller of the row and column
second differences (a rod's surface is flat along its axis) has a median of
``SURFACE_MEDIAN`` sigma (Monte Carlo, 4 million pixels). A curved surface (a rod seen
across, 3-5 px wide) adds its curvature to that: an over-estimate, conservative again. With
fewer than ``MIN_SURFACE_PIXELS`` such pixels as well, k is ``DEFAULT_K`` (a RealSense's, the
noisiest common sensor: wide gates) with a WARNING.
No library estimates this; a few dozen lines of numpy do.
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import cv2
import numpy as np

from vid2sim.datasets.recording import Recording


@dataclass(frozen=True)
class DepthNoise:
    k: float  # sigma(z) = k z^2 (z in m)
    pixels: int  # pixel pairs the estimate rests on
    pairs: int  # frame pairs used (0 unless source is "static")
    source: str = "static"  # "static" (frame differences), "surface" (parts' second differences), "default"


log = logging.getLogger(__name__)
MIN_PIXELS = 500  # static pixel pairs needed for the frame-difference estimate
MIN_SURFACE_PIXELS = 50  # part pixels needed for the surface estimate
SURFACE_MEDIAN = 0.988  # median of min(|row|, |column| second difference) / sigma, white noise
DEFAULT_K = 0.004  # 1/m, k when neither estimate has pixels (RealSense D4xx: 16 mm at 2 m)


def estimate_depth_noise(rec: Recording, exclude: np.ndarray | None = None, pairs: int = 16,
                         surface: np.ndarray | None = None, surface_frame: int = 0) -> DepthNoise:
    """k of sigma = k z^2 from frame-to-frame differences of static pixels, else from the parts'
    surfaces, else ``DEFAULT_K`` (logged as a WARNING).

    exclude: (H, W) bool pixels not to use (e.g. the parts' dilated masks). surface: (K, H, W)
    or (H, W) masks of the parts in frame ``surface_frame``, used when fewer than ``MIN_PIXELS``
    static pixels have depth. Raises ValueError (naming the recording) when there are no depth
    frames or fewer than 2.
    """
    if not rec.has_depth:
        raise ValueError(f"{rec.path}: no depth frames to measure the depth noise from")
    n = rec.num_frames
    if n < 2:
        raise ValueError(f"{rec.path}: one frame only; the depth noise is measured between frames "
                         "(set track.depth_noise_k to the sensor's k instead)")
    starts = np.unique(np.linspace(0, n - 2, min(pairs, n - 1)).round().astype(int))
    ratios = []
    for i in starts:
        d0, d1 = rec.depth(int(i)).astype(np.float64), rec.depth(int(i) + 1).astype(np.float64)
        ok = (d0 > 0) & (d1 > 0)
        if exclude is not None:
            ok &= ~exclude
        z = 0.5 * (d0[ok] + d1[ok])
        ratios.append(np.abs(d1[ok] - d0[ok]) / (np.sqrt(2.0) * z**2))
    r = np.concatenate(ratios) if ratios else np.zeros(0)
    if r.size >= MIN_PIXELS:
        return DepthNoise(float(1.4826 * np.median(r)), int(r.size), len(starts))
    if surface is not None:
        s = surface_noise(rec.depth(int(surface_frame)), surface)
        if s.pixels >= MIN_SURFACE_PIXELS:
            log.info("%s: only %d static depth pixels (need %d): depth noise measured on the parts' surfaces",
                     rec.path, r.size, MIN_PIXELS)
            return s
    log.warning("%s: only %d static depth pixels (need %d) and too few on the parts to measure the depth noise; "
                "assuming k = %g /m (sigma %.0f mm at 2 m; set track.depth_noise_k to the sensor's k)",
                rec.path, r.size, MIN_PIXELS, DEFAULT_K, 4000 * DEFAULT_K)
    return DepthNoise(DEFAULT_K, 0, 0, "default")


def surface_noise(depth: np.ndarray, masks: np.ndarray) -> DepthNoise:
    """k from second differences of depth inside each part's mask (module docstring).

    depth: (H, W) m, 0 = no reading; masks: (K, H, W) or (H, W), nonzero = part. A pixel
    counts where it and its four neighbours lie in one part (after a 3x3 erosion, so that no
    difference spans an edge) and have depth.
    """
    d = depth.astype(np.float64)
    masks = masks if masks.ndim == 3 else masks[None]
    ratios = []
    for m in masks:
        inner = cv2.erode((m > 0).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        ok = inner & (d > 0)
        ok[[0, -1], :] = False
        ok[:, [0, -1]] = False
        ok[1:-1, 1:-1] &= (d[1:-1, :-2] > 0) & (d[1:-1, 2:] > 0) & (d[:-2, 1:-1] > 0) & (d[2:, 1:-1] > 0)
        v, u = np.nonzero(ok)
        if not len(v):
            continue
        row = d[v, u - 1] - 2 * d[v, u] + d[v, u + 1]
        col = d[v - 1, u] - 2 * d[v, u] + d[v + 1, u]
        ratios.append(np.minimum(np.abs(row), np.abs(col)) / (SURFACE_MEDIAN * d[v, u] ** 2))
    r = np.concatenate(ratios) if ratios else np.zeros(0)
    if not r.size:
        return DepthNoise(DEFAULT_K, 0, 0, "default")
    return DepthNoise(float(np.median(r)), int(r.size), 0, "surface")
