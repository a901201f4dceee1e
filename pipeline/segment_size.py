"""Segment: the extents a part's visible surface shows, and how well a library shape explains them.

``measure_extents`` back-projects a mask's depth pixels (camera frame, metres) and measures
the two largest extents of the visible surface; ``size_cost`` scores a library shape
against them (0 = exact, inf = larger than the shape can look; smaller is occlusion).
"""
from __future__ import annotations

import math

import cv2
import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import boxed
from vid2sim.models.segmenter.normals import smooth_depth


def measure_extents(mask: np.ndarray, depth: np.ndarray, K: np.ndarray,
                    smoothed: np.ndarray | None = None) -> tuple[float, float]:
    """The two largest extents (m) of the part's back-projected visible surface (robust percentiles).

    The mask is eroded by 3x3 (edge pixels mix parts and flying depth) unless that keeps
    fewer than 10 or ``THIN_KEPT`` of its depth pixels: a part a few pixels across (a 0.05 m
    rod at 5 m, 2.8 px) would be left a 1 px line and measure about 0 m across.
    The length and the second extent are the sides of the smallest-area rectangle that holds
    the 3-D points (1st-99th percentiles) in the plane of their two main axes: the sides of
    a box's face, not its diagonal where the face is near square and its main axes are
    undetermined.
    The width is the smaller of that second extent and the in-image width (perpendicular
    to the length and to the line of sight) of the whole mask, not the eroded one: erosion
    takes 2 px off it, a third of a 0.05 m link 6 px across at 1.8 m, 424 x 240 (measured
    0.024 m, a size cost above a fit). Along the line of sight a rod's visible
    surface is only its radius deep, but a mask's stray pixels on a part behind or in
    front, and depth noise, spread the points there: on the realistic-noise cartpole
    (sigma 25 mm at 2.5 m) the learned pole mask covers some cart pixels (14 % at frame 0),
    its second 3-D axis measured 0.13-0.15 m for the 0.05 m pole (more than the library's
    pole can look), and its in-image width measures 0.072-0.079 m. A surface tilted away
    from the camera is wider than its in-image width: that width is scaled by the tilt its
    depth shows across the image (``_tilt``), still at most the second extent. ``smoothed``: the
    frame's ``smooth_depth`` when the caller measures several parts of one frame.
    """
    smoothed = smooth_depth(depth) if smoothed is None else smoothed
    # the mask's box grown by the erosion's 1 px: pixel (v, u) of the crop is (v + y0, u + x0)
    x, y, x1, y1 = boxed(mask).box
    y0, x0 = max(y - 1, 0), max(x - 1, 0)
    box = np.s_[y0:y1 + 1, x0:x1 + 1]
    mask, depth, smoothed = mask[box], depth[box], smoothed[box]
    whole = mask & (depth > 0)
    m = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    if (m & (depth > 0)).sum() < max(10, THIN_KEPT * whole.sum()):
        m = mask  # a part a few pixels across: its edge pixels are most of it
    m = m & (depth > 0)
    if m.sum() < 3:
        return 0.0, 0.0
    v, u = np.nonzero(m)
    v, u = v + y0, u + x0
    z = smoothed[m].astype(np.float64)
    zm = float(np.median(z))
    span2d = max(np.ptp(u), np.ptp(v)) * zm / K[0, 0]
    p = _points(u, v, z, K, zm, span2d)
    if len(p) < 3:
        return 0.0, 0.0
    q = p - p.mean(0)
    _, vecs = np.linalg.eigh(q.T @ q)
    length, second, axis = _min_area_sides(q @ vecs[:, 2], q @ vecs[:, 1], vecs[:, 2], vecs[:, 1])
    sight = p.mean(0) / np.linalg.norm(p.mean(0))
    across = np.cross(axis, sight)
    n = np.linalg.norm(across)
    if n <= 1e-6:  # a rod seen end-on: no in-image width
        return length, second
    vw, uw = np.nonzero(whole)  # the in-image width of the whole mask: erosion took 2 px of it
    vw, uw = vw + y0, uw + x0
    pw = _points(uw, vw, smoothed[whole].astype(np.float64), K, zm, span2d)
    if len(pw) < 3:
        return length, second
    q = pw - p.mean(0)
    a = q @ (across / n)
    return length, min(second, _spread(a) * _tilt(a, q @ sight))


def _tilt(a: np.ndarray, z: np.ndarray) -> float:
    """sqrt(1 + s^2) >= 1: how much longer a surface is than its in-image width, where its
    points' coordinate along the line of sight ``z`` (m) follows their in-image coordinate
    ``a`` (m) with slope s (least squares); 1 where they correlate less than ``TILT_R``
    (a rod's depth noise, no surface tilted away from the camera): a box face seen at a
    grazing angle spans far less across the image than in 3-D, and its depth follows its
    image position; a rod's depth noise does not."""
    if len(a) < 3 or np.ptp(a) <= 0 or np.ptp(z) <= 0:
        return 1.0
    c = np.cov(a, z)
    r = c[0, 1] / math.sqrt(c[0, 0] * c[1, 1])
    if abs(r) < TILT_R:
        return 1.0
    return math.sqrt(1.0 + (c[0, 1] / c[0, 0]) ** 2)


def _points(u: np.ndarray, v: np.ndarray, z: np.ndarray, K: np.ndarray, zm: float, span2d: float) -> np.ndarray:
    """(N, 3) camera-frame points (m) of pixels (u, v) at depths z, less those farther than
    ``span2d`` (at least 0.05 m) from the median depth ``zm`` (background leaked into a mask)."""
    keep = np.abs(z - zm) < max(span2d, 0.05)
    return np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], 1)[keep]


def _spread(x: np.ndarray) -> float:
    """Robust extent (m) of coordinates ``x``: 99th minus 1st percentile."""
    return float(np.percentile(x, 99) - np.percentile(x, 1))


TILT_R = 0.5  # in [-1, 1] absolute: a mask's depth correlating this well with its in-image width is a tilted surface (_tilt)
THIN_KEPT = 0.5  # a mask whose 3x3 erosion keeps less than this share of its depth pixels is measured whole
MIN_AREA_STEP_DEG = 3.0  # angle step (deg) of the search for the smallest-area rectangle in measure_extents


def _min_area_sides(a: np.ndarray, b: np.ndarray, ea: np.ndarray, eb: np.ndarray) -> tuple[float, float, np.ndarray]:
    """(longer side, shorter side, unit 3-D direction of the longer side) of the smallest-area
    rectangle, in robust extents (``_spread``), that holds 2-D points with coordinates ``a``,
    ``b`` (N,) along the orthonormal 3-D directions ``ea``, ``eb`` (3,)."""
    best = None
    for t in np.deg2rad(np.arange(0.0, 90.0, MIN_AREA_STEP_DEG)):
        c, s = math.cos(t), math.sin(t)
        s1, s2 = _spread(c * a + s * b), _spread(-s * a + c * b)
        if best is None or s1 * s2 < best[0] - 1e-12:
            best = (s1 * s2, s1, s2, c * ea + s * eb, -s * ea + c * eb)
    _, s1, s2, d1, d2 = best
    return (s1, s2, d1) if s1 >= s2 else (s2, s1, d2)


def size_cost(seen: tuple[float, float], shape: Shape, metric: bool, tol: float) -> float:
    """How badly ``shape`` explains the seen extents (inf: impossible). A box may show any
    of its three faces: the best-fitting face counts (a drawer's front face must not match
    a door's larger face)."""
    if shape.type == "box":
        a, b, c = sorted(shape.extents(), reverse=True)
        return min(_face_cost(seen, (x, y), metric, tol) for x, y in ((a, b), (a, c), (b, c)))
    E = sorted(shape.extents(), reverse=True)
    return _face_cost(seen, (E[0], E[1]), metric, tol)


def _face_cost(seen: tuple[float, float], E: tuple[float, float], metric: bool, tol: float) -> float:
    """Cost of the seen (largest, second) extents against one view's extents E (largest first)."""
    e1, e2 = max(seen[0], 1e-6), max(seen[1], 1e-6)
    if not metric:  # pseudo-depth has no scale: compare proportions only
        return abs(math.log((e1 / e2) / (E[0] / E[1])))
    if e1 > tol * E[0] or e2 > tol * E[1] * 1.5:
        return math.inf  # larger than the shape can look; smaller is occlusion
    # Proportions discriminate best between look-alike classes on noisy depth (a thin
    # rod seen as a box is still 8:1, a cart seen as a capsule still about 2:1).
    aspect = abs(math.log((e1 / e2) / (E[0] / E[1])))
    return abs(math.log(e1 / E[0])) + 0.5 * abs(math.log(e2 / E[1])) + aspect
