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
differences of pixels outside the moving parts (``exclude``) are divided by sqrt(2) z^2.
The depth is quantised: a stereo sensor rounds disparity, so its depth steps grow as z^2
(20-60 mm at 2-3 m, often coarser than the noise), and most static pixels then read the same
value in both frames; their median difference is 0 even where sigma is 20 mm. A rounding
grid that falls at random against the true depths never flips a difference's sign and is
unbiased on average, so the mean absolute rounded difference equals the mean absolute true
one, whatever the step. So k = sqrt(pi / 2) x the mean of the scaled differences (a normal
variable's mean absolute value is sqrt(2 / pi) sigma), with the differences above their
``WINSOR_PERCENTILE``-th percentile clipped to it: parts that move through the "static"
pixels and flying pixels at depth edges are a minority it ignores, and on Gaussian noise it
reads at most 3 % low. A camera that moves makes every pixel change and over-estimates k;
that is conservative (wider gates), not wrong-way.

A far-framed scene with nothing but the mechanism in depth range has too few static pixels
(fewer than ``MIN_PIXELS``). Then the parts' own surfaces in one frame (``surface``) give k.
At each pixel inside a part, the 3x3 Hessian of depth (row and column second differences
and the mixed difference) is 0 on a plane; its smaller eigenvalue in magnitude is 0 on a
cylinder in any orientation too (a rod is flat along its axis), and for white noise its
median is ``SURFACE_MEDIAN`` sigma (Monte Carlo, 8 million pixels). The depth PNG rounds to
one depth unit q (``depth_scale``). On a plane that rounding alone reads as up to
``ROUNDING_MAX_SIGMA`` q of white noise (its median is 1.0 q at the worst slopes: the row
and column second differences are then +-1 q at most pixels), so a measured sigma up to that
is no evidence of noise and k is 0; above it the rounding, then dithered by the noise into
uniform errors that read as ``QUANTISATION_SIGMA`` q (Monte Carlo), is subtracted in
quadrature (at the pixels' median depth). A clean render so reads 0, as its static pixels
do; the tracker's depth-noise floor covers the rounding. Each part with
``MIN_SURFACE_PIXELS`` pixels gives its own k; curvature left over (a rod 3-5 px across,
where the 3x3 stencil spans its whole rounded section) and a mask that spills over a depth
edge only add to it, so the parts that agree with the smallest (within ``PART_AGREEMENT``,
a few times one part's scatter) are pooled and the others left out. With fewer than
``MIN_SURFACE_PIXELS`` such pixels in every part, k is ``DEFAULT_K`` (a RealSense's, the
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
    source: str = "static"  # "static" (frame differences), "surface" (the parts' depth Hessian), "default"


log = logging.getLogger(__name__)
MIN_PIXELS = 500  # static pixel pairs needed for the frame-difference estimate
WINSOR_PERCENTILE = 95.0  # scaled differences above this percentile are clipped to it
MIN_SURFACE_PIXELS = 50  # part pixels needed for the surface estimate
SURFACE_MEDIAN = 0.913  # median of the 3x3 depth Hessian's smaller |eigenvalue| / sigma, white noise
PART_AGREEMENT = 1.25  # parts whose k is within this factor of the smallest are pooled (one part's scatter: ~8 %)
QUANTISATION_SIGMA = 0.318  # depth units: white-noise sigma whose Hessian median equals uniform rounding errors
ROUNDING_MAX_SIGMA = 1.1  # depth units: the most a rounded plane reads as (worst slope: median 1.0 q / SURFACE_MEDIAN)
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
        clipped = np.minimum(r, np.percentile(r, WINSOR_PERCENTILE))
        return DepthNoise(float(np.sqrt(np.pi / 2) * clipped.mean()), int(r.size), len(starts))
    if surface is not None:
        s = surface_noise(rec.depth(int(surface_frame)), surface, rec.camera.depth_scale)
        if s.pixels >= MIN_SURFACE_PIXELS:
            log.info("%s: only %d static depth pixels (need %d): depth noise measured on the parts' surfaces",
                     rec.path, r.size, MIN_PIXELS)
            return s
    log.warning("%s: only %d static depth pixels (need %d) and too few on the parts to measure the depth noise; "
                "assuming k = %g /m (sigma %.0f mm at 2 m; set track.depth_noise_k to the sensor's k)",
                rec.path, r.size, MIN_PIXELS, DEFAULT_K, 4000 * DEFAULT_K)
    return DepthNoise(DEFAULT_K, 0, 0, "default")


def surface_noise(depth: np.ndarray, masks: np.ndarray, quantum: float = 0.001) -> DepthNoise:
    """k from the depth Hessian inside the parts' masks, less the rounding to ``quantum`` m
    (module docstring): the parts with ``MIN_SURFACE_PIXELS`` pixels whose own k is within
    ``PART_AGREEMENT`` of the smallest part's are pooled.

    depth: (H, W) m, 0 = no reading; masks: (K, H, W) or (H, W), nonzero = part. A pixel
    counts where it lies in a part after a 3x3 erosion (no difference spans the part's edge)
    and it and its eight neighbours have depth.
    """
    d = depth.astype(np.float64)
    masks = masks if masks.ndim == 3 else masks[None]
    parts = [_hessian_min_eigenvalue(d, cv2.erode((m > 0).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0)
             for m in masks]
    parts = [(h, z) for h, z in parts if h.size >= MIN_SURFACE_PIXELS]
    if not parts:
        return DepthNoise(DEFAULT_K, 0, 0, "default")
    ks = [_k_of(h, z, quantum) for h, z in parts]
    pool = [p for p, k in zip(parts, ks) if k <= PART_AGREEMENT * min(ks)] or parts
    h, z = np.concatenate([p[0] for p in pool]), np.concatenate([p[1] for p in pool])
    return DepthNoise(_k_of(h, z, quantum), int(h.size), 0, "surface")


def _k_of(h: np.ndarray, z: np.ndarray, quantum: float) -> float:
    """k (1/m) from (N,) Hessian eigenvalues ``h`` (m) at depths ``z`` (m): 0 up to what
    rounding to ``quantum`` m can read as, above it less that rounding in quadrature, at the
    median depth."""
    measured = float(np.median(h / z**2)) / SURFACE_MEDIAN
    unit = quantum / float(np.median(z)) ** 2
    if measured <= ROUNDING_MAX_SIGMA * unit:
        return 0.0
    return float(np.sqrt(measured**2 - (QUANTISATION_SIGMA * unit) ** 2))


def _hessian_min_eigenvalue(d: np.ndarray, inner: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(N,) smaller |eigenvalue| of the 3x3 finite-difference Hessian of depth ``d`` (H, W) m,
    in m per pixel^2, and (N,) depth m, at the pixels of ``inner`` (H, W) whose 3x3
    neighbourhood has depth everywhere (image border excluded)."""
    ok = inner & (d > 0)
    ok[[0, -1], :] = False
    ok[:, [0, -1]] = False
    v, u = np.nonzero(ok)
    nb = np.stack([d[v + a, u + b] for a in (-1, 0, 1) for b in (-1, 0, 1)], 1)  # (N, 9) row-major 3x3
    keep = (nb > 0).all(1)
    nb = nb[keep]
    dxx = nb[:, 3] - 2 * nb[:, 4] + nb[:, 5]
    dyy = nb[:, 1] - 2 * nb[:, 4] + nb[:, 7]
    dxy = (nb[:, 8] - nb[:, 6] - nb[:, 2] + nb[:, 0]) / 4
    mean, half = (dxx + dyy) / 2, np.hypot((dxx - dyy) / 2, dxy)
    return np.minimum(np.abs(mean - half), np.abs(mean + half)), nb[:, 4]
