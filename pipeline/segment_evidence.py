"""Segment: a part's size over every candidate frame, not only the one chosen.

The chosen frame names its parts by class and by the extents its own masks show
(``segment_size.size_cost``). Where a mask there covers part of a neighbour too, or shows
a part at a size two library shapes explain equally (``size_cost`` of a region smaller
than two boxes of one aspect ratio is the same for both: the length and aspect terms
cancel), one frame can swap two parts' names: the cabinet of random scene 28, frame 3,
whose drawer mask also covers a fifth of the carcass (0.415 x 0.217 m: door 0.76, drawer
0.84) while the door's mask fits door and drawer alike (0.35 each); in frames 0, 6, 9 and
12 the drawer's own mask fits the drawer (0.29-0.47) far better than the door (1.17-1.94).

The camera of these recordings does not move and the candidate frames are a fraction of a
second apart, so a part's mask in the chosen frame overlaps its mask in the other candidate
frames. ``linked_sizes`` gives each part the mean over the candidate frames where it is
found (a mask of that frame overlapping it by at least ``LINK_IOU``, the chosen frame
included) of its size cost against each library shape; ``segment.match_shapes`` names with
that mean in place of the one frame's.
"""
from __future__ import annotations

import numpy as np

from vid2sim.datasets.shapes import Shape
from vid2sim.models.segmenter.model import mask_iou
from vid2sim.pipeline.segment_size import size_cost

LINK_IOU = 0.5  # in [0, 1]: a mask of another candidate frame overlapping a part this much is that part


def linked_sizes(masks: list[np.ndarray], seen: list[tuple[float, float]],
                 others: list[tuple[list[np.ndarray], list[tuple[float, float]]]],
                 shapes: dict[str, Shape], names: list[str], metric: bool, tol: float) -> np.ndarray:
    """(n, len(names)) size costs of the n parts (masks (H, W) bool, seen extents m) against
    library shapes ``names``: per part and shape the mean of ``size_cost`` over this frame and
    each frame of ``others`` ((masks, seen extents) of another candidate frame, at the same
    resolution) where one mask overlaps the part by at least ``LINK_IOU`` (the best such).
    A shape the part cannot have in this frame (inf: larger than it can look) stays inf; an
    inf in another frame (its mask there also covers a neighbour) is left out of the mean."""
    out = np.array([[size_cost(e, shapes[n], metric, tol) for n in names] for e in seen]).reshape(len(seen), len(names))
    for k, m in enumerate(masks):
        rows = [out[k]]
        for o_masks, o_seen in others:
            if not o_masks or o_masks[0].shape != m.shape:
                continue
            ious = [mask_iou(m, om) for om in o_masks]
            j = int(np.argmax(ious))
            if ious[j] >= LINK_IOU:
                rows.append(np.array([size_cost(o_seen[j], shapes[n], metric, tol) for n in names]))
        r = np.array(rows)
        finite = np.isfinite(r)
        mean = np.where(finite, r, 0.0).sum(0) / np.maximum(finite.sum(0), 1)
        out[k] = np.where(np.isfinite(out[k]), mean, np.inf)
    return out
