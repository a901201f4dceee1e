"""Segment on depth recordings: named masks that hold a still part and moving ones, split by motion.

Parts nested in or flush with another (a drawer front or a closed door a few mm in front of
a carcass) are one flat surface in the normal image: far away, the network gives one mask over
the carcass with the drawer and door in it, and the library shapes it leaves open can be taken
by a distractor or a few background pixels. A rigid part moves as a whole: a named mask whose
pixels are partly still and partly moving over the clip (``segment_split.split_pieces``) holds
two parts or more.

``split_by_motion`` looks only at a doubtful naming (``_doubtful``: a library shape not named
at a size it can have, or, while a part moves, two named parts still or one still with nothing
moving near it: the drawer's name on a still distractor; ``segment_change.misfit``: a partly
moving named mask the size of another library shape; ``segment_rigid.two_bodies``: a named mask
holding a moving piece and a still one, each of a part's size). Where no named mask is so
(``split_pieces``), a mask with a moving part inlaid in it under a tenth of its size is tried
by ``segment_inlaid``'s scale-free tests, and its moving pieces are parted by when they change
where their depth change does not part them (``parted_by_when``). It takes the union of the named masks
partly still and partly moving, with every named mask mostly inside it (a door's own mask over
part of the carcass's), and cuts it into its moving pieces (the moving regions,
``DepthMotion.changed``, inside it, parted where the masks' boundaries cross them, pieces of at
least ``min_px`` px: a drawer front and a door apart from each other), each grown over the
union's pixels that changed in at least ``GROW_SHARE`` of the sampled frames and lie nearer to
it than to another piece, and its largest still piece (the rest, opened by 3 x 3 px, still over
the clip: ``STILL_CHANGED``). Each piece takes the class and scores of the named mask it overlaps
most. The pieces and the other named parts are named again (the caller's naming, by class and
size); a library name given more often than before stays on the part it fits best. The split is
kept where it names at least as many library shapes at a size they can have (``size_cost`` at
most the caller's ``fit``) as the unsplit naming, every named part fits its shape so, and a
moving piece is named; otherwise the parts stay as they were. The moving pieces are also tried
cut where their depth change jumps (``segment_change.parted_pieces``: a drawer front and a door
moving in one piece); that cut is kept where it names more moving pieces than the uncut one and
at least as many library shapes at a size they can have. So is a cut of the union and the named
masks touching it into the groups of pixels that change at the same sampled frames
(``segment_when.when_pieces``: a drawer that slides in the first frames and rests, a door that
swings through the clip) and the still rest.

Masks are (H, W) bool at segment's working resolution.
"""
from __future__ import annotations

import logging
from typing import Callable

import cv2
import numpy as np
from scipy import ndimage

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_change import misfit, parted_pieces
from vid2sim.pipeline.segment_inlaid import inlaid_pieces, moved, parted_by_when
from vid2sim.pipeline.segment_rigid import still_keeps_name, still_takes_moving_name, two_bodies
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_split import GROW_SHARE, split_pieces, still_rest
from vid2sim.pipeline.segment_still import DepthMotion, Motion
from vid2sim.pipeline.segment_when import touching, when_pieces

log = logging.getLogger("vid2sim.pipeline.segment")

NESTED = 0.5  # in [0, 1]: a named mask with this share of its pixels in the split union is split with it
Named = tuple[list[Detection], list[tuple[float, float]], list[str]]


def motion_pieces(union: np.ndarray, masks: list[np.ndarray], regions: np.ndarray, freq: np.ndarray,
                  min_px: int, quiet: np.ndarray | None = None) -> tuple[list[np.ndarray], np.ndarray | None]:
    """(moving pieces, still piece or None) of the (H, W) bool ``union`` of ``masks``: the moving
    regions inside it (``union & regions``) cut where the masks' boundaries cross them (a pixel's
    piece is one of the pixels covered by the same masks: a door's own mask over part of a
    carcass's mask parts the door from the drawer front beside it), their 8-connected pieces of
    at least ``min_px`` px, each grown over the union's pixels changed in at least
    ``GROW_SHARE`` of the sampled frames (``freq``) and the smaller moving pieces that are
    nearer to it than to any other piece, and by 1 px. The still piece is the rest, opened by
    3 x 3 px, its largest 8-connected piece; None where under ``min_px`` px or where more than
    ``STILL_CHANGED`` of its pixels changed in any sampled frame (or are ``quiet`` (H, W) bool's
    changed pixels where given: ``segment_inlaid.moved``)."""
    kernel = np.ones((3, 3), np.uint8)
    inside = union & regions
    cover = np.zeros(union.shape, np.int64)
    for b, m in enumerate(masks):
        cover |= m.astype(np.int64) << b
    core = np.zeros(union.shape, np.int32)
    for v in np.unique(cover[inside]):
        n, lab, stats, _ = cv2.connectedComponentsWithStats((inside & (cover == v)).astype(np.uint8), connectivity=8)
        for k in range(1, n):
            if stats[k, cv2.CC_STAT_AREA] >= min_px:
                core[lab == k] = core.max() + 1
    if not core.any():
        return [], None
    _, (iy, ix) = ndimage.distance_transform_edt(core == 0, return_indices=True)
    nearest = core[iy, ix]  # the nearest piece's label, per pixel
    grow = union & ((freq >= GROW_SHARE) | inside)
    moving = [union & (cv2.dilate((grow & (nearest == k)).astype(np.uint8), kernel) > 0)
              for k in range(1, int(core.max()) + 1)]
    return moving, still_rest(union, moving, freq > 0 if quiet is None else quiet, min_px)


def _doubtful(parts: Named, shapes: dict[str, Shape], motion: Motion, tol: float, fit: float) -> bool:
    """Whether a naming may hold nested parts: a library shape (of a class segment knows) is
    not named at a size it can have (``size_cost`` above ``fit``), or, while a named part moves,
    two named parts or more are still (``Motion.still``: a door's name on the carcass's rim) or
    one is still with no moving region on or near it (``Motion.loose``: a drawer's name on a
    still distractor). A naming with one still part (a mechanism's fixed root) beside moving
    ones is left as it is."""
    _, seen, names = parts
    fitting = {n for n, e in zip(names, seen) if size_cost(e, shapes[n], True, tol) <= fit}
    if any(sh.type in CLASSES and n not in fitting for n, sh in shapes.items()):
        return True
    still, loose = motion.still(), motion.loose()
    return still is not None and (int(still.sum()) >= 2 or bool(loose.any()))


def _no_new_repeats(names: list[str | None], seen: list[tuple[float, float]], apart: list[bool], before: list[str],
                    shapes: dict[str, Shape], tol: float) -> list[str | None]:
    """``names`` with a library name given more often than in ``before`` (a surplus piece
    repeating a shape: a drawer's name on its moving front and on a distractor) kept first on
    the parts not ``apart`` (a still part with nothing moving near it: ``Motion.loose``), then on
    the parts it fits best by ``size_cost``, the others None (background)."""
    out = list(names)
    for n in {n for n in names if n is not None}:
        ks = [k for k, m in enumerate(names) if m == n]
        allowed = max(1, before.count(n))
        for k in sorted(ks, key=lambda k: (apart[k], size_cost(seen[k], shapes[n], True, tol)))[allowed:]:
            out[k] = None
    return out


def _parent(piece: np.ndarray, parents: list[Detection]) -> Detection:
    """The detection of ``parents`` whose mask overlaps ``piece`` most."""
    return max(parents, key=lambda d: int((d.mask & piece).sum()))


def split_by_motion(motion: DepthMotion, i: int, parts: Named, name: Callable[[list[Detection],
                    list[tuple[float, float]]], list[str | None]], shapes: dict[str, Shape], depth: np.ndarray,
                    K: np.ndarray, smoothed: np.ndarray, tol: float, min_px: int, fit: float) -> Named:
    """The named ``parts`` (detections, seen extents m, library names) of frame i, with the
    named masks that are partly still and partly moving replaced by their union's moving and
    still pieces (``motion_pieces``), the moving ones cut where their depth change jumps
    (``segment_change``), where that names better (module docstring). name: the
    caller's naming of detections with their extents (None: background). Depth (m), K,
    ``smoothed`` and masks at segment's working resolution."""
    dets, seen, names = parts
    if not dets:
        return parts
    changed, valid, regions = motion.changed(i)
    cues = DepthMotion.cues(motion, i, [d.mask for d in dets]) if len(changed) else None
    if cues is None or not regions.any():
        return parts
    freq = changed.mean(0)
    pieces = [split_pieces(d, regions, freq, min_px) for d in dets]
    quiet = None  # the still test's changed pixels where only parts inlaid in a larger mask split (segment_inlaid)
    if not any(pieces):
        quiet = moved(motion, i)
        pieces = inlaid_pieces(dets, regions, freq, quiet, min_px, (depth, K, smoothed, shapes, tol, fit))
    mixed = [k for k, p in enumerate(pieces) if p]
    if not mixed:
        return parts
    rigid_only = not (_doubtful(parts, shapes, cues, tol, fit) or misfit(seen, names, mixed, shapes, tol))
    if rigid_only and (quiet is not None or not two_bodies([pieces[k] for k in mixed], depth, K, smoothed, shapes,
                                                          tol, fit)):
        return parts  # an inlaid split is tried only for a doubtful naming
    loose = cues.loose()
    loose = np.zeros(len(dets), bool) if loose is None else loose  # None: no named part moves
    union = np.any([dets[k].mask for k in mixed], axis=0)
    # a named mask mostly inside the union is one of its parts seen apart (a door's own mask)
    mixed += [k for k, d in enumerate(dets) if k not in mixed and (d.mask & union).sum() >= NESTED * d.mask.sum()]
    moving, still = motion_pieces(union, [dets[k].mask for k in mixed], regions, freq, min_px, quiet)
    # the named masks touching the union too, grouped by when they move (segment_when)
    joined = mixed + touching(union, [d.mask for d in dets], mixed)
    timed = when_pieces(motion, i, np.any([dets[k].mask for k in joined], axis=0), min_px)
    if (not moving or still is None) and (len(timed[0]) < 2 or timed[1] is None):
        return parts

    def trial(moving: list[np.ndarray], still: np.ndarray | None, cut: list[int]) -> tuple[Named, int, int] | None:
        """(named parts, shapes named at a fitting size, moving pieces named) with the named masks
        ``cut`` replaced by ``moving`` and ``still``; None where there is no such cut or a named
        part does not fit its shape's size."""
        if not moving or still is None:
            return None
        rest = [k for k in range(len(dets)) if k not in cut]
        pieces = [Detection(m, p.label, p.score, p.class_scores) for m in moving + [still]
                  for p in [_parent(m, [dets[k] for k in cut])]]
        trial_dets = [dets[k] for k in rest] + pieces
        trial_seen = [seen[k] for k in rest] + [measure_extents(p.mask, depth, K, smoothed) for p in pieces]
        apart = [bool(loose[k]) for k in rest] + [False] * len(pieces)
        trial_names = _no_new_repeats(name(trial_dets, trial_seen), trial_seen, apart, names, shapes, tol)
        named = [(d, e, n) for d, e, n in zip(trial_dets, trial_seen, trial_names) if n is not None]
        if any(size_cost(e, shapes[n], True, tol) > fit for _, e, n in named):
            return None
        movers = sum(n is not None for n in trial_names[len(rest):len(rest) + len(moving)])
        return ([d for d, _, _ in named], [e for _, e, _ in named], [n for _, _, n in named]), \
            len(_fitting(trial_names, trial_seen, shapes, tol, fit)), movers

    plain, cut = trial(moving, still, mixed), mixed
    part = parted_pieces if quiet is None else parted_by_when
    parted = part(motion, i, moving, min_px) if moving and still is not None else []  # two parts in one piece
    for more, pieces, rest, by in ((trial(parted, still, mixed) if len(parted) > len(moving) else None, parted, still,
                                    mixed), (trial(*timed, joined) if len(timed[0]) > 1 else None, *timed, joined)):
        if more is not None and more[2] > (plain[2] if plain is not None else 0) and (plain is None or more[1] >= plain[1]):
            plain, moving, still, cut = more, pieces, rest, by
    if plain is None or plain[1] < len(_fitting(names, seen, shapes, tol, fit)) or not plain[2]:
        return parts
    if rigid_only and (not still_keeps_name(still, [(dets[k].mask, names[k]) for k in cut],
                                            [(d.mask, n) for d, n in zip(plain[0][0], plain[0][2])])
                       or still_takes_moving_name((names, cues.shares, mixed), (plain[0][2], DepthMotion.cues(
                           motion, i, [d.mask for d in plain[0][0]]).shares))):
        return parts
    log.info("segment: frame %d: %d named mask(s) partly still, partly moving, split into %d moving piece(s) "
             "and a still one: %s", i, len(mixed), len(moving), ", ".join(plain[0][2]))
    return plain[0]


def _fitting(names: list[str | None], seen: list[tuple[float, float]], shapes: dict[str, Shape], tol: float,
             fit: float) -> set[str]:
    """The library names among ``names`` given at a size their shape can have (``size_cost`` at most ``fit``)."""
    return {n for n, e in zip(names, seen) if n is not None and size_cost(e, shapes[n], True, tol) <= fit}


__all__ = ["motion_pieces", "split_by_motion"]
