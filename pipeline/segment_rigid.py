"""Segment on depth recordings: a named mask that holds two rigid bodies, one still, one moving.

Pixels that move rigidly together belong to one body. Over the clip a rigid part's pixels
either all stay where they are (a fixed part: a cabinet's carcass) or move with it; the few
of a moving part that stay where they are lie along its turning axis and change in its widest
swings, so they are no piece still over the whole clip (``segment_split.split_pieces`` keeps
at most ``STILL_CHANGED`` of a still piece's pixels changed in any sampled frame). A named
mask with a moving piece and a piece still over the whole clip therefore holds two bodies at
least. ``two_bodies`` names the masks where both pieces, each seen on its own
(``measure_extents``), have a size some library shape can have (``size_cost`` at most
``fit``): a carcass's mask over the door swinging beside it, while the door's name sits on a
strip of the carcass. A mask with a moving sliver at its rim (a drawer front's edge in the
carcass's mask) has no moving piece of a part's size and is left alone.

``segment_nested.split_by_motion`` doubts a naming with such a mask and tries its splits; a
split made for this doubt alone is kept only where its still piece keeps the name of the mask
it was cut from (``still_keeps_name``) and no still piece takes the name of a mask that moved as
a whole (``still_takes_moving_name``): part sizes overlap at far framing, and the renaming after
a split is by size.
Not here: the split and its naming (``segment_nested``); grouping the moving pixels of one
mask into several bodies (``segment_change``, ``segment_when``). Masks are (H, W) bool,
depth (H, W) m at segment's working resolution.
"""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_still import MOVING_SHARE


def part_sized(extents: tuple[float, float], shapes: dict[str, Shape], tol: float, fit: float) -> bool:
    """Whether seen ``extents`` (m) fit a library shape of a class segment knows at a size it
    can have (``size_cost`` at most ``fit``)."""
    return any(size_cost(extents, sh, True, tol) <= fit for sh in shapes.values() if sh.type in CLASSES)


def two_bodies(pieces: list[list[Detection]], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray,
               shapes: dict[str, Shape], tol: float, fit: float) -> list[int]:
    """The indices of ``pieces`` (per named mask, ``split_pieces``' [moving piece, still piece] or [])
    whose mask holds a moving piece and a piece still over the clip, each seen at a size a library
    shape can have (``part_sized``). depth (m), K and ``smoothed`` as ``measure_extents`` takes them."""
    return [k for k, two in enumerate(pieces)
            if two and all(part_sized(measure_extents(p.mask, depth, K, smoothed), shapes, tol, fit) for p in two)]


def still_keeps_name(still: np.ndarray, cut: list[tuple[np.ndarray, str]], out: list[tuple[np.ndarray, str]]) -> bool:
    """Whether a split gives its ``still`` piece ((H, W) bool) the name of the cut named mask it
    overlaps most: cut, the (mask, name) pairs replaced by the split; out, the split's named
    (mask, name) pairs. The still body is the one the mask was named for where it was seen as a
    whole beside the moving parts (the carcass's mask over the door), and a renaming by size
    that moves the name (part sizes overlap at far framing) is no better evidence."""
    own = max(cut, key=lambda c: int((c[0] & still).sum()))[1]
    return any(n == own and np.array_equal(m, still) for m, n in out)


def still_takes_moving_name(before: tuple[list[str], np.ndarray, list[int]], after: tuple[list[str], np.ndarray]
                            ) -> bool:
    """Whether a split gives a still mask a library name that a mask moving as a whole held
    before it: before = (names, (n,) ``motion_shares``, the indices of the masks partly still and
    partly moving); after = (names, (m,) ``motion_shares``). A mask at least ``MOVING_SHARE``
    moving and not partly still is one moving body, so its name is no still part's (a door's
    name on its own mask at far framing, taken by the carcass's still rest)."""
    names, shares, mixed = before
    moved = {n for k, n in enumerate(names) if k not in mixed and shares[k] >= MOVING_SHARE}
    return any(n in moved and sh < MOVING_SHARE for n, sh in zip(*after))


__all__ = ["part_sized", "still_keeps_name", "still_takes_moving_name", "two_bodies"]
