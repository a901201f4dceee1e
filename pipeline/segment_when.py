"""Segment on depth recordings: moving pixels grouped by when they move over the clip.

Pixels that move rigidly together belong to one body, and they move at the same times: over
the sampled frames of the clip (``DepthMotion``), a drawer's pixels change while the drawer
slides and a door's while the door swings, the carcass's never. ``group_by_signature`` gives each
pixel of an area of frame i its *own-change signature*: the (F,) bool of sampled frames j
where the pixel changed (``DepthMotion.changed``) without showing a nearer surface
(``DepthMotion.beyond``): a nearer surface is something passing in front (a door swinging
over a drawer), a farther one or no reading the pixel's surface gone from where it was. The
pixels that changed so in at least ``MIN_TIMES`` sampled frames are joined to 4-neighbours
whose signature differs in at most ``HAMMING`` frames; the joined groups of at least
``min_px`` px are the moving groups, one per moving part even where one mask holds all
the parts, and where a part moves only in part of the clip (a drawer that slides in the
first frames and rests, fewer changed frames than ``REGION_SHARE`` asks of the moving regions).

``when_pieces`` takes the frame's groups with at least ``min_px`` px inside a union of named
masks as moving pieces (each group, its pixels outside the union too: the part of a door no mask
covers, with the union's own-changed pixels nearest to it, and 1 px around) and a still piece
(the rest, opened by 3 x 3 px, its largest 8-connected piece, with at most
``STILL_CHANGED`` of its pixels own-changed in ``MIN_TIMES`` frames or more), for
``segment_nested.split_by_motion`` to name.

Not here: which pieces are kept and how they are named (``segment_nested``). A part that
moves only along its own face (a drawer front seen edge on) changes its depth by less than
the change threshold and is in no group. Masks are (H, W) bool at segment's working
resolution.
"""
from __future__ import annotations

import cv2
import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from vid2sim.pipeline.segment_split import still_rest
from vid2sim.pipeline.segment_still import DepthMotion

MIN_TIMES = 2  # sampled frames: a pixel own-changed in at least this many is moving (one may be noise)
HAMMING = 2  # sampled frames: neighbours whose own-change signatures differ in at most this many move together


def own_changes(motion: DepthMotion, i: int) -> np.ndarray:
    """(F, H, W) bool: the pixels of frame i changed in each sampled frame j != i
    (``DepthMotion.changed``) without a nearer surface there (``DepthMotion.beyond``)."""
    changed = motion.changed(i)[0]
    if not len(changed):
        return changed
    near = motion.beyond(i)[1]
    return changed & ~near


def group_by_signature(own: np.ndarray, area: np.ndarray, min_px: int, min_times: int = MIN_TIMES,
                       hamming: int = HAMMING) -> list[np.ndarray]:
    """The moving groups of the (H, W) bool ``area``: its pixels with at least ``min_times``
    own-changed frames in ``own`` (F, H, W) bool, joined to 4-neighbours whose signatures
    (own[:, y, x]) differ in at most ``hamming`` frames; the joined groups of at least
    ``min_px`` px, largest first, as (H, W) bool masks."""
    h, w = area.shape
    live = area & (own.sum(0) >= min_times)
    idx = np.flatnonzero(live)
    if len(idx) < min_px:
        return []
    rows, cols = [], []
    for dy, dx in ((0, 1), (1, 0)):
        a = live[:h - dy, :w - dx] & live[dy:, dx:]
        diff = (own[:, :h - dy, :w - dx] != own[:, dy:, dx:]).sum(0)
        ys, xs = np.nonzero(a & (diff <= hamming))
        rows.append(ys * w + xs)
        cols.append((ys + dy) * w + xs + dx)
    pos = np.full(h * w, -1)
    pos[idx] = np.arange(len(idx))
    r, c = pos[np.concatenate(rows)], pos[np.concatenate(cols)]
    _, lab = connected_components(coo_matrix((np.ones(len(r)), (r, c)), shape=(len(idx), len(idx))), directed=False)
    sizes = np.bincount(lab)
    out = []
    for b in np.argsort(-sizes):
        if sizes[b] < min_px:
            break
        m = np.zeros(h * w, bool)
        m[idx[lab == b]] = True
        out.append(m.reshape(h, w))
    return out


def when_pieces(motion: DepthMotion, i: int, union: np.ndarray, min_px: int
                ) -> tuple[list[np.ndarray], np.ndarray | None]:
    """(moving pieces, still piece or None) of the (H, W) bool ``union`` in frame i: the frame's
    moving groups (``group_by_signature``) with at least ``min_px`` px in the union, each with
    the union's own-changed pixels (``MIN_TIMES`` frames or more) nearer to it than to another
    group, grown by 1 px within the union; the still piece as in the module docstring. ([], None)
    where no group is found."""
    own = own_changes(motion, i)
    if not len(own):
        return [], None
    groups = [g for g in group_by_signature(own, np.ones(union.shape, bool), min_px) if (g & union).sum() >= min_px]
    if not groups:
        return [], None
    core = np.zeros(union.shape, np.int32)
    for k, g in enumerate(groups, 1):
        core[g] = k
    _, (iy, ix) = ndimage.distance_transform_edt(core == 0, return_indices=True)
    nearest = core[iy, ix]
    moved = union & (own.sum(0) >= MIN_TIMES)
    kernel = np.ones((3, 3), np.uint8)
    moving = [(union & (cv2.dilate((moved & (nearest == k)).astype(np.uint8), kernel) > 0)) | g
              for k, g in enumerate(groups, 1)]
    return moving, still_rest(union, moving, moved, min_px)


def touching(union: np.ndarray, masks: list[np.ndarray], taken: list[int]) -> list[int]:
    """The indices of ``masks`` (H, W) bool, not in ``taken``, that overlap ``union`` or touch it
    (8-neighbours): a part's mask beside the mask it moves in (a door's own strip at the
    carcass's edge)."""
    grown = cv2.dilate(union.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    return [k for k, m in enumerate(masks) if k not in taken and bool((m & grown).any())]


__all__ = ["HAMMING", "MIN_TIMES", "group_by_signature", "own_changes", "touching", "when_pieces"]
