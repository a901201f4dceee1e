"""Segment on depth recordings: parts inlaid in a much larger named mask, split by motion.

A drawer front or a door nested in a carcass's named mask ten times its size is a small share
of that mask however well it is seen to move, and at RealSense-like noise the carcass around
it is not "still over the clip" by ``segment_split.split_pieces``' tests: its pixels are
hidden in some sampled frames by the door swinging in front of them (a nearer surface) and
flip in single frames. ``split_pieces`` refuses such a mask (its moving core under
``MIN_SHARE`` of it; over ``STILL_CHANGED`` of its still piece changed in some frame).

``inlaid_pieces`` splits such a mask (its moving core under ``MIN_SHARE`` of it) by tests that
do not depend on the mask's size or on one frame:
the moving piece and the still piece must each be seen at a size some library part can have
(``segment_rigid.part_sized``), and the still piece's pixels count as changed only where
they changed in at least ``QUIET_TIMES`` sampled frames without a nearer surface in front of
them (``moved``: ``segment_when.own_changes``). A turning part's pixels near its axis, which
change in its widest swings only, are no part-sized piece of their own.

``parted_by_when`` parts a moving piece that holds two parts moving at different times (a
drawer that slid in the first frames beside a door swinging through the clip) by each
pixel's own-change signature (``segment_when.group_by_signature``, a pixel changed once
counts: the drawer that slid before the candidate frame differs from it in one sampled frame),
where the depth change does not part it (``segment_change.part_by_change``: at RealSense-like
noise the door's ramp of change joins the drawer's uniform one).

Used by ``segment_nested.split_by_motion`` only where ``split_pieces`` finds no named mask
partly still and partly moving and the naming is doubtful (a split of a right naming replaces
the network's masks by cruder motion pieces). Not here: the naming of the pieces. Masks are (H, W) bool
at segment's working resolution; depth (H, W) m.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_change import PART_SHARE, parted_pieces
from vid2sim.pipeline.segment_rigid import part_sized
from vid2sim.pipeline.segment_size import measure_extents
from vid2sim.pipeline.segment_split import MIN_SHARE, split_pieces
from vid2sim.pipeline.segment_still import DepthMotion
from vid2sim.pipeline.segment_when import group_by_signature, own_changes

QUIET_TIMES = 2  # sampled frames: a still piece's pixel own-changed in at least this many has moved (one may be noise)


def moved(motion: DepthMotion, i: int) -> np.ndarray:
    """(H, W) bool: the pixels of frame i own-changed (``own_changes``: changed without a nearer
    surface in front) in at least ``QUIET_TIMES`` sampled frames."""
    own = own_changes(motion, i)
    return own.sum(0) >= QUIET_TIMES if len(own) else np.zeros(motion.frame_depth(i).shape, bool)


def inlaid_pieces(dets: list[Detection], regions: np.ndarray, freq: np.ndarray, quiet: np.ndarray, min_px: int,
                  scene: tuple[np.ndarray, np.ndarray, np.ndarray, dict[str, Shape], float, float]
                  ) -> list[list[Detection]]:
    """Per detection whose moving core (its pixels in ``regions``) is under ``MIN_SHARE`` of its
    mask, ``split_pieces``' [moving piece, still piece] with no share of the mask asked of either
    piece and the still test on ``quiet`` (``moved``), kept where both pieces are seen at a
    library part's size (``part_sized``); [] otherwise (a mask moving in a larger share keeps
    ``split_pieces``' verdict). regions, freq as ``split_pieces`` takes them; scene: (depth m,
    K, smoothed, shapes, tol, fit)."""
    depth, K, smoothed, shapes, tol, fit = scene
    out = []
    for d in dets:
        if (d.mask & regions).sum() >= MIN_SHARE * d.mask.sum():
            out.append([])  # not inlaid: split_pieces' own tests stand (a drawer's top sliding along itself)
            continue
        two = split_pieces(d, regions, freq, min_px, min_share=0.0, changed=quiet)
        sized = two and all(part_sized(measure_extents(p.mask, depth, K, smoothed), shapes, tol, fit) for p in two)
        out.append(two if sized else [])
    return out


def parted_by_when(motion: DepthMotion, i: int, moving: list[np.ndarray], min_px: int) -> list[np.ndarray]:
    """The (H, W) bool ``moving`` pieces of frame i parted by their depth change
    (``parted_pieces``), else each parted by its pixels' own-change signatures: the groups
    (``group_by_signature``, pixels own-changed in one sampled frame or more) of at least
    ``min_px`` px and ``PART_SHARE`` of the piece, each with the rest of the piece nearest to it."""
    parted = parted_pieces(motion, i, moving, min_px)
    if len(parted) > len(moving):
        return parted
    own = own_changes(motion, i)
    if not len(own):
        return list(moving)
    out = []
    for m in moving:
        groups = group_by_signature(own, m, max(min_px, round(PART_SHARE * m.sum())), min_times=1)
        if len(groups) < 2:
            out.append(m)
            continue
        core = np.zeros(m.shape, np.int32)
        for n, g in enumerate(groups, 1):
            core[g] = n
        _, (iy, ix) = ndimage.distance_transform_edt(core == 0, return_indices=True)
        nearest = core[iy, ix]
        out += [m & (nearest == n) for n in range(1, len(groups) + 1)]
    return out


__all__ = ["QUIET_TIMES", "inlaid_pieces", "moved", "parted_by_when"]
