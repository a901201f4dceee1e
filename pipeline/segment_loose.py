"""Segment on depth recordings: a library name on a still piece apart in 3-D from everything
that moves, given to a moving region of that shape's size that no part covers.

At a far camera (parts 50-300 px) the segmenter may never propose a thin moving part (a pole
4-5 px across) while a piece of the background of the part's class and size (a table's leg
or edge) is proposed and takes its name. What never moves relative to the camera and touches
nothing that moves is no part of a moving mechanism: each part either moves over the clip or
is joined to a part that does, and joined parts touch in 3-D (a pendulum's base holds its
swinging link; a carcass its door).

``loose_to_moving`` marks as *loose* each named part that is still (narrow motion share under
``MOVING_SHARE``) and whose depth points come within ``CONTACT_STEPS`` change thresholds of
no moving region of the chosen frame (``DepthMotion.changed``: pixels changed in at least
``REGION_SHARE`` of the sampled frames) and of no moving named part (``segment_near.joined``).
The names the loose parts hold are then looked for among the moving regions the other named
parts leave uncovered (``segment_still.moving_proposals``: regions that move away from where
they are, touch the named parts in 3-D, each paired with one open shape by size). The frame's
parts less the loose ones, with those proposals, are named again; the naming is kept where
every other part keeps its name, every name held before is given, none is repeated and each
proposal fits its name (``size_cost`` at most ``fit``); the loose parts are then background.
Otherwise the parts are returned unchanged: a loose part keeps its name where nothing moving
can take it, so a mechanism's part fixed to the world that the sampled frames show apart
from the moving ones is never dropped for nothing, and a library part absent from the scene
named on clutter is not renamed onto a piece of another part.

Not here: a still named part apart in depth from the moving *named* parts, named again
without it (``segment_contact.drop_apart``); a name held by a look-alike apart from the
largest group of joined parts (``segment_near``). Masks are (H, W) bool at segment's working
resolution.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

import cv2
import numpy as np
from scipy.spatial import cKDTree

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_contact import Parts, sampled_points
from vid2sim.pipeline.segment_near import joined
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_still import MOVING_SHARE, REGION_SHARE, DepthMotion, moves_away, moving_proposals

log = logging.getLogger("vid2sim.pipeline.segment")

def moving_points(motion: DepthMotion, i: int, masks: list[np.ndarray], shares: np.ndarray,
                  depth: np.ndarray, K: np.ndarray, least: int) -> np.ndarray:
    """(N, 3) camera-frame points (m) of what moves in frame i: the moving regions
    (``DepthMotion.changed``) of at least ``least`` px that move away from where they are
    (``moves_away``), and the ``masks`` whose narrow share (``shares`` (n,)) is at least
    ``MOVING_SHARE``; (0, 3) where nothing moves."""
    _, _, regions = motion.changed(i)
    n, lab, stats, _ = cv2.connectedComponentsWithStats(regions.astype(np.uint8), connectivity=8)
    pts = [sampled_points(lab == r, depth, K) for r in range(1, n)
           if stats[r, cv2.CC_STAT_AREA] >= least and moves_away(motion, i, lab == r)]
    pts += [sampled_points(m, depth, K) for m, s in zip(masks, np.nan_to_num(shares, nan=-1.0)) if s >= MOVING_SHARE]
    pts = [p for p in pts if len(p)]
    return np.concatenate(pts) if pts else np.zeros((0, 3))


def own_surface(motion: DepthMotion, i: int, dets: list[Detection], seen: list[tuple[float, float]],
               depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, least: int
               ) -> tuple[list[Detection], list[tuple[float, float]]]:
    """(detections, seen extents m): each of ``dets`` (moving regions proposed as parts) cut to
    the pixels frame i's own surface leaves: changed (``DepthMotion.changed``) without a nearer
    surface in front of them (``DepthMotion.beyond``) in at least ``REGION_SHARE`` of the
    sampled frames. A part that moves away shows what lies behind it, or no reading; the
    background it sweeps over at other times shows the part in front of it. Those keeping
    under ``least`` px are left out."""
    changed, _, _ = motion.changed(i)
    if not len(changed):
        return dets, seen
    _, near = motion.beyond(i)
    own = (changed & ~near).mean(0) >= REGION_SHARE
    out, out_seen = [], []
    for d in dets:
        m = d.mask & own
        if int(m.sum()) >= least:
            out.append(replace(d, mask=m))
            out_seen.append(measure_extents(m, depth, K, smoothed))
    return out, out_seen


def loose_parts(motion: DepthMotion, i: int, masks: list[np.ndarray], depth: np.ndarray, K: np.ndarray,
                least: int) -> np.ndarray:
    """(n,) bool: the ``masks`` of frame i that are still (narrow share under ``MOVING_SHARE``,
    ``DepthMotion.shares``) and joined in 3-D to nothing that moves (``moving_points``,
    ``segment_near.joined`` with the recording's noise ``motion.k``); all False where nothing
    moves. depth (H, W) m and intrinsics K at the masks' resolution."""
    out = np.zeros(len(masks), bool)
    if not masks:
        return out
    shares = np.asarray(motion.shares(i, masks), float)
    still = np.flatnonzero((np.nan_to_num(shares, nan=1.0) < MOVING_SHARE))
    if not len(still):
        return out
    pts = moving_points(motion, i, masks, shares, depth, K, least)
    if not len(pts):
        return out
    tree = cKDTree(pts)
    for j in still:
        out[j] = len(sampled_points(masks[j], depth, K)) > 0 and not joined(masks[j], tree, depth, K, motion.k)
    return out


def loose_to_moving(motion: DepthMotion, i: int, parts: Parts,
                    rename: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]],
                    shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray,
                    tol: float, least: int, fit: float) -> Parts:
    """``parts`` (frame i's named detections, seen extents m, names) with the names held by loose
    parts (``loose_parts``) given to moving regions no other part covers, where that names as
    well (module docstring); unchanged otherwise. rename: detections, extents -> names (None:
    background); depth (H, W) m, K, ``smoothed`` as for ``measure_extents``; least: px a
    moving region holds at least."""
    dets, seen, names = parts
    loose = loose_parts(motion, i, [d.mask for d in dets], depth, K, least)
    if not loose.any() or loose.all():
        return parts
    stay = [j for j in range(len(dets)) if not loose[j]]
    kept = ([dets[j] for j in stay], [seen[j] for j in stay], [names[j] for j in stay])
    new, new_seen = own_surface(motion, i, *moving_proposals(motion, i, kept[0], kept[2], shapes, depth, K, smoothed,
                                                            tol, least), depth, K, smoothed, least)
    if not new:
        return parts
    got = rename(kept[0] + new, kept[1] + new_seen)
    named = [n for n in got if n is not None]
    if got[:len(stay)] != kept[2] or len(set(named)) < len(named) or not set(names) <= set(named) or any(
            n is not None and size_cost(e, shapes[n], True, tol) > fit for n, e in zip(got[len(stay):], new_seen)):
        log.info("segment: frame %d: the still %s joined to nothing that moves kept (no moving region takes "
                 "the name at its size)", i, ", ".join(n for n, a in zip(names, loose) if a))
        return parts
    trial, trial_seen = kept[0] + new, kept[1] + new_seen
    keep = [j for j, n in enumerate(got) if n is not None]
    for j in keep[len(stay):]:
        log.info("segment: %s named on a moving region (%s, %d px, seen %.3f x %.3f m); the still piece joined "
                 "to nothing that moves that held the name is background", got[j], CLASSES[trial[j].label],
                 int(trial[j].mask.sum()), *trial_seen[j])
    return [trial[j] for j in keep], [trial_seen[j] for j in keep], [got[j] for j in keep]


__all__ = ["loose_parts", "loose_to_moving", "moving_points"]
