"""Segment on depth recordings: a library shape with no mask of its own, named on a detection
joined to the mechanism in 3-D that no named part covers.

A part the segmenter finds at a low score (a ball partly hidden behind its rod, seen smaller
than its shape) is kept only where it explains an open library shape; where a look-alike of
its shape (a distractor ball, whole and of the right size) takes that name first, the part is
dropped and its name stays on the look-alike. Every part of a mechanism is joined to another
(``segment_contact``): the look-alike lies outside the largest group of named parts joined
in 3-D (``segment_contact.apart_from_mechanism``), while the part lies within
``CONTACT_STEPS`` change thresholds of a part in it. A part of a class the library gives
another shape (a far box hub seen as a cylinder) may likewise be left unnamed while it
touches the named parts.

``near_mechanism`` looks, where a library name is held only by parts apart from the
mechanism or a shape is unnamed, at the frame's detections outside the named masks
(``_candidates``): each whose pixels lie mostly (at least ``segment_contact.ON_APART``)
outside every named mask and come within ``CONTACT_STEPS`` change thresholds of a named part
not apart, and that either moves (the narrow motion share at least ``MOVING_SHARE``) with a
size fitting a name the look-alikes hold (``size_cost`` at most ``fit``), or fits an unnamed
shape closely (at most ``segment_missing.CLOSE_FIT``, with that shape's class evidence as
``segment_missing.other_class`` gives it). Those detections and the named parts (less the
look-alikes holding a name, where one does) are named again; the naming is kept where the
named parts keep their names, every name given before is given, none is repeated, a new part
is named and each new part fits its name (``size_cost`` at most ``fit``); the look-alikes are
then background. Otherwise the parts are returned unchanged.

Not here: a part no detection covers (``segment_still.moving_proposals``), a sphere inside a
moving rod's mask (``segment_inside.sphere_inside``), a still name apart from the moving parts
(``segment_contact.drop_apart``). Masks are (H, W) bool at segment's working resolution.
"""
from __future__ import annotations

import logging
from dataclasses import replace
from typing import Callable

import numpy as np
from scipy.spatial import cKDTree

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_contact import CONTACT_STEPS, ON_APART, sampled_points
from vid2sim.pipeline.segment_missing import CLOSE_FIT, other_class
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_still import MOVING_SHARE, change_threshold

log = logging.getLogger("vid2sim.pipeline.segment")

Parts = tuple[list[Detection], list[tuple[float, float]], list[str]]  # (detections, seen extents m, names)


def joined(region: np.ndarray, tree: cKDTree, depth: np.ndarray, K: np.ndarray, k: float) -> bool:
    """Whether the depth points of ``region`` (H, W) bool come within ``CONTACT_STEPS`` change
    thresholds (``change_threshold`` at their median depth, k 1/m the recording's noise) of
    the points in ``tree`` (camera frame, m)."""
    p = sampled_points(region, depth, K)
    if not len(p):
        return False
    reach = CONTACT_STEPS * float(change_threshold(np.median(p[:, 2]), k))
    return bool(tree.query(p, distance_upper_bound=reach)[0].min() < np.inf)


def _candidates(found: list[Detection], taken: np.ndarray, tree: cKDTree, held: set[str], missing: set[str],
                moves: Callable[[list[np.ndarray]], np.ndarray], shapes: dict[str, Shape], depth: np.ndarray,
                K: np.ndarray, smoothed: np.ndarray, k: float, tol: float, least: int, fit: float
                ) -> tuple[list[Detection], list[tuple[float, float]]]:
    """(detections, seen extents m): the pixels outside ``taken`` (H, W) bool of each detection
    of ``found`` that keeps at least ``least`` px and ``ON_APART`` of its pixels there, joined in
    3-D to the points of ``tree`` (``joined``), and either moving (``moves``' share at least
    ``MOVING_SHARE``) with a size fitting a name of ``held`` (``size_cost`` at most ``fit``), or
    of a size fitting a name of ``missing`` closely (at most ``CLOSE_FIT``; class evidence for
    that shape's class where the segmenter gave another, ``segment_missing.other_class``)."""
    new, new_seen = [], []
    for f in found:
        region = f.mask & ~taken
        n_px = int(region.sum())
        if n_px < max(least, 1) or n_px < ON_APART * int(f.mask.sum()):
            continue   # mostly a named part's pixels (or a look-alike's own detection)
        e = measure_extents(region, depth, K, smoothed)
        close = [n for n in missing if size_cost(e, shapes[n], True, tol) <= CLOSE_FIT]
        loose = any(size_cost(e, shapes[n], True, tol) <= fit for n in held)
        if not (close or loose) or not joined(region, tree, depth, K, k):
            continue   # no open name fits, or apart from the mechanism's parts in 3-D
        if not close and moves([region])[0] < MOVING_SHARE:
            continue   # a still part takes no name from a look-alike
        d = replace(f, mask=region)
        new.append(other_class([d], shapes, sorted(close), depth, K, smoothed, tol)[0] if close else d)
        new_seen.append(e)
        taken = taken | region
    return new, new_seen


def near_mechanism(parts: Parts, apart: np.ndarray, found: list[Detection], wanted: set[str],
                   moves: Callable[[list[np.ndarray]], np.ndarray],
                   rename: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]],
                   shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, k: float,
                   tol: float, least: int, fit: float) -> tuple[Parts, np.ndarray]:
    """(the named ``parts``, their ``apart`` (n,) bool) with each library name held only by
    parts apart from the mechanism, and each shape of ``wanted`` unnamed, given to a detection
    of ``found`` joined to the mechanism in 3-D (``_candidates``), where that names as well
    (module docstring); unchanged otherwise. moves: masks -> (n,) narrow motion shares; rename:
    detections, extents -> names (None: background); depth (H, W) m, K, ``smoothed`` as for
    ``measure_extents``; k: the recording's noise (1/m); least: px a detection keeps outside
    the named masks at least."""
    dets, seen, names = parts
    apart = np.asarray(apart, bool)
    held = {names[j] for j in np.flatnonzero(apart)} - {names[j] for j in np.flatnonzero(~apart)}
    missing = set(wanted) - set(names)
    if not (held or missing) or apart.all() or not dets:
        return parts, apart
    pts = [p for p in (sampled_points(dets[j].mask, depth, K) for j in np.flatnonzero(~apart)) if len(p)]
    if not pts:
        return parts, apart
    new, new_seen = _candidates(found, np.any([d.mask for d in dets], axis=0), cKDTree(np.concatenate(pts)), held,
                                missing, moves, shapes, depth, K, smoothed, k, tol, least, fit)
    if not new:
        return parts, apart
    stay = [j for j in range(len(dets)) if not (held and apart[j])]   # look-alikes holding a name drop out
    trial, trial_seen = [dets[j] for j in stay] + new, [seen[j] for j in stay] + new_seen
    got = rename(trial, trial_seen)
    named = [n for n in got if n is not None]
    keep = [j for j, n in enumerate(got) if n is not None]
    if got[:len(stay)] != [names[j] for j in stay] or len(set(named)) < len(named) or not set(names) <= set(named) \
            or len(keep) == len(stay) or any(n is not None and size_cost(e, shapes[n], True, tol) > fit
                                             for n, e in zip(got[len(stay):], new_seen)):
        return parts, apart
    for j in keep[len(stay):]:
        log.info("segment: %s named on a %s joined to the mechanism in 3-D (%d px, seen %.3f x %.3f m)%s", got[j],
                 CLASSES[trial[j].label], int(trial[j].mask.sum()), *trial_seen[j],
                 "; the look-alike apart from it that held the name is background" if got[j] in held else "")
    again = ([trial[j] for j in keep], [trial_seen[j] for j in keep], [got[j] for j in keep])
    return again, np.array([j < len(stay) and apart[stay[j]] for j in keep], bool)


__all__ = ["joined", "near_mechanism"]
