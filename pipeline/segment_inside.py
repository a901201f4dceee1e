"""Segment on depth recordings: a library sphere named on a still look-alike apart from the
mechanism, found instead inside a moving part's mask.

A ball welded to a rod's end is often one mask with the rod (the rod's mask then wider than
its shape), and a still sphere-like distractor on the floor takes the ball's name. The motion
cue tells the two apart: the distractor is still with no moving region on or near it
(``Motion.loose``), while every part of the mechanism moves or touches one that does. Where
the ball crosses in front of the distractor in the image, the image test counts it attached
and its depth changes as the ball passes; it is then told apart in 3-D: outside the group of
named parts joined in depth (``segment_contact.apart_from_mechanism``, the caller's ``apart``).

``sphere_inside`` looks, for each library sphere named on such a loose detection, inside the
named masks that move (share at least ``MOVING_SHARE``) for the sphere's depth
(``sphere_search``: RANSAC over the mask's points for a centre with the most points on the
sphere's surface, checked by ``segment_sphere.sphere_fit``; the largest inscribed
disk alone, ``segment_sphere.sphere_disk``, straddles the rod and the ball where the ball is
partly outside the mask or a rod crosses in front of it). The sphere's image disk, less the
pixels whose depth lies outside the sphere (the rod in front), becomes the sphere's part, the
rest stays the holder's, the loose detection is dropped, and the parts are named again. A cut
is kept where the disk takes the sphere's name, the holder a name at a size cost no larger
than its own before (the rod's mask less the ball may fit a look-alike rod's name better),
the same names are given, and every named part fits its shape
(``size_cost`` at most ``fit``); of several holders, the one whose size cost drops most.

Masks are (H, W) bool at segment's working resolution; depth (H, W) m.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable, Iterable

import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_sphere import (DISK_GROW, MIN_POINTS, SPHERE_RES, SPLIT_GAIN, mask_points,
                                             library_spheres, sphere_fit)
from vid2sim.pipeline.segment_still import MOVING_SHARE, Motion

log = logging.getLogger("vid2sim.pipeline.segment")

SPHERE = CLASSES.index("sphere")
RANSAC_TRIES = 2000  # sphere_search: random triples of depth points, each giving a candidate centre
INLIER = 0.1  # sphere_search: a point within this share of the radius of a sphere's surface lies on it
OFF_SPHERE = 0.2  # sphere_search: a pixel whose point lies over (1 + this) r from the centre is not the sphere's
MIN_INLIERS = 0.5  # sphere_search: least share of the mask's pixels within the sphere's image on its surface
Named = tuple[list[Detection], list[tuple[float, float]], list[str]]


def sphere_centres(p: np.ndarray, r: float, rng: np.random.Generator, tries: int = RANSAC_TRIES) -> np.ndarray:
    """(M, 3) centres (camera frame, m) of spheres of radius ``r`` (m) through three points of
    ``p`` (N, 3) drawn at random ``tries`` times, the one of each pair of solutions farther
    from the camera (a visible surface lies in front of its centre); triples whose
    circumradius exceeds r or that are (near) collinear give none."""
    if len(p) < 3:
        return np.zeros((0, 3))
    i = rng.integers(0, len(p), (tries, 3))
    a, b, c = p[i[:, 0]], p[i[:, 1]], p[i[:, 2]]
    ab, ac = b - a, c - a
    n = np.cross(ab, ac)
    nn = (n * n).sum(1)
    ok = nn > 1e-16
    ab, ac, n, nn, a = ab[ok], ac[ok], n[ok], nn[ok], a[ok]
    # the circumcentre of the triangle (a, b, c), then along its normal by sqrt(r^2 - rho^2)
    o = a + (np.cross(n, ab) * (ac * ac).sum(1, keepdims=True)
             + np.cross(ac, n) * (ab * ab).sum(1, keepdims=True)) / (2 * nn[:, None])
    rho2 = ((o - a) ** 2).sum(1)
    keep = rho2 < r * r
    o, n, nn, rho2 = o[keep], n[keep], nn[keep], rho2[keep]
    u = n / np.sqrt(nn)[:, None]
    u = u * np.sign((u * o).sum(1, keepdims=True) + 1e-12)  # pointing away from the camera
    return o + u * np.sqrt(r * r - rho2)[:, None]


def sphere_search(mask: np.ndarray, depth: np.ndarray, K: np.ndarray, r: float,
                  seed: int = 0) -> np.ndarray | None:
    """The pixels (H, W) bool of ``mask`` that show a sphere of radius ``r`` (m) beside another
    part (a ball at a rod's end in one mask): a centre found by RANSAC over the mask's depth
    points (``sphere_centres``; inliers within ``INLIER`` r of the sphere's surface), checked
    by ``sphere_fit`` on its inliers, which must fit it with a residual at most ``SPLIT_GAIN``
    of their best plane's and ``SPHERE_RES`` r and be at least ``MIN_INLIERS`` of the mask's
    pixels within the sphere's image radius R of the centre's image; then the mask's pixels
    within ``DISK_GROW`` R of it. None where no centre fits."""
    valid = mask & (depth > 0)
    if valid.sum() < MIN_POINTS:
        return None
    v, u = np.nonzero(valid)
    p = mask_points(valid, depth, K)
    centres = sphere_centres(p, r, np.random.default_rng(seed))
    if not len(centres):
        return None
    best, count = None, 0
    for chunk in np.array_split(centres, max(1, len(centres) // 64)):
        dist = np.linalg.norm(p[None, :, :] - chunk[:, None, :], axis=2)
        hits = (np.abs(dist - r) <= INLIER * r).sum(1)
        j = int(np.argmax(hits))
        if hits[j] > count:
            best, count = chunk[j], int(hits[j])
    inl = np.abs(np.linalg.norm(p - best, axis=1) - r) <= INLIER * r
    sph, plane = sphere_fit(p[inl], r)
    if not (sph <= SPLIT_GAIN * plane and sph <= SPHERE_RES * r):
        return None
    uc, vc = K[0, 0] * best[0] / best[2] + K[0, 2], K[1, 1] * best[1] / best[2] + K[1, 2]
    R = K[0, 0] * r / best[2]
    ring = np.hypot(*(np.mgrid[:mask.shape[0], :mask.shape[1]] - np.array([vc, uc])[:, None, None]))
    if inl.sum() < MIN_INLIERS * (valid & (ring <= R)).sum():
        return None
    # the disk less the pixels whose depth lies off the sphere, outside it (a rod crossing in
    # front of the ball, a surface behind it)
    off = np.zeros(mask.shape, bool)
    off[v, u] = np.linalg.norm(p - best, axis=1) > r * (1 + OFF_SPHERE)
    return (ring <= DISK_GROW * R) & mask & ~off


def sphere_inside(cues: Motion, parts: Named,
                  name: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]],
                  shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, tol: float,
                  least: int, fit: float, apart: np.ndarray | None = None) -> Named:
    """The named ``parts`` (detections, seen extents m, library names) with a library sphere
    named on a loose still detection, or on one ``apart`` from the mechanism, cut out of a
    moving named mask instead, where that names as well (module docstring); unchanged
    otherwise. cues: the parts' ``Motion`` with ``attached`` measured (``DepthMotion.cues``);
    name: the caller's naming of detections with their extents (None: background); least: px
    the holder keeps at least; apart: (n,) bool, the parts apart in 3-D from the mechanism
    (``segment_contact.apart_from_mechanism``; None: none)."""
    dets, seen, names = parts
    loose = cues.loose() if dets else None
    if loose is None:
        return parts
    if apart is not None:
        loose = loose | np.asarray(apart, bool)
    shares = np.nan_to_num(np.asarray(cues.shares, float), nan=-1.0)
    for sphere, r in library_spheres(shapes).items():
        if sphere not in names or not loose[names.index(sphere)]:
            continue
        k = names.index(sphere)
        cuts = []   # (the holder's size cost gained, holder, parts)
        for h in range(len(dets)):
            if h == k or shares[h] < MOVING_SHARE or dets[h].label == SPHERE:
                continue
            trial = _cut(dets, seen, names, k, h, r, sphere, name, shapes, depth, K, smoothed, tol, least, fit)
            if trial is not None:
                cuts.append((trial[0], h, trial[1]))
        if cuts:
            _, h, parts = max(cuts, key=lambda c: c[0])
            log.info("segment: %s cut out of %s's mask; the still %s apart from the moving parts is background",
                     sphere, names[h], CLASSES[dets[k].label])
            dets, seen, names = parts
    return dets, seen, names


def drop_apart_repeats(parts: Named, apart: np.ndarray, spheres: Iterable[str]) -> tuple[Named, np.ndarray]:
    """(the named ``parts`` (detections, seen extents m, library names), their ``apart``) less
    the parts that repeat a library sphere's name (of ``spheres``) while apart from the
    mechanism (apart: (n,) bool, ``segment_contact.apart_from_mechanism``) where a part not
    apart holds that name too: a still look-alike ball the ball crosses in front of, beside
    the ball's own mask. Unchanged where no such repeat."""
    dets, seen, names = parts
    drop = {j for n in spheres for j in range(len(names)) if names[j] == n and apart[j]
            and any(names[i] == n and not apart[i] for i in range(len(names)))}
    if not drop:
        return parts, apart
    for j in sorted(drop):
        log.info("segment: a %s about %.3g x %.3g m repeating library sphere %s apart in depth from the mechanism "
                 "is background", CLASSES[dets[j].label], *seen[j], names[j])
    keep = [j for j in range(len(names)) if j not in drop]
    return ([dets[j] for j in keep], [seen[j] for j in keep], [names[j] for j in keep]), apart[keep]


def _cut(dets: list[Detection], seen: list[tuple[float, float]], names: list[str], k: int, h: int, r: float,
         sphere: str, name: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]],
         shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, tol: float, least: int,
         fit: float) -> tuple[float, Named] | None:
    """(the holder's size cost gained, the parts): the loose detection k dropped and the sphere
    cut out of holder h's mask, named again, where that keeps every name and the holder fits
    its name (its own, or one another part held) no worse (``sphere_inside``); None where not."""
    holder = dets[h]
    ball = sphere_search(holder.mask, depth, K, r)
    if ball is None or (holder.mask & ~ball).sum() < max(least, 1):
        return None
    cs = np.zeros(len(CLASSES))
    cs[SPHERE] = holder.score
    rest = [j for j in range(len(dets)) if j not in (k, h)]
    trial = [dets[j] for j in rest] + [replace(holder, mask=holder.mask & ~ball),
                                       Detection(ball, SPHERE, holder.score, cs)]
    trial_seen = [seen[j] for j in rest] + [measure_extents(d.mask, depth, K, smoothed) for d in trial[-2:]]
    got = name(trial, trial_seen)
    if got[-1] != sphere or got[-2] is None or sorted(n for n in got if n is not None) != sorted(names):
        return None
    gain = size_cost(seen[h], shapes[names[h]], True, tol) - size_cost(trial_seen[-2], shapes[got[-2]], True, tol)
    if gain < 0:
        return None
    if any(n is not None and size_cost(e, shapes[n], True, tol) > fit for n, e in zip(got, trial_seen)):
        return None
    named = [(d, e, n) for d, e, n in zip(trial, trial_seen, got) if n is not None]
    return gain, ([d for d, _, _ in named], [e for _, e, _ in named], [n for _, _, n in named])


__all__ = ["drop_apart_repeats", "sphere_inside", "sphere_search"]
