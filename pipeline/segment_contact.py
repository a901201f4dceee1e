"""Segment on depth recordings: a still name on a detection apart in 3-D from the moving parts.

Every part of a mechanism is joined to another, and joined parts touch: where a still part
holds a moving one (a hub and its arm's hinge, a carcass and its drawer), their surfaces meet
in 3-D in the chosen frame. A still look-alike can lie beside a swinging part in the image
while being far from it in depth (a distractor the ball passes in front of), so touching in
the image says little; ``apart_in_depth`` measures the 3-D gap instead: the least distance
(m) between the still detection's back-projected depth points and those of every named
detection that moves (``DepthMotion.shares``' narrow share at least ``MOVING_SHARE``; a still
surface something passes in front of does not move), against ``CONTACT_STEPS`` times the
motion cue's change threshold at the still detection's depth (``change_threshold``: depth
noise grows as z^2).

``drop_apart`` names the chosen frame again without the found detections that lie on such
an apart still named part, and without its pixels in the others (the caller's whole naming,
so that a shape it leaves unnamed is looked for with the full motion cue), and keeps that
naming only where it explains at least as many library shapes at a size they can have and
names every part at a fitting size: the look-alike loses its name only where the mechanism's
own parts take all the names it held, so no shape goes missing for it (no new stop).

``apart_from_mechanism`` asks the same of every named part, moving or not: the parts whose
depth points come within ``CONTACT_STEPS`` change thresholds of each other are joined, and a
part outside the largest group so joined is apart from the mechanism (a look-alike ball a
distractor, 0.8 m behind the arms, whose image the ball crosses: its depth changes as the ball
passes in front, so its share says it moves).

Not here: a still detection apart from the moving parts is not made background on its own
(a real clip may hold still library objects apart from the moving one); the image-space
``Motion.attached`` of the full cue is unchanged.
"""
from __future__ import annotations

import itertools
import logging
from dataclasses import replace
from typing import Callable, TypeVar

import networkx as nx
import numpy as np
from scipy.spatial import cKDTree

from vid2sim.datasets.shapes import Shape
from vid2sim.pipeline.segment_fallback import explained
from vid2sim.pipeline.segment_size import size_cost
from vid2sim.pipeline.segment_sphere import mask_points
from vid2sim.pipeline.segment_still import MOVING_SHARE, DepthMotion, change_threshold

log = logging.getLogger("vid2sim.pipeline.segment")

CONTACT_STEPS = 2.0  # a still part touches a moving one where their depth points come within this many change thresholds
MOST_POINTS = 4000  # points per mask at most (evenly strided) for the 3-D gaps
ON_APART = 0.5  # in [0, 1]: a found detection with at least this share of its pixels on an apart part is dropped with it;
# one with less loses those pixels

C = TypeVar("C")
Parts = tuple[list, list[tuple[float, float]], list[str]]  # (detections, seen extents m, library names)


def sampled_points(mask: np.ndarray, depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """(N, 3) camera-frame points (m) of the mask's depth pixels, at most ``MOST_POINTS``."""
    p = mask_points(mask, depth, K)
    return p[:: max(1, len(p) // MOST_POINTS)]


def depth_gaps(masks: list[np.ndarray], shares: np.ndarray, depth: np.ndarray, K: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray]:
    """((n,) m, (n,) m): per still mask (share under ``MOVING_SHARE``), the least 3-D distance
    between its depth points and every moving mask's (share at least ``MOVING_SHARE``), and its
    median depth; NaN for the others, and for all where no mask moves. masks: (H, W) bool;
    shares: (n,) narrow motion shares (NaN: unknown); depth (H, W) m and intrinsics K of the
    masks' frame."""
    m = np.nan_to_num(np.asarray(shares, float), nan=-1.0)
    gaps, zs = np.full(len(masks), np.nan), np.full(len(masks), np.nan)
    moving = [p for p in (sampled_points(masks[j], depth, K) for j in np.flatnonzero(m >= MOVING_SHARE)) if len(p)]
    if not moving:
        return gaps, zs
    tree = cKDTree(np.concatenate(moving))
    for j in np.flatnonzero((m >= 0) & (m < MOVING_SHARE)):
        p = sampled_points(masks[j], depth, K)
        if len(p):
            gaps[j], zs[j] = float(tree.query(p)[0].min()), float(np.median(p[:, 2]))
    return gaps, zs


def apart_in_depth(masks: list[np.ndarray], shares: np.ndarray, depth: np.ndarray, K: np.ndarray,
                   k: float) -> np.ndarray:
    """(n,) bool: the still masks whose ``depth_gaps`` gap exceeds ``CONTACT_STEPS`` change
    thresholds (``change_threshold(z, k)``, z its median depth, k 1/m the recording's noise);
    all False where no mask moves."""
    gaps, zs = depth_gaps(masks, shares, depth, K)
    ok = np.isfinite(gaps)
    out = np.zeros(len(masks), bool)
    out[ok] = gaps[ok] > CONTACT_STEPS * change_threshold(zs[ok], k)
    return out


def apart_from_mechanism(masks: list[np.ndarray], depth: np.ndarray, K: np.ndarray, k: float) -> np.ndarray:
    """(n,) bool: the masks outside the largest group of masks joined in 3-D, two masks joined
    where the least distance between their depth points is at most ``CONTACT_STEPS`` change
    thresholds (``change_threshold`` at the nearer of their median depths, k 1/m the recording's
    noise); all False where two groups tie for the largest or fewer than three masks have depth.
    masks: (H, W) bool; depth (H, W) m and intrinsics K of the masks' frame."""
    out = np.zeros(len(masks), bool)
    pts = [sampled_points(m, depth, K) for m in masks]
    have = [j for j, p in enumerate(pts) if len(p)]
    if len(have) < 3:
        return out
    graph = nx.Graph()
    graph.add_nodes_from(have)
    trees = {j: cKDTree(pts[j]) for j in have}
    zs = {j: float(np.median(pts[j][:, 2])) for j in have}
    for a, b in itertools.combinations(have, 2):
        z = min(zs[a], zs[b])
        if trees[a].query(pts[b], distance_upper_bound=CONTACT_STEPS * float(change_threshold(z, k)))[0].min() < np.inf:
            graph.add_edge(a, b)
    groups = sorted((len(g), sorted(g)) for g in nx.connected_components(graph))
    if len(groups) < 2 or groups[-1][0] == groups[-2][0]:
        return out
    out[have] = True
    out[groups[-1][1]] = False
    return out


def drop_apart(motion: DepthMotion, best: C, parts: Parts, finish: Callable[[C], Parts],
               wanted: set[str], shapes: dict[str, Shape], K: np.ndarray, tol: float, fit: float) -> Parts:
    """``parts`` (the chosen candidate ``best``'s named detections, seen extents m, names, masks
    at segment's working resolution, intrinsics K) named again by ``finish`` from ``best``
    without the found detections lying on a named still part apart in 3-D from the moving
    parts (``apart_in_depth``), where that explains at least as many shapes of ``wanted`` at
    a size they can have (``size_cost`` at most ``fit``) and names every part at such a size;
    ``parts`` otherwise. ``best`` is a ``segment.Candidate`` (``frame``, ``depth``, ``found``)."""
    dets, seen, names = parts
    if not dets:
        return parts
    masks = [d.mask for d in dets]
    apart = apart_in_depth(masks, motion.shares(best.frame, masks), best.depth, K, motion.k)
    if not apart.any():
        return parts
    gone = np.any([masks[j] for j in np.flatnonzero(apart)], axis=0)
    if not any((f.mask & gone).any() for f in best.found):
        return parts
    found = [replace(f, mask=f.mask & ~gone) for f in best.found
             if (f.mask & gone).sum() < ON_APART * max(1, int(f.mask.sum()))]
    again = finish(best._replace(found=found))
    before = explained(parts, wanted, shapes, tol, fit)
    if explained(again, wanted, shapes, tol, fit) < before or not again[2] or any(
            size_cost(e, shapes[n], True, tol) > fit for e, n in zip(again[1], again[2])):
        log.info("segment: frame %d: %s apart in depth from the moving parts, kept (naming without it explains "
                 "fewer shapes, or a part at a size it cannot have)", best.frame, ", ".join(n for n, a in zip(names, apart) if a))
        return parts
    log.info("segment: frame %d: the still %s apart in depth from the moving parts is background; named again: %s",
             best.frame, ", ".join(n for n, a in zip(names, apart) if a), ", ".join(again[2]))
    return again


__all__ = ["CONTACT_STEPS", "apart_from_mechanism", "apart_in_depth", "depth_gaps", "drop_apart"]
