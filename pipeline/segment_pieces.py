"""Segment: one part seen in pieces, cut by a nearer part, joined into one detection.

A rod hanging in front of a box cuts the box's image in two; the network may then give two
instances of one class on either side. Both pieces match the same library shape (a half
cart, 0.13 x 0.09 m, looks like the cart's 0.16 x 0.10 m end face), so the second becomes
a surplus body that the tracker loses. ``join_pieces`` merges two detections named after
the same library shape when

- what lies between them (their union's convex hull, less the union) is not mostly behind
  the plane through their pixels: no view through to the background separates them (the
  pole in front is only 2-6 cm nearer than the cart at 2.5 m, within 3 sigma of
  RealSense-like noise there, so "nearer" cannot be required), and
- their union's extents fit that library shape at least as well as either piece alone.

Two distinct parts of one shape side by side fail the second test (their union is larger
than the shape can look); a surplus part only ever repeats a name, as two distinct library
parts of one shape get their own names (``match_shapes``).

When the network finds only one of the pieces, ``complete_pieces`` adds the other from the
depth: a connected region of pixels that no named detection holds (a detection that matches
no library shape, background to be, may hold a piece of a part) and no depth discontinuity
crosses, wholly within the shape's longest side of the piece (in the image and in depth),
touching the piece or a part beside it (``NEAR_PX``, across the depth edge between them),
that makes the piece at least ``GROWN`` x longer while it still fits its library shape and
is at most ``GROWN_MAX`` x its longest side (a half cart matches the cart's end face as well
as the whole cart matches its front, so a better fit cannot be required).
"""
from __future__ import annotations

import cv2
import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import JUMP_FRACTION, discontinuities
from vid2sim.pipeline.segment_size import measure_extents, size_cost

BEHIND_SHARE = 0.5  # pieces with at least this share of the gap's depth pixels behind their plane stay apart
COMPLETE_SIZE_COST = 1.0  # a piece grown by a region must still fit its shape this well (segment's SURPLUS_SIZE_COST)
GROWN = 1.2  # ... and be at least this many times longer than the piece alone
GROWN_MAX = 1.2  # ... and at most this many times longer than its shape's longest side
MIN_SHARE = 0.1  # ... by a region of at least this share of the piece's pixels
NEAR_PX = 5  # px: a region this close to the piece or a part beside it touches them (across the depth edge between them)
BEHIND_MARGIN_M = 0.01  # m: least distance behind the pieces' plane that counts as behind (3 sigma if more)


def join_pieces(dets: list[Detection], names: list[str | None], seen: list[tuple[float, float]],
                depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, shapes: dict[str, Shape],
                metric: bool, tol: float) -> tuple[list[Detection], list[str | None], list[tuple[float, float]]]:
    """``dets`` with each pair of same-named pieces of one part merged (module docstring), the
    merged detection first in the more confident piece's place; names and seen extents (m)
    to match. depth: (H, W) m of the detections' frame, K its (3, 3) intrinsics, smoothed
    its ``smooth_depth``. Without metric depth nothing is merged."""
    if not metric:
        return dets, names, seen
    dets, names, seen = list(dets), list(names), list(seen)
    merged = True
    while merged:
        merged = False
        for a in range(len(dets)):
            for b in range(a + 1, len(dets)):
                if names[a] is None or names[a] != names[b]:
                    continue
                union = dets[a].mask | dets[b].mask
                if _seen_through(dets[a].mask, dets[b].mask, depth):
                    continue
                e = measure_extents(union, depth, K, smoothed)
                shape = shapes[names[a]]
                if size_cost(e, shape, metric, tol) > min(size_cost(seen[a], shape, metric, tol),
                                                          size_cost(seen[b], shape, metric, tol)):
                    continue
                first, second = (a, b) if dets[a].score >= dets[b].score else (b, a)
                dets[first] = _merged(dets[first], dets[second])
                seen[first] = e
                del dets[second], names[second], seen[second]
                merged = True
                break
            if merged:
                break
    return dets, names, seen


def complete_pieces(dets: list[Detection], names: list[str | None], seen: list[tuple[float, float]],
                    depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, shapes: dict[str, Shape],
                    metric: bool, tol: float) -> tuple[list[Detection], list[tuple[float, float]]]:
    """``dets`` with each named detection grown by the depth regions beside it that no other named
    detection holds (one named None, matching no library shape, does not count) and that lengthen
    it within its library shape's size (module docstring), and their seen extents (m).
    depth: (H, W) m, K (3, 3), smoothed its ``smooth_depth``. Without metric depth, unchanged."""
    if not metric:
        return dets, seen
    dets, seen = list(dets), list(seen)
    smooth = (smoothed > 0) & ~discontinuities(smoothed)   # the frame's pixels no depth edge crosses
    for a, name in enumerate(names):
        if name is None:
            continue
        others = np.zeros(depth.shape, bool)
        for b, d in enumerate(dets):
            if b != a and names[b] is not None:
                others |= d.mask
        found = _continuation(dets[a].mask, others, depth, smoothed, smooth, K, max(shapes[name].extents()))
        if found is None:
            continue
        region, close = found
        _, lab, stats, _ = cv2.connectedComponentsWithStats(region.astype(np.uint8), connectivity=8)
        near = cv2.dilate((dets[a].mask | others).astype(np.uint8), np.ones((2 * NEAR_PX + 1,) * 2, np.uint8)) > 0
        least = max(10, MIN_SHARE * int(dets[a].mask.sum()))   # smaller regions cannot lengthen it 1.2x
        touching = [k for k in np.unique(lab[near]) if k > 0 and stats[k, cv2.CC_STAT_AREA] >= least]
        longest = max(shapes[name].extents())
        for k in sorted(touching, key=lambda k: -stats[k, cv2.CC_STAT_AREA]):
            comp = lab == k
            if (comp & ~close).any():  # reaching beyond the shape's size from the piece: something else
                continue
            # with the depth-edge pixels along it that are as near as it (its outline)
            z = float(np.median(smoothed[comp]))
            ring = (cv2.dilate(comp.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0) & ~comp & ~dets[a].mask & ~others
            comp |= ring & (np.abs(smoothed - z) < JUMP_FRACTION * z)
            union = dets[a].mask | comp
            e = measure_extents(union, depth, K, smoothed)
            if GROWN * seen[a][0] < e[0] <= GROWN_MAX * longest and size_cost(e, shapes[name], metric, tol) <= COMPLETE_SIZE_COST:
                d = dets[a]
                dets[a] = Detection(union, d.label, d.score, d.class_scores)
                seen[a] = e
    return dets, seen


def _continuation(mask: np.ndarray, others: np.ndarray, depth: np.ndarray, smoothed: np.ndarray,
                  smooth: np.ndarray, K: np.ndarray, reach_m: float) -> tuple[np.ndarray, np.ndarray] | None:
    """((H, W) bool, (H, W) bool): the ``smooth`` pixels (no depth discontinuity of ``smoothed``)
    outside ``mask`` and ``others`` within ``reach_m`` of the mask's median depth; and the pixels
    within ``reach_m`` of its centroid across the image (back-projected at that depth). None when
    the mask has too few depth pixels."""
    v, u = np.nonzero(mask & (depth > 0))
    if len(u) < 10:
        return None
    z0 = float(np.median(depth[v, u]))
    close = np.zeros(depth.shape, np.uint8)
    cv2.circle(close, (int(round(u.mean())), int(round(v.mean()))), int(reach_m * float(K[0, 0]) / z0), 1, -1)
    region = smooth & (np.abs(smoothed - z0) < reach_m) & ~mask & ~others
    return region, close > 0


def _seen_through(m1: np.ndarray, m2: np.ndarray, depth: np.ndarray) -> bool:
    """Whether the pixels between masks ``m1`` and ``m2`` (H, W) bool (their union's convex
    hull less the union) are mostly behind the plane through their depth pixels (a fit
    z = a u + b v + c, m), by ``BEHIND_MARGIN_M`` or 3 robust sigma of the fit's residuals
    if more; masks without depth count as seen through, touching ones (no gap) not."""
    union = m1 | m2
    v, u = np.nonzero(union & (depth > 0))
    if len(u) < 10 or not (m1 & (depth > 0)).any() or not (m2 & (depth > 0)).any():
        return True
    hull = np.zeros(union.shape, np.uint8)
    cv2.fillConvexPoly(hull, cv2.convexHull(np.stack([u, v], 1).astype(np.int32)), 1)
    gv, gu = np.nonzero((hull > 0) & ~union & (depth > 0))
    if not len(gu):
        return False
    A = np.stack([u, v, np.ones_like(u)], 1).astype(np.float64)
    z = depth[v, u].astype(np.float64)
    coef, *_ = np.linalg.lstsq(A, z, rcond=None)
    resid = z - A @ coef
    margin = max(BEHIND_MARGIN_M, 3 * 1.4826 * float(np.median(np.abs(resid - np.median(resid)))))
    plane = coef[0] * gu + coef[1] * gv + coef[2]
    return float(np.mean(depth[gv, gu] > plane + margin)) >= BEHIND_SHARE


def _merged(d1: Detection, d2: Detection) -> Detection:
    """One detection of both masks: ``d1``'s class, the higher score, class scores weighted
    by the pieces' pixel counts."""
    cs = None
    if d1.class_scores is not None and d2.class_scores is not None:
        n1, n2 = float(d1.mask.sum()), float(d2.mask.sum())
        cs = (n1 * d1.class_scores + n2 * d2.class_scores) / max(n1 + n2, 1.0)
    return Detection(d1.mask | d2.mask, d1.label, max(d1.score, d2.score), cs)
