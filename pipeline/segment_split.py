"""Segment on depth recordings: a detection partly still and partly moving is split in two.

A cabinet's drawer front stands 10 mm and its closed door 22 mm in front of the carcass: in
the normal image they are one flat surface, and the segmenter gives one mask over a drawer
and the carcass's rim around it (or over the whole front), a mask that fits no library part
well while a library part goes unexplained or is taken by a look-alike. Over the clip the
drawer slides out and the door swings: their pixels' depth changes, the carcass's does not.

``split_pieces`` cuts a detection whose mask holds both moving pixels and still ones, each
at least ``MIN_SHARE`` of its pixels and ``min_px`` px, into its moving part (its connected
pieces of at least ``min_px`` px, as one mask) and its largest still piece (opened by 3 x 3
px: slivers along the moving part's edge go), each keeping the detection's class and score.
The moving part is the mask's share of the frame's moving regions
(``segment_still.DepthMotion.changed``: pixels changed in at least ``REGION_SHARE`` of the
sampled frames), grown over the mask's pixels that changed in at least ``GROW_SHARE`` of
them and touch it (a door's pixels near its hinge change in its widest swing only), and by
1 px (``changed_pixels`` reads a 3 x 3 neighbourhood, so a moving surface's rim beside a
still one at about its depth looks still). The moving pieces stay one mask: on the default
cabinet at 3 m (320 x 240, 13 frames) the swinging door's pixels fell apart into two pieces,
one of a drawer's size, and the drawer (still in those frames) went with the carcass. The
still piece must be still over the whole clip: at most ``STILL_CHANGED`` of its pixels changed
in any sampled frame (there, the door's hinge side: 15 %; the carcass's rim around the
realistic-noise drawer of random scene 26: 1 %).

``split_moving`` tries every subset of the frame's ``MAX_SPLIT`` most confident partly
moving detections and keeps the one whose naming is best by the caller's key
(``segment._naming_key``: more library shapes explained at a size they can have, fewer
parts not so explained, fewer doubtful names, then a lower naming cost); no split where none
beats the unsplit detections. A rod swinging about its pivot (its pixels near the pivot
change little) is not cut where the whole rod already explains its library shape; a door
cut at its hinge (its hinge side taking the carcass's name) loses to the drawer's mask cut
from the carcass's rim where that names the three parts at lower cost.

Masks are (H, W) bool at segment's working resolution.
"""
from __future__ import annotations

from itertools import combinations
from typing import Callable, TypeVar

import cv2
import numpy as np

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_still import DepthMotion

MIN_SHARE = 0.1  # in [0, 1]: a split needs at least this share of a mask moving and this share still
GROW_SHARE = 0.2  # in [0, 1]: a mask's pixels changed in this share of sampled frames join a moving core they touch
STILL_CHANGED = 0.05  # in [0, 1]: the still piece's largest share of pixels changed in any sampled frame
MAX_SPLIT = 4  # the most confident partly moving detections of a frame whose splits are tried, in every subset
N = TypeVar("N")  # the caller's naming of a list of detections


def split_pieces(det: Detection, regions: np.ndarray, freq: np.ndarray, min_px: int, min_share: float = MIN_SHARE,
                 changed: np.ndarray | None = None) -> list[Detection]:
    """[moving piece, still piece] of ``det`` (its moving part's connected pieces of at least
    ``min_px`` px as one mask, its largest still piece of at least ``min_px``), or [] where the
    mask is not partly moving (its moving or its still pixels under ``MIN_SHARE`` of it or
    ``min_px``) or the still piece is not still over the clip (``STILL_CHANGED``). regions:
    (H, W) bool, the frame's moving regions; freq: (H, W) the share of sampled frames in which
    each pixel changed (both ``DepthMotion.changed``); min_share: ``MIN_SHARE`` unless the
    caller tests the pieces' sizes itself (``segment_inlaid``); changed: (H, W) bool, the pixels
    the still test counts as changed (default: changed in any sampled frame, ``freq > 0``)."""
    m = det.mask.astype(bool)
    n = int(m.sum())
    least = max(min_px, min_share * n)
    kernel = np.ones((3, 3), np.uint8)
    core = m & regions
    if core.sum() < least:
        return []
    # grown over the mask's pixels that changed in at least GROW_SHARE of the frames and touch the
    # core (a door's pixels near its hinge change in its widest swing only), and by 1 px: a moving
    # pixel's 3 x 3 neighbourhood may show a still surface at about its depth (changed_pixels)
    grow = m & (freq >= GROW_SHARE)
    k, lab = cv2.connectedComponents((grow | core).astype(np.uint8), connectivity=8)
    moving = np.isin(lab, np.unique(lab[core]))
    moving = m & (cv2.dilate(moving.astype(np.uint8), kernel) > 0)
    still = m & ~moving
    if moving.sum() < least or still.sum() < least:
        return []
    still = cv2.morphologyEx(still.astype(np.uint8), cv2.MORPH_OPEN, kernel) > 0
    pieces = _components(moving, min_px)
    rest = _components(still, min_px)
    if not pieces or not rest:
        return []
    fixed = max(rest, key=lambda p: int(p.sum()))
    if ((freq > 0) if changed is None else changed)[fixed].mean() > STILL_CHANGED:
        return []  # pixels near a rotating part's axis: they change in a frame or two
    # the moving pieces stay one part: a swinging door's pixels can fall apart into pieces
    # that each fit a smaller library part
    moving = np.any(pieces, axis=0)
    return [Detection(p, det.label, det.score, det.class_scores) for p in (moving, fixed)]


def still_rest(union: np.ndarray, moving: list[np.ndarray], changed: np.ndarray, min_px: int) -> np.ndarray | None:
    """The still piece of the (H, W) bool ``union`` beside its ``moving`` pieces: the rest,
    opened by 3 x 3 px, its largest 8-connected piece; None where there is none, where it is
    under ``min_px`` px, or where more than ``STILL_CHANGED`` of its pixels are ``changed``
    (H, W) bool (changed in some sampled frame)."""
    taken = np.any(moving, axis=0) if moving else np.zeros(union.shape, bool)
    rest = cv2.morphologyEx((union & ~taken).astype(np.uint8), cv2.MORPH_OPEN, np.ones((3, 3), np.uint8))
    n, lab, stats, _ = cv2.connectedComponentsWithStats(rest, connectivity=8)
    if n < 2:
        return None
    fixed = lab == 1 + int(np.argmax(stats[1:, cv2.CC_STAT_AREA]))
    if fixed.sum() < min_px or changed[fixed].mean() > STILL_CHANGED:
        return None
    return fixed


def _components(mask: np.ndarray, min_px: int) -> list[np.ndarray]:
    """The 8-connected pieces of ``mask`` of at least ``min_px`` px, largest first."""
    k, lab, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    keep = sorted((j for j in range(1, k) if stats[j, cv2.CC_STAT_AREA] >= min_px),
                  key=lambda j: -stats[j, cv2.CC_STAT_AREA])
    return [lab == j for j in keep]


def split_moving(motion: DepthMotion, i: int, found: list[Detection], named: N, min_px: int,
                 name: Callable[[list[Detection]], N], key: Callable[[N], tuple]) -> tuple[list[Detection], N]:
    """(detections, their naming) of frame i with the motion splits that name it best.

    found: the segmenter's detections (best first); named: ``name(found)``, the naming
    without a split; name: the caller's naming of a detection list; key: a naming's
    comparable quality (larger is better). Of the ``MAX_SPLIT`` most confident partly moving
    detections (``split_pieces``), every subset is replaced by its pieces and named; the
    subset whose naming's key is largest is kept (none where no split beats the unsplit)."""
    changed, _, regions = motion.changed(i)
    if not regions.any():
        return found, named
    freq = changed.mean(0)
    order = sorted(range(len(found)), key=lambda j: -found[j].score)
    splits = {}
    for j in order:
        pieces = split_pieces(found[j], regions, freq, min_px)
        if pieces:
            splits[j] = pieces
        if len(splits) == MAX_SPLIT:
            break
    best, best_key = list(found), key(named)
    for r in range(1, len(splits) + 1):
        for subset in combinations(sorted(splits), r):
            trial = [p for j, d in enumerate(found) for p in (splits[j] if j in subset else [d])]
            result = name(trial)
            if key(result) > best_key:
                best, best_key, named = trial, key(result), result
    return best, named


__all__ = ["GROW_SHARE", "MAX_SPLIT", "MIN_SHARE", "STILL_CHANGED", "split_moving", "split_pieces"]
