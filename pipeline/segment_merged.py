"""Segment: a rod cut from a detection too large for any library shape.

At RealSense-like noise a thin rod and the part welded or hinged to it (an arm and the fin
on it) often come out of the segmenter as one mask, while the smaller part is also found on
its own. No library shape fits that mask's size, so it is background, the rod has no mask
of its own, and its name goes to a look-alike rod (the other arm) whose own name is then
left unnamed. Where a rod shape of the library is still unnamed, ``rods_from_merged`` looks
at each of the chosen frame's detections that fits no library shape at a size it can have,
takes away the pixels of the parts already named, cuts from what is left the image segment
of each library rod in turn (``segment_still.carve_rods``) and keeps the cut of most pixels
that fits its rod's size, where it moves over the clip (a still look-alike behind the
mechanism gives none) and the detection touches a named part in the image; the frame is then
named again with those rods added. The new naming is kept only where it explains more of the library and every part fits its shape's size
(``segment_missing.names_more``), so a cut that names nothing new changes nothing.

Two rods end to end in one mask that names one of them are cut across by
``segment_missing.cut_along``.

Not here: a moving region no detection covers (``segment_still.moving_proposals``).
"""
from __future__ import annotations

import logging
from typing import Callable

import cv2
import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_missing import RODS, names_more
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_still import PROPOSAL_SCORE, carve_rods

log = logging.getLogger("vid2sim.pipeline.segment")

TOUCH_PX = 2  # px: a detection this near a named part's mask in the image may hold one of its neighbours
Parts = tuple[list[Detection], list[tuple[float, float]], list[str]]


def _best_rod(region: np.ndarray, rods: list[str], shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray,
              smoothed: np.ndarray, tol: float, min_px: int, fit: float
              ) -> tuple[str, np.ndarray, tuple[float, float]] | None:
    """(rod shape name, its carved mask (H, W) bool, seen extents m) of the rod of ``rods`` whose
    image segment cut from ``region`` (``carve_rods``) holds the most pixels (then fits its shape's
    size best), with at least ``min_px`` px and a ``size_cost`` of at most ``fit``; None where no
    cut does. A shorter shape's segment cuts a longer rod short: the cut of most pixels is the
    whole rod, and naming decides which rod it is."""
    best = None
    for n in rods:
        cut = carve_rods(region, depth, K, [shapes[n]])
        if not cut or int(cut[0].sum()) < min_px:
            continue
        e = measure_extents(cut[0], depth, K, smoothed)
        cost = size_cost(e, shapes[n], True, tol)
        key = (int(cut[0].sum()), -cost)
        if cost <= fit and (best is None or key > best[0]):
            best = (key, n, cut[0], e)
    return None if best is None else best[1:]


def rods_from_merged(parts: Parts, found: list[Detection], wanted: list[str], shapes: dict[str, Shape],
                     depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, tol: float, min_px: int, fit: float,
                     rename: Callable[[list[Detection], list[tuple[float, float]]], list[str | None]],
                     frame: int, moves: Callable[[list[np.ndarray]], np.ndarray] | None = None) -> Parts:
    """(parts, seen extents m, names): ``parts`` (the chosen frame's named detections, extents,
    names) where every rod shape of ``wanted`` is named; otherwise, for each detection of
    ``found`` (the frame's detections before naming) whose seen extents fit no ``wanted`` shape
    at a ``size_cost`` of at most ``fit``, the best-fitting library rod cut from its pixels not
    already in a named part (``_best_rod``; score ``PROPOSAL_SCORE``), and every part named again
    by ``rename`` (detections, extents -> names, None: background). That naming is returned
    where it names more of ``wanted`` with every part at a ``size_cost`` of at most ``fit``.
    Depth (m), ``smoothed``, K and masks at segment's working resolution; min_px: the fewest
    pixels of a cut rod; moves: masks -> (n,) bool, whether each moves over the clip (None: not
    looked at); a cut rod that does not move is not added."""
    dets, seen, names = parts
    open_rods = sum(n not in set(names) and shapes[n].type in RODS for n in wanted)
    if not open_rods or not dets:
        return parts
    rods = [n for n in wanted if shapes[n].type in RODS]
    taken = np.any([d.mask for d in dets], axis=0) if dets else np.zeros(depth.shape, bool)
    added: list[Detection] = []
    extents: list[tuple[float, float]] = []
    near = cv2.dilate(taken.astype(np.uint8), np.ones((2 * TOUCH_PX + 1,) * 2, np.uint8)) > 0
    for d in found:
        if len(added) >= open_rods or not (d.mask & near).any():
            continue  # apart from every named part in the image: a look-alike, not the mechanism's
        e = measure_extents(d.mask, depth, K, smoothed)
        if any(size_cost(e, shapes[n], True, tol) <= fit for n in wanted):
            continue  # a part at a size some library shape can have: naming's job
        region = d.mask & ~taken
        if int(region.sum()) < min_px:
            continue
        rod = _best_rod(region, rods, shapes, depth, K, smoothed, tol, min_px, fit)
        if rod is None or (moves is not None and not moves([rod[1]])[0]):
            continue  # no rod fits, or the rod cut is still where the mechanism's parts move
        label = CLASSES.index(shapes[rod[0]].type)
        added.append(Detection(rod[1], label, PROPOSAL_SCORE, np.eye(len(CLASSES))[label] * PROPOSAL_SCORE))
        extents.append(rod[2])
        taken = taken | rod[1]
    if not added:
        return parts
    all_dets, all_seen = list(dets) + added, list(seen) + extents
    new = rename(all_dets, all_seen)
    keep = [k for k, n in enumerate(new) if n is not None]
    again = ([all_dets[k] for k in keep], [all_seen[k] for k in keep], [new[k] for k in keep])
    if len(set(again[2])) < len(again[2]) or not names_more(again, parts, set(wanted), shapes, tol, fit):
        return parts
    log.info("segment: frame %d: %d rod(s) cut from detections too large for any library shape, named again: %s",
             frame, len(added), ", ".join(again[2]))
    return again

