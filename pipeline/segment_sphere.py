"""Segment: a library sphere found by fitting its radius to a mask's depth points.

The network is least sure of a small sphere: at far framing a ball 10-15 px across is
classed a capsule or cylinder with almost no sphere score, and a ball at the end of a rod
is often one mask with the rod. The depth tells a sphere from the rest: the visible surface
of a sphere of the library's radius r is a cap whose points lie at r from one centre behind
them, which neither a box's faces (planes) nor a rod of another radius fit.

``sphere_fit`` fits a sphere of a given radius to a mask's back-projected points (camera
frame, m; Gauss-Newton on the distance residual from a start r behind their centroid) and
compares its RMS residual with the best plane's. ``confirm_spheres`` gives a detection whose
depth fits a library sphere (``SPHERE_GAIN``: the sphere's RMS residual at most that share of
the plane's) the sphere class evidence of its own score, so its size decides its name
(``segment_match.match_shapes``). ``split_sphere`` cuts a sphere out of a larger mask where a
library sphere is unnamed: the inscribed disk of the sphere's image radius (distance
transform of the mask) whose depth fits the sphere, the rest kept as the other part.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable

import cv2
import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_size import measure_extents

SPHERE = CLASSES.index("sphere")
SPHERE_GAIN = 0.55  # a mask's depth fits a sphere where its residual is at most this share of the best plane's
SPHERE_RES = 0.1  # ... and at most this share of the radius
MIN_POINTS = 12  # fewer depth points than this say nothing of the surface's shape
SPLIT_GAIN = 0.6  # split_sphere: the disk's depth fits the sphere with a residual at most this share of the plane's
DISK_FILL = 0.7  # split_sphere: the mask must hold a disk of at least this share of the sphere's image radius
DISK_GROW = 1.15  # split_sphere: the sphere's pixels are those of the mask within this many image radii of the disk's centre


def mask_points(mask: np.ndarray, depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """(N, 3) camera-frame points (m) of the mask's pixels with depth."""
    v, u = np.nonzero(mask & (depth > 0))
    z = depth[v, u].astype(np.float64)
    return np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], 1)


def sphere_fit(p: np.ndarray, r: float) -> tuple[float, float]:
    """(median absolute distance residual (m) of the best sphere of radius ``r`` (m) whose
    centre lies behind the points, the same of their best plane) of camera-frame points
    ``p`` (N, 3), both fitted with the points farther than ``2 r`` in depth from their median
    left out (edge pixels on the background) and residuals beyond 3 median absolute
    residuals down-weighted; (inf, 0) where fewer than ``MIN_POINTS`` are left."""
    if len(p) >= MIN_POINTS:
        p = p[np.abs(p[:, 2] - np.median(p[:, 2])) < 2 * r]
    if len(p) < MIN_POINTS:
        return np.inf, 0.0
    w = np.ones(len(p))
    for _ in range(3):   # plane: weighted PCA, re-weighted by the residuals
        m = (w[:, None] * p).sum(0) / w.sum()
        q = p - m
        n = np.linalg.eigh((w[:, None] * q).T @ q)[1][:, 0]
        res_plane = np.abs(q @ n)
        w = _weights(res_plane)
    m = p.mean(0)
    c = m + r * m / np.linalg.norm(m)
    w = np.ones(len(p))
    for it in range(20):   # sphere: Gauss-Newton on the distance residual, re-weighted
        d = p - c
        dist = np.maximum(np.linalg.norm(d, axis=1), 1e-9)
        res = dist - r
        if it % 4 == 3:
            w = _weights(np.abs(res))
        J = -d / dist[:, None]   # d(dist)/dc
        sw = np.sqrt(w)[:, None]
        step, *_ = np.linalg.lstsq(J * sw, -(res[:, None] * sw)[:, 0], rcond=None)
        c = c + step
        if np.linalg.norm(step) < 1e-6:
            break
    if c @ m <= m @ m:   # the centre must lie behind the surface
        return np.inf, float(np.median(res_plane))
    return float(np.median(np.abs(np.linalg.norm(p - c, axis=1) - r))), float(np.median(res_plane))


def _weights(res: np.ndarray) -> np.ndarray:
    """Huber-like weights: 1 within 3 median absolute residuals, falling off beyond."""
    s = max(3 * float(np.median(res)), 1e-6)
    return np.minimum(1.0, s / np.maximum(res, 1e-12))


def fits_sphere(mask: np.ndarray, depth: np.ndarray, K: np.ndarray, r: float) -> bool:
    """Whether the mask's depth points fit a sphere of radius ``r`` (m) better than a plane
    (median absolute residual at most ``SPHERE_GAIN`` of the plane's and ``SPHERE_RES`` r)."""
    sph, plane = sphere_fit(mask_points(mask, depth, K), r)
    return sph <= SPHERE_GAIN * plane and sph <= SPHERE_RES * r


def library_spheres(shapes: dict[str, Shape]) -> dict[str, float]:
    """{name: radius (m)} of the library's spheres."""
    return {n: float(sh.radius) for n, sh in shapes.items() if sh.type == "sphere"}


def confirm_spheres(dets: list[Detection], depth: np.ndarray, K: np.ndarray,
                    shapes: dict[str, Shape]) -> list[Detection]:
    """``dets`` with each detection not classed a sphere whose depth fits a library sphere's
    radius (``fits_sphere``; depth (H, W) m, K (3, 3)) given sphere class evidence equal to
    its score: its size then decides between the sphere and its own class. Unchanged where
    the library has no sphere."""
    radii = sorted(set(library_spheres(shapes).values()))
    if not radii:
        return dets
    out = []
    for d in dets:
        cs = d.class_scores if d.class_scores is not None else np.eye(len(CLASSES))[d.label] * d.score
        if d.label != SPHERE and cs[SPHERE] < d.score and any(fits_sphere(d.mask, depth, K, r) for r in radii):
            cs = cs.copy()
            cs[SPHERE] = d.score
            d = replace(d, class_scores=cs)
        out.append(d)
    return out


def sphere_disk(mask: np.ndarray, depth: np.ndarray, K: np.ndarray, r: float) -> np.ndarray | None:
    """The pixels (H, W) bool of ``mask`` that show a sphere of radius ``r`` (m) beside
    something else (a ball at a rod's end in one mask): those within ``DISK_GROW`` image radii
    of the centre of the largest disk the mask (holes closed) holds, where that disk's radius
    is at least ``DISK_FILL`` of the sphere's image radius at its depth, the mask holds at
    least twice the sphere's image, and the depth of that disk fits the sphere with a
    residual at most ``SPLIT_GAIN`` of the plane's (``sphere_fit``). None where not."""
    m = cv2.morphologyEx(mask.astype(np.uint8), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
    dt = cv2.distanceTransform(m, cv2.DIST_L2, 5)
    v, u = np.unravel_index(int(np.argmax(dt)), dt.shape)
    ring = np.hypot(*(np.mgrid[:mask.shape[0], :mask.shape[1]] - np.array([v, u])[:, None, None]))
    inner = (ring <= max(float(dt[v, u]), 1.0)) & mask & (depth > 0)
    if inner.sum() < MIN_POINTS:
        return None
    R = K[0, 0] * r / (float(np.median(depth[inner])) + r)   # px: the sphere's image radius
    if dt[v, u] < DISK_FILL * R or mask.sum() < 2 * np.pi * R**2:
        return None
    sph, plane = sphere_fit(mask_points(inner, depth, K), r)
    if not (sph <= SPLIT_GAIN * plane and sph <= SPHERE_RES * r):
        return None
    return (ring <= DISK_GROW * R) & mask


def split_sphere(dets: list[Detection], names: list[str | None], seen: list[tuple[float, float]],
                 depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, shapes: dict[str, Shape], least: int,
                 name: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]]
                 ) -> tuple[list[Detection], list[str | None], list[tuple[float, float]]]:
    """(parts, names, seen extents m) with a library sphere no part is named after cut out of
    the mask that shows it beside another part (``sphere_disk``), where the rest keeps at
    least ``least`` px and as many as the sphere's, and the naming of the parts then
    (``name``: library name per part of (parts, seen extents)) gives the cut-out part that
    sphere's name and names one library shape more; unchanged otherwise. depth (H, W) m,
    K (3, 3), smoothed its ``smooth_depth``."""
    for sphere, r in library_spheres(shapes).items():
        if sphere in names:
            continue
        for k in np.argsort([-d.mask.sum() for d in dets]):
            d = dets[k]
            ball = sphere_disk(d.mask, depth, K, r) if d.label != SPHERE else None
            if ball is None or (d.mask & ~ball).sum() < max(least, ball.sum()):
                continue
            cs = np.zeros(len(CLASSES))
            cs[SPHERE] = d.score
            parts = list(dets)
            parts[k] = replace(d, mask=d.mask & ~ball)
            parts.append(Detection(ball, SPHERE, d.score, cs))
            extents = list(seen)
            extents[k] = measure_extents(parts[k].mask, depth, K, smoothed)
            extents.append(measure_extents(ball, depth, K, smoothed))
            named = name(parts, extents)
            if named[-1] == sphere and sum(n is not None for n in set(named)) > sum(n is not None for n in set(names)):
                dets, names, seen = parts, named, extents
                break
    return dets, names, seen
