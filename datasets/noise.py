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
No library estimates this; a dozen lines of numpy do.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vid2sim.datasets.recording import Recording


@dataclass(frozen=True)
class DepthNoise:
    k: float  # sigma(z) = k z^2 (z in m)
    pixels: int  # pixel pairs the estimate rests on
    pairs: int  # frame pairs used


MIN_PIXELS = 500


def estimate_depth_noise(rec: Recording, exclude: np.ndarray | None = None, pairs: int = 16) -> DepthNoise:
    """k of sigma = k z^2 from frame-to-frame differences of static pixels.

    exclude: (H, W) bool pixels not to use (e.g. the parts' dilated masks). Raises ValueError
    (naming the recording) when there are fewer than 2 depth frames or too few valid pixels.
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
    if r.size < MIN_PIXELS:
        raise ValueError(f"{rec.path}: only {r.size} static depth pixels to measure the depth noise from "
                         f"(need {MIN_PIXELS}); set track.depth_noise_k to the sensor's k instead")
    return DepthNoise(float(1.4826 * np.median(r)), int(r.size), len(starts))
