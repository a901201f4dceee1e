"""Masks and a cabinet library shared by the segment tests: a 320 x 240 image, K with fx = 300 px
(1 px = 6.7 mm at 2 m), rectangles and rods drawn as (240, 320) bool masks."""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.shapes import Shape

K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])
CABINET = {"carcass": Shape("carcass", "box", size=(0.5, 0.4, 0.6)),
           "drawer": Shape("drawer", "box", size=(0.4, 0.36, 0.12)),
           "door": Shape("door", "box", size=(0.46, 0.02, 0.36))}
BOX = np.eye(4)[0] * 0.9  # class scores: a confident box (CLASSES[0])


def rect(r0: int, r1: int, c0: int, c1: int) -> np.ndarray:
    """(240, 320) bool: rows r0..r1-1, columns c0..c1-1."""
    m = np.zeros((240, 320), bool)
    m[r0:r1, c0:c1] = True
    return m


def rod(a, b, width: float) -> np.ndarray:
    """(240, 320) bool: the pixels within ``width`` px of the image segment a-b ((u, v) px)."""
    v, u = np.mgrid[:240, :320]
    a, b = np.asarray(a, float), np.asarray(b, float)
    d = b - a
    t = np.clip(((u - a[0]) * d[0] + (v - a[1]) * d[1]) / (d @ d), 0, 1)
    return np.hypot(u - a[0] - t * d[0], v - a[1] - t * d[1]) <= width
