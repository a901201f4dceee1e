"""Segment: a mechanism's parts are one assembly; a look-alike apart from it is background.

Every part of a mechanism is joined to another, so in the image each part's mask touches
another part's (or the parts it is joined through are hidden or missed). A distractor
across the scene that the size of some library shape fits (a 0.12 x 0.03 m box beside a
linkage of 0.16 x 0.05 x 0.03 m links) is not joined to the parts. ``assembly`` groups
the detections into clusters of masks that come within ``GAP`` of the frame's width of
each other, names each cluster on its own (``match_shapes``) and keeps the cluster that
explains the most library shapes at a size they can have; other clusters are kept only where they explain a
library shape that no kept cluster explains (a part cut off by a missed or hidden part
between), or where they lie near the kept parts and naming them together explains more
(``segment_apart``: identical links a few cm apart). A distractor that touches the mechanism in the image stays in its cluster and
is left to the naming.
"""
from __future__ import annotations

from typing import Callable

import cv2
import numpy as np
from scipy.sparse.csgraph import connected_components

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_apart import rejoin_apart

GAP = 0.015  # share of the frame's width: masks this close (at least 4 px) are one cluster


def clusters(masks: list[np.ndarray], gap_px: int) -> list[list[int]]:
    """Indices of ``masks`` (H, W) bool grouped by touch: two masks whose pixels come within
    ``gap_px`` of each other (each dilated by half of it) are in one cluster, and so are
    masks joined through others. Clusters in the order of their first mask."""
    n = len(masks)
    if n == 0:
        return []
    k = 2 * ((gap_px + 1) // 2) + 1
    grown = [cv2.dilate(m.astype(np.uint8), np.ones((k, k), np.uint8)) > 0 for m in masks]
    touch = np.array([[a != b and bool((grown[a] & grown[b]).any()) for b in range(n)] for a in range(n)])
    _, lab = connected_components(touch, directed=False)
    out: dict[int, list[int]] = {}
    for a in range(n):
        out.setdefault(int(lab[a]), []).append(a)
    return list(out.values())


def assembly(dets: list[Detection], name: Callable[[list[int]], list[str | None]], width: int,
             fits: Callable[[int, str], bool] | None = None) -> list[int]:
    """Indices (ascending) of the detections in the mechanism's clusters (module docstring).

    name: the library names (None: background) ``match_shapes`` gives a subset of the
    detections, by their indices. width: px of the frame the masks are of. fits: whether
    detection k fits library shape n at the size it is seen at (None: every named one does).
    Clusters are ranked by the library shapes they name at a size they fit, then by the
    shapes they name, then by their total score (clutter naming a shape at a size it cannot
    have does not outrank the parts that fit it by holding more confident pieces). The
    first is kept, each next one only where it names a shape no kept cluster names."""
    if len(dets) < 2:
        return list(range(len(dets)))
    groups = clusters([d.mask for d in dets], max(4, int(round(GAP * width))))
    if len(groups) < 2:
        return list(range(len(dets)))
    naming = [name(g) for g in groups]
    named = [{n for n in ns if n is not None} for ns in naming]
    fitting = [{n for k, n in zip(g, ns) if n is not None and (fits is None or fits(k, n))}
               for g, ns in zip(groups, naming)]
    order = sorted(range(len(groups)), key=lambda c: (-len(fitting[c]), -len(named[c]),
                                                      -sum(dets[k].score for k in groups[c])))
    keep: list[int] = []
    taken: set[str] = set()
    for c in order:
        if not keep or named[c] - taken:
            keep += groups[c]
            taken |= named[c]
    return rejoin_apart(dets, groups, keep, name)  # identical parts apart, near the kept ones (segment_apart)
