"""Segment on depth recordings: a moving piece parted where its depth changes differently.

Two parts that move in one mask (a drawer front and a door flush with it, both moving, one
network mask over both) make one moving piece for ``segment_nested``. A rigid part's depth
change between the candidate frame i and a nearby frame j is smooth over its pixels (uniform
for a slide, a ramp for a hinge's turn); where two parts move differently it jumps at their
border, or at a still strip between them (the carcass's rail between drawer and door).

``part_by_change`` joins each pixel of a moving piece to its 4-neighbours in the piece whose
depth change in each of the ``EARLY`` sampled frames nearest to i differs from its own by at
most ``change_threshold`` (the motion cue's threshold; a frame where either pixel has no
reading says nothing). The joined pieces of at least ``min_px`` px and ``PART_SHARE`` of the
piece are the parts; the rest of the piece goes to the nearest of them (``parted_pieces``).
Only nearby frames: after a larger motion a pixel shows another surface (the carcass's inside
behind a door opened wide), no longer the part.

``misfit``: a named mask partly still and partly moving whose seen size fits another library
shape better than its own name's by ``MISFIT_MARGIN`` (a door's mask over the carcass, the
carcass's name on a patch of the table) may hold that other part: a naming to doubt.

Not here: which pieces are kept and named (``segment_nested.split_by_motion``).
Masks are (H, W) bool and depths (H, W) m (0 = no reading) at segment's working resolution.
"""
from __future__ import annotations

import numpy as np
from scipy import ndimage
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from vid2sim.datasets.shapes import Shape
from vid2sim.pipeline.segment_size import size_cost
from vid2sim.pipeline.segment_still import DepthMotion, change_threshold

EARLY = 3  # the sampled frames nearest to the candidate frame whose depth changes part a moving piece
PART_SHARE = 0.1  # in [0, 1]: a part holds at least this share of its moving piece's pixels
MISFIT_MARGIN = 0.25  # size_cost: a partly moving mask fitting another shape this much better than its name's holds it


def depth_changes(motion: DepthMotion, i: int, early: int = EARLY) -> tuple[np.ndarray, np.ndarray]:
    """((E, H, W) float m: depth of each of the ``early`` sampled frames j != i nearest to frame i
    minus frame i's, NaN where either has no reading; (H, W) m: frame i's depth)."""
    d0 = motion.frame_depth(i)
    near = sorted((j for j in motion.frames if j != i), key=lambda j: (abs(j - i), j))[:early]
    dz = np.full((len(near),) + d0.shape, np.nan)
    for e, j in enumerate(near):
        d = motion.depths[j]
        ok = (d > 0) & (d0 > 0)
        dz[e][ok] = (d - d0)[ok]
    return dz, d0


def part_by_change(piece: np.ndarray, dz: np.ndarray, d0: np.ndarray, k: float, min_px: int) -> list[np.ndarray]:
    """The parts of the (H, W) bool moving ``piece``: its pixels joined to 4-neighbours whose depth
    change ``dz`` (E, H, W) m differs by at most ``change_threshold(d0, k)`` in every frame where
    both have one, the joined pieces of at least ``min_px`` px, each with the rest of ``piece``
    nearest to it; [piece] where there are fewer than two such pieces."""
    h, w = piece.shape
    thr = change_threshold(d0, k)
    idx = np.flatnonzero(piece)
    rows, cols = [], []
    for dy, dx in ((0, 1), (1, 0)):
        a = piece[:h - dy, :w - dx] & piece[dy:, dx:]
        diff = np.abs(dz[:, :h - dy, :w - dx] - dz[:, dy:, dx:])
        same = a & ~np.any(diff > thr[:h - dy, :w - dx], axis=0)  # NaN compares False: no reading, no evidence
        ys, xs = np.nonzero(same)
        rows.append(ys * w + xs)
        cols.append((ys + dy) * w + xs + dx)
    pos = np.full(h * w, -1)
    pos[idx] = np.arange(len(idx))
    r, c = pos[np.concatenate(rows)], pos[np.concatenate(cols)]
    graph = coo_matrix((np.ones(len(r)), (r, c)), shape=(len(idx), len(idx)))
    _, lab = connected_components(graph, directed=False)
    sizes = np.bincount(lab)
    big = np.flatnonzero(sizes >= min_px)
    if len(big) < 2:
        return [piece]
    core = np.zeros(h * w, np.int32)
    for n, b in enumerate(big, 1):
        core[idx[lab == b]] = n
    core = core.reshape(h, w)
    _, (iy, ix) = ndimage.distance_transform_edt(core == 0, return_indices=True)
    nearest = core[iy, ix]
    return [piece & (nearest == n) for n in range(1, len(big) + 1)]


def parted_pieces(motion: DepthMotion, i: int, moving: list[np.ndarray], min_px: int) -> list[np.ndarray]:
    """The (H, W) bool ``moving`` pieces of frame i, each cut into its parts (``part_by_change``,
    parts of at least ``min_px`` px and ``PART_SHARE`` of the piece)."""
    dz, d0 = depth_changes(motion, i)
    if not len(dz):
        return list(moving)
    return [p for m in moving
            for p in part_by_change(m, dz, d0, motion.k, max(min_px, round(PART_SHARE * m.sum())))]


def misfit(seen: list[tuple[float, float]], names: list[str], mixed: list[int], shapes: dict[str, Shape],
           tol: float) -> bool:
    """Whether a named part k of ``mixed`` (partly still, partly moving) fits another library shape
    by its seen extents (m) better than its name's, by ``MISFIT_MARGIN`` in ``size_cost``."""
    for k in mixed:
        own = size_cost(seen[k], shapes[names[k]], True, tol)
        if any(size_cost(seen[k], sh, True, tol) + MISFIT_MARGIN < own for n, sh in shapes.items() if n != names[k]):
            return True
    return False


__all__ = ["EARLY", "MISFIT_MARGIN", "PART_SHARE", "misfit", "depth_changes", "part_by_change", "parted_pieces"]
