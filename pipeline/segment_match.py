"""Segment's naming: each detection matched to a library shape by class evidence and size.

``match_shapes`` names a frame's detections (Hungarian over ``_cost_matrix``: minus the log of
the class evidence plus ``segment_size.size_cost``), ``_confirmed`` keeps the low-score
detections that explain an open library shape. Used by ``segment`` (re-exported there);
logs to the segment stage's logger.
"""
from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np
from scipy.optimize import linear_sum_assignment

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_size import size_cost
from vid2sim.pipeline.segment_still import STILL_COST, Motion, contested

log = logging.getLogger("vid2sim.pipeline.segment")


ROD_SIBLING = {"capsule": "cylinder", "cylinder": "capsule"}
SURPLUS_SIZE_COST = 1.0  # a part beyond one per library shape must fit that shape's size this well (size_cost)
REPEAT_MARGIN = 1.0  # _match_cost: a surplus part repeating a library name costs at most this much more than its holder
ROD_SIBLING_FLOOR = 0.06
LOOKALIKE_TOL = 0.1  # two library shapes of one type whose two smaller extents agree this well (relative) are look-alikes
LOOKALIKE_LONGER = 1.1  # ... where one is this many times longer than the other; two parts seen that much apart in length ...
LOOKALIKE_MARGIN = 0.5  # ... are named longer to longer where that costs at most this much more (_match_cost units)


def _cost_matrix(dets: list[Detection], seen: list[tuple[float, float]], shapes: dict[str, Shape],
                 names: list[str], metric: bool, tol: float, sizes: np.ndarray | None = None) -> np.ndarray:
    """(len(dets), len(names)) ``_match_cost`` of each detection against each library shape in
    ``names`` (sizes: size costs in place of each detection's own, as in ``match_shapes``)."""
    cost = np.array([[_match_cost(d, e, shapes[n], metric, tol, None if sizes is None else sizes[i, j])
                      for j, n in enumerate(names)] for i, (d, e) in enumerate(zip(dets, seen))])
    return cost.reshape(len(dets), len(names))


def _alike(dets: list[Detection], shapes: dict[str, Shape], names: list[str]) -> np.ndarray:
    """(len(dets), len(names)) bool: library shape of ``names`` of the detection's class or
    the other rod class (``ROD_SIBLING``)."""
    return np.array([[shapes[n].type in (CLASSES[d.label], ROD_SIBLING.get(CLASSES[d.label])) for n in names]
                     for d in dets], bool).reshape(len(dets), len(names))


def _match_cost(d: Detection, seen: tuple[float, float], shape: Shape, metric: bool, tol: float,
                size: float | None = None) -> float:
    """Cost of library ``shape`` for detection ``d`` seen with extents ``seen`` (m): minus the
    log of its class evidence relative to its score, plus ``size_cost`` (inf: not that shape)
    or, where given, ``size`` in its place (``segment_evidence.linked_sizes``)."""
    cs = d.class_scores if d.class_scores is not None else np.eye(len(CLASSES))[d.label] * d.score
    p = cs[CLASSES.index(shape.type)]
    if shape.type == ROD_SIBLING.get(CLASSES[d.label]):
        # capsule and cylinder differ only at their ends, which joints often hide
        # (rott's arm: both ends covered, every cue said cylinder): a rod may take the
        # other rod class's library shape, its class evidence floored at this fraction
        # of its score (cost -log 0.06 = 2.8 on top of the size cost)
        p = max(p, ROD_SIBLING_FLOOR * d.score)
    elif p < 0.05 or (p < 0.25 * d.score and shape.type != CLASSES[d.label]):
        return math.inf
    return -math.log(p / max(d.score, 1e-9)) + (size_cost(seen, shape, metric, tol) if size is None else size)


def match_shapes(dets: list[Detection], seen: list[tuple[float, float]], shapes: dict[str, Shape],
                 metric: bool, tol: float, where: Path, frame: int, unmatched: str = "error",
                 motion: Motion | None = None, sizes: np.ndarray | None = None) -> list[str | None]:
    """Library shape name per detection: class evidence plus size; each library shape is
    used once where possible (Hungarian), a surplus part repeats its best fit only where its
    size fits it (``SURPLUS_SIZE_COST``) and it costs at most ``REPEAT_MARGIN`` more than the
    part holding that name (identical parts sharing one entry look alike). A rod seen as
    one of capsule / cylinder may match the other's library shape at a fixed class penalty
    (``ROD_SIBLING_FLOOR``): where a right-class shape fits its size, that one wins.
    motion: the detections' ``segment_still.Motion`` (None: not known); where one of them
    that some library shape fits moves, the still ones cost ``STILL_COST`` more (with
    ``Motion.narrow`` only for the shapes the moving ones contest: ``segment_still.contested``), a still one
    with nothing moving beside it is background, and a still surplus part repeats no library
    name (a second still hub beside a moving mechanism is clutter of the right size).
    sizes: (n, library shapes of a class segment knows, in ``shapes``' order) size costs to name by in place of each detection's ``size_cost`` (None: its own;
    ``segment_evidence.linked_sizes``: over the candidate frames).

    A detection no library shape explains gets ``None`` (background, one INFO line), or with
    ``unmatched="error"`` raises ``RecordingError`` naming what was seen.
    """
    names = [n for n, s in shapes.items() if s.type in CLASSES]
    cost = _cost_matrix(dets, seen, shapes, names, metric, tol, sizes)
    for i, d in enumerate(dets):
        if not np.isfinite(cost[i]).any():
            e = seen[i]
            lib = ", ".join(f"{n} ({s.type} {'x'.join(f'{x:.3g}' for x in s.extents())} m)" if s.type in CLASSES
                            else f"{n} ({s.type})" for n, s in shapes.items())
            seen_as = (f"a {CLASSES[d.label]} about {e[0]:.3g} x {e[1]:.3g} m"
                       f"{'' if metric else ' (proportions only, RGB-only recording)'} "
                       f"(score {d.score:.2f}, {int(d.mask.sum())} px)")
            if unmatched != "ignore":
                raise RecordingError(where, f"frame {frame}: segment saw {seen_as} that matches no library shape; "
                                            f"library: {lib} (segment.unmatched=ignore takes it for background)")
            log.info("segment: frame %d: background: %s matches no library shape", frame, seen_as)
    nameable = np.isfinite(cost).any(1)
    still = motion.still(nameable) if motion is not None else None
    if still is not None:
        cost = cost + STILL_COST * still[:, None] * contested(cost, motion, _alike(dets, shapes, names))[None, :]
        for k in np.flatnonzero(motion.loose(nameable)):
            if np.isfinite(cost[k]).any():
                log.info("segment: frame %d: background: a still %s about %.3g x %.3g m with nothing moving beside it "
                         "(%.0f %% of its depth changes)", frame, CLASSES[dets[k].label], *seen[k],
                         100 * motion.shares[k])
            cost[k] = np.inf
    big = 1e6
    c = np.where(np.isfinite(cost), cost, big)
    rows, cols = linear_sum_assignment(c)
    out: list[str | None] = [None] * len(dets)
    for r, k in zip(rows, cols):
        if c[r, k] < big:
            out[r] = names[k]
    _order_lookalikes(out, cost, seen, shapes, names)
    _repeats(out, cost, dets, seen, shapes, names, metric, tol, frame, still, sizes)
    return out


def _repeats(out: list[str | None], cost: np.ndarray, dets: list[Detection], seen: list[tuple[float, float]],
             shapes: dict[str, Shape], names: list[str], metric: bool, tol: float, frame: int,
             still: np.ndarray | None, sizes: np.ndarray | None) -> None:
    """Name, in place, each surplus detection left unnamed by the assignment (``out[i]`` None)
    after the library shape of ``names`` it fits best (``cost``: (parts, names)), where it is not
    still while parts move (``still``), costs at most ``REPEAT_MARGIN`` more than the part holding
    that name and its size fits the shape (``SURPLUS_SIZE_COST``; sizes: as ``match_shapes``'s);
    each other one is background (one INFO line)."""
    held = {n: r for r, n in enumerate(out) if n is not None}
    for i in range(len(dets)):
        if out[i] is None and np.isfinite(cost[i]).any():
            # a surplus part repeats a library shape (several identical parts share one entry)
            # only where its size fits that shape and it fits it about as well as the part
            # holding the name (identical parts look alike); anything else is clutter of a like class
            j = int(np.argmin(cost[i]))
            size = size_cost(seen[i], shapes[names[j]], metric, tol) if sizes is None else sizes[i, j]
            first = cost[held[names[j]], j] if names[j] in held else math.inf
            if still is not None and still[i]:
                log.info("segment: frame %d: background: a still %s about %.3g x %.3g m repeats library "
                         "shape %s while parts move", frame, CLASSES[dets[i].label], *seen[i], names[j])
            elif cost[i, j] > first + REPEAT_MARGIN:
                log.info("segment: frame %d: background: a %s about %.3g x %.3g m repeats library shape %s "
                         "fitting it worse than the part named so (cost %.2f against %.2f)", frame,
                         CLASSES[dets[i].label], *seen[i], names[j], cost[i, j], first)
            elif size <= SURPLUS_SIZE_COST:
                out[i] = names[j]
            else:
                log.info("segment: frame %d: background: a %s about %.3g x %.3g m repeats library shape %s "
                         "at a size it does not have (size cost %.2f)", frame, CLASSES[dets[i].label], *seen[i],
                         names[j], size)


def _confirmed(dets: list[Detection], names: list[str | None], seen: list[tuple[float, float]],
               shapes: dict[str, Shape], metric: bool, tol: float, score_threshold: float,
               motion: Motion | None = None) -> list[int]:
    """Indices of the detections to keep: all scored at or above the threshold, and those
    below it (kept by ``refine_detections`` for what the depth shows) only where they
    explain a library shape that no more confident part explains: a low-score piece of
    the cart beside the cart is not a second body. Among the parts below the threshold
    that name one library shape, the one that fits it best (``_match_cost``) keeps it: their
    scores do not compare (a part only the depth shows has a fixed score; on random scene 18
    a distractor box seen only in the depth, 0.22 x 0.11 m, outscored the network's own
    low-score detection of the 0.30 x 0.16 x 0.10 m cart). motion: as ``match_shapes``'s, a
    still part's fit costing ``STILL_COST`` more where one moves."""
    sure = [k for k in range(len(dets)) if dets[k].score >= score_threshold]
    taken = {names[k] for k in sure}
    rest = [k for k in range(len(dets)) if dets[k].score < score_threshold and names[k] is not None]
    still = motion.still(np.array([n is not None for n in names])) if motion is not None else None
    if still is not None:  # the library shapes a still part pays for (``contested``)
        lib = [n for n, sh in shapes.items() if sh.type in CLASSES]
        paid = {n for n, c in zip(lib, contested(_cost_matrix(dets, seen, shapes, lib, metric, tol), motion,
                                                 _alike(dets, shapes, lib))) if c}
    rest.sort(key=lambda k: _match_cost(dets[k], seen[k], shapes[names[k]], metric, tol)
              + (STILL_COST if still is not None and still[k] and names[k] in paid else 0.0))
    keep = list(sure)
    for k in rest:
        if names[k] not in taken:
            keep.append(k)
            taken.add(names[k])
    return sorted(keep)


def _lookalikes(a: Shape, b: Shape) -> bool:
    """Whether library shapes ``a`` and ``b`` differ only in length: one type, their two
    smaller extents within ``LOOKALIKE_TOL`` of each other, one ``LOOKALIKE_LONGER`` x longer."""
    if a.type != b.type:
        return False
    ea, eb = sorted(a.extents(), reverse=True), sorted(b.extents(), reverse=True)
    same = all(abs(x - y) <= LOOKALIKE_TOL * max(x, y) for x, y in zip(ea[1:], eb[1:]))
    return same and max(ea[0], eb[0]) >= LOOKALIKE_LONGER * min(ea[0], eb[0])


def _order_lookalikes(out: list[str | None], cost: np.ndarray, seen: list[tuple[float, float]],
                      shapes: dict[str, Shape], names: list[str]) -> None:
    """Swap, in place, the names of two parts named after look-alike library shapes
    (``_lookalikes``: two rods of one radius) where the part seen shorter by at least
    ``LOOKALIKE_LONGER`` holds the longer shape, and the swap costs at most
    ``LOOKALIKE_MARGIN`` more (``cost``: (parts, ``names``)). Occlusion only shortens a part:
    where both look shorter than both shapes, the length terms of ``size_cost`` cost both
    namings alike (|log(l1/L2)| + |log(l2/L1)| = |log(l1/L1)| + |log(l2/L2)|), and the
    widths' and proportions' noise decides; the longer part seen is the likelier to be the
    longer shape (random scene 70: arms of 0.30 and 0.25 m seen 0.242 and 0.290 m long)."""
    col = {n: j for j, n in enumerate(names)}
    for a in range(len(out)):
        for b in range(len(out)):
            na, nb = out[a], out[b]
            if a == b or na is None or nb is None or na == nb:
                continue
            ja, jb = col[na], col[nb]
            la, lb = max(shapes[na].extents()), max(shapes[nb].extents())
            if (la > lb and seen[b][0] >= LOOKALIKE_LONGER * seen[a][0] and _lookalikes(shapes[na], shapes[nb])
                    and cost[a, jb] + cost[b, ja] <= cost[a, ja] + cost[b, jb] + LOOKALIKE_MARGIN):
                out[a], out[b] = nb, na
