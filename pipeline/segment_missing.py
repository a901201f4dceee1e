"""Segment: the library shapes it must find, and the error naming those it did not.

At a far camera and low resolution a part a few pixels across (a pole 3-4 px wide with a
third of its depth pixels missing) may never be proposed by the segmenter, while a
look-alike of another part's class takes that part's name. Where the chosen frame's naming
leaves a library shape unnamed, ``segment.run`` names that frame again with the full motion
cue (``segment_still.DepthMotion``: a still part with nothing moving beside it is
background, a still part pays more for every name, a moving region no part covers is
proposed for an unnamed shape, where it moves away from where it is and touches the named
parts in 3-D: ``segment_still.moving_proposals``); a named rod whose mask holds two rods (two
links of a far chain in one mask) is cut in two where a rod shape is still unnamed (``split_rods``). That
naming is kept where it explains more of the library and every part fits its shape's size
(``size_cost`` at most ``segment.SURPLUS_SIZE_COST``: a naming that completes the library
only with parts of the wrong size is on the wrong parts); otherwise, and for a shape still
unnamed, ``check_missing``'s error stands.

A part the class head is sure of in a class its shape does not have (a far flat box a few px
wide seen as a capsule, with no box evidence; a far box hub seen as a cylinder beside
library capsules) is named by no step above. Where a shape is still unnamed, ``other_class``
gives each detection whose size fits closely (``size_cost`` at most ``CLOSE_FIT``) library
shapes of other classes and none of its own class (nor its rod sibling) the least class
evidence ``_match_cost`` accepts for another class (``OTHER_CLASS_SHARE`` of its score) for
those shapes, and the frame is named again from them; kept only as the full motion cue's
naming is (more of the library explained, every part at its size).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import numpy as np

from vid2sim.datasets.recording import RecordingError
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_match import ROD_SIBLING
from vid2sim.pipeline.segment_size import measure_extents, size_cost
from vid2sim.pipeline.segment_still import PROPOSAL_SCORE, carve_rods

if TYPE_CHECKING:
    from vid2sim.pipeline.segment import Candidate, SegmentConfig

log = logging.getLogger("vid2sim.pipeline.segment")


def findable(shapes: dict[str, Shape], shapes_path: Path) -> list[str]:
    """The library shapes segment looks for: of a class it knows (box, capsule, sphere,
    cylinder), not a known actuator's (``actuation.npz``'s ``shapes`` beside ``shapes_path``,
    docs/formats.md §1.2: their pixels are no part)."""
    actuators = set()
    if (shapes_path.parent / "actuation.npz").is_file():
        try:
            with np.load(shapes_path.parent / "actuation.npz") as z:
                actuators = {str(n) for n in z["shapes"]} if "shapes" in z.files else set()
        except (OSError, ValueError) as e:
            raise RecordingError(shapes_path.parent / "actuation.npz", f"cannot be read ({e})") from None
    return [n for n, s in shapes.items() if s.type in CLASSES and n not in actuators]


def check_missing(cfg: "SegmentConfig", shapes: dict[str, Shape], names: list[str], frames: list[int],
                  shapes_path: Path, wanted: list[str] | None = None) -> None:
    """Every library shape segment can find (``findable``) must have been matched by some
    part: one that was not is a ``StageError`` naming it (``cfg.missing="allow"``: an INFO
    line). Mesh shapes are never looked for, nor the shapes of known actuators. ``wanted``:
    ``findable``'s answer where the caller has it (None: read here)."""
    from vid2sim.pipeline.run import StageError

    wanted = findable(shapes, shapes_path) if wanted is None else wanted
    absent = [n for n in wanted if n not in set(names)]
    if not absent:
        return
    what = ", ".join(absent[:-1]) + " and " + absent[-1] if len(absent) > 1 else absent[0]
    msg = (f"shapes.json lists {len(wanted)} part(s), segment found {len(set(wanted) & set(names))}: {what} "
           f"{'are' if len(absent) > 1 else 'is'} missing in frames {', '.join(map(str, frames))} "
           f"(smaller than segment.min_pixels={cfg.min_pixels} px, hidden, or not in this scene? "
           "segment.missing=allow goes on without them)")
    if cfg.missing == "error":
        raise StageError(f"segment: {shapes_path}: {msg}")
    log.info("segment: %s", msg)


RODS = ("capsule", "cylinder")
OTHER_CLASS_SHARE = 0.25  # of its score: the least class evidence ``_match_cost`` takes for another class
CLOSE_FIT = 0.4  # size_cost: a part of a class the library lacks may take a shape its size fits this well
CUT_SHARES = np.arange(0.2, 0.81, 0.05)  # where along a two-rod mask's axis (share of its pixels) a cut is tried


def names_more(again: tuple[list[Detection], list[tuple[float, float]], list[str]],
               parts: tuple[list[Detection], list[tuple[float, float]], list[str]], wanted: set[str],
               shapes: dict[str, Shape], tol: float, fit: float) -> bool:
    """Whether the naming ``again`` (detections, seen extents m, names) names more shapes of
    ``wanted`` than ``parts`` does and each of its parts at a ``size_cost`` of at most ``fit``."""
    return len(wanted & set(again[2])) > len(wanted & set(parts[2])) and all(
        size_cost(e, shapes[n], True, tol) <= fit for _, e, n in zip(*again))


def other_class_naming(parts: tuple[list[Detection], list[tuple[float, float]], list[str]], best: "Candidate",
                       wanted: list[str], shapes: dict[str, Shape], K: np.ndarray, tol: float, fit: float,
                       name: Callable[["Candidate"], tuple[list[Detection], list[tuple[float, float]], list[str]]]
                       ) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
    """(parts, seen extents m, names): ``parts`` (the chosen frame's named detections, extents,
    names) where they name every shape of ``wanted``; otherwise the chosen candidate ``best``
    named again by ``name`` (``segment._named`` with the full motion cue) from its detections
    passed through ``other_class``, where that names more of ``wanted`` and every part at a
    ``size_cost`` of at most ``fit``. K: intrinsics at segment's working resolution."""
    if set(wanted) <= set(parts[2]):
        return parts
    found = other_class(best.found, shapes, wanted, best.depth, K, best.smoothed, tol)
    if all(a is b for a, b in zip(found, best.found)):
        return parts
    again = name(best._replace(found=found))
    if names_more(again, parts, set(wanted), shapes, tol, fit):
        log.info("segment: frame %d named again with parts of classes the library lacks taken for the shapes "
                 "their size fits: %s", best.frame, ", ".join(again[2]))
        return again
    return parts


def other_class(found: list[Detection], shapes: dict[str, Shape], wanted: list[str], depth: np.ndarray,
                K: np.ndarray, smoothed: np.ndarray, tol: float) -> list[Detection]:
    """``found`` (detections of one frame, masks (H, W) at segment's working resolution; depth
    m, K, ``smoothed`` as for ``measure_extents``) with each detection whose seen extents fit
    no ``wanted`` shape of its class (nor of its rod sibling) with a ``size_cost`` of at most
    ``CLOSE_FIT`` given class evidence ``OTHER_CLASS_SHARE`` x its score for the classes of the
    ``wanted`` shapes they do fit so; its label and score stay. Other detections (a rod whose
    size fits a library rod, a part no shape fits closely) are returned as they are."""
    out = []
    for d in found:
        own = {CLASSES[d.label], ROD_SIBLING.get(CLASSES[d.label])}
        e = measure_extents(d.mask, depth, K, smoothed)
        close = [n for n in wanted if size_cost(e, shapes[n], True, tol) <= CLOSE_FIT]
        fits = {shapes[n].type for n in close} - own
        if not fits or any(shapes[n].type in own for n in close):
            out.append(d)
            continue
        cs = (np.array(d.class_scores, np.float64) if d.class_scores is not None
              else np.eye(len(CLASSES))[d.label] * d.score)
        for c in fits:
            cs[CLASSES.index(c)] = max(cs[CLASSES.index(c)], OTHER_CLASS_SHARE * d.score)
        out.append(Detection(d.mask, d.label, d.score, cs))
    return out


def cut_along(mask: np.ndarray, pair: tuple[Shape, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray,
              tol: float, min_px: int, fit: float
              ) -> tuple[list[np.ndarray], list[tuple[float, float]]] | None:
    """([mask of pair[0], mask of pair[1]] (H, W) bool, their seen extents m): ``mask`` (two rods
    end to end, a chain's two links in one mask) cut across its principal axis in the image,
    at one of ``CUT_SHARES`` of its pixels, each rod at either end, where both pieces have at
    least ``min_px`` px and fit their shapes with a ``size_cost`` of at most ``fit``; of those
    cuts the one of least summed cost. None where no cut does. Depth (m), ``smoothed``, K and
    the mask at segment's working resolution."""
    v, u = np.nonzero(mask)
    if len(v) < 2 * min_px:
        return None
    pts = np.stack([u, v], 1).astype(np.float64)
    pts -= pts.mean(0)
    axis = np.linalg.svd(pts, full_matrices=False)[2][0]
    t = pts @ axis
    best = None
    for q in np.quantile(t, CUT_SHARES):
        lo = np.zeros(mask.shape, bool)
        lo[v[t <= q], u[t <= q]] = True
        hi = mask & ~lo
        if min(int(lo.sum()), int(hi.sum())) < min_px:
            continue
        e_lo, e_hi = measure_extents(lo, depth, K, smoothed), measure_extents(hi, depth, K, smoothed)
        for pieces, e in (([lo, hi], [e_lo, e_hi]), ([hi, lo], [e_hi, e_lo])):
            cost = [size_cost(x, sh, True, tol) for x, sh in zip(e, pair)]
            if max(cost) <= fit and (best is None or sum(cost) < best[0]):
                best = (sum(cost), pieces, e)
    return None if best is None else (best[1], best[2])


def split_rods(parts: tuple[list[Detection], list[tuple[float, float]], list[str]], wanted: list[str],
               shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray, tol: float,
               min_px: int, fit: float) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
    """(parts, seen extents m, names): the named ``parts`` (detections, extents, names), where a
    rod shape of ``wanted`` is unnamed, with each named rod's mask that holds two rods (a far
    chain's two links in one mask) cut in two (``segment_still.carve_rods``: its own shape's
    rod, then the unnamed shape's from what is left; where that leaves no two pieces of the
    rods' sizes, across the mask's axis, ``cut_along``), the second piece named
    as the unnamed shape (score ``PROPOSAL_SCORE``). A cut is kept only where both pieces have at least
    ``min_px`` px and fit their shapes with a ``size_cost`` of at most ``fit``. Depth (m),
    ``smoothed``, K and masks at segment's working resolution."""
    dets, seen, names = list(parts[0]), list(parts[1]), list(parts[2])
    unnamed = [n for n in wanted if n not in set(names) and shapes[n].type in RODS]
    for k in range(len(dets)):
        if not unnamed:
            break
        if shapes[names[k]].type not in RODS:
            continue
        rods = carve_rods(dets[k].mask, depth, K, [shapes[names[k]], shapes[unnamed[0]]])
        e = [measure_extents(r, depth, K, smoothed) for r in rods] if len(rods) == 2 and min(
            int(r.sum()) for r in rods) >= min_px else []
        if not e or size_cost(e[0], shapes[names[k]], True, tol) > fit or size_cost(
                e[1], shapes[unnamed[0]], True, tol) > fit:   # the chain cut across its length instead
            cut = cut_along(dets[k].mask, (shapes[names[k]], shapes[unnamed[0]]), depth, K, smoothed, tol, min_px, fit)
            if cut is None:
                continue
            rods, e = cut
        d, label = dets[k], CLASSES.index(shapes[unnamed[0]].type)
        log.info("segment: %s's mask holds two rods: %s cut from it (%d px, seen %.3f x %.3f m)", names[k],
                 unnamed[0], int(rods[1].sum()), *e[1])
        dets[k], seen[k] = Detection(rods[0], d.label, d.score, d.class_scores), e[0]
        dets.append(Detection(rods[1], label, PROPOSAL_SCORE, np.eye(len(CLASSES))[label] * PROPOSAL_SCORE))
        seen.append(e[1])
        names.append(unnamed.pop(0))
    return dets, seen, names
