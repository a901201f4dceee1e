"""Segment stage: every part in one frame, with its library shape.

Heiden et al. 2022, §4.3.3.1: depth becomes a normal map (finite differences in pixel
space; for RGB-only recordings a binarised and blurred pseudo-depth), an instance
segmenter finds the parts and their primitive class, and each part is matched to the
recording's ``shapes.json`` by class and by the size seen in the depth (back-projected
extents). A part that fits no library shape is background (below).

Two segmenters, chosen with ``SegmentConfig.method`` and never swapped silently:
``learned`` (Mask R-CNN, ``models/segmenter``, trained on synthetic primitives) and
``geometric`` (training-free: discontinuities, normal clustering, primitive fitting).
On metric depth the learned detections (class scores averaged with a mirrored pass) are
checked and completed with the depth (``models/segmenter/refine``: masks snapped to depth
regions, a mask over two or three parts the geometric segmenter separates split into them
on clean-looking depth (``models/segmenter/reconcile``), low-score detections kept where
the depth shows an unexplained part, depth
regions no detection explains added as low-score parts, class from the network's scores,
a small CNN on full-resolution crops of the part's depth (``models/segmenter/shape_net``)
and geometric cues); a part scored below ``score_threshold`` is kept only where it
explains a library shape no more confident part does.
A library sphere is also found by its radius in the depth (``segment_sphere``): a mask whose
depth fits it gets sphere evidence, and where it stays unnamed it is cut out of a rod's mask
that holds it; two look-alike rods (one type and radius) are named longer to longer where
that costs little more (``segment_match``).
A detection lying mostly on a known actuator's pixels (the hole its tip leaves in the depth) is
no part (``actuators.off_actuators``).
With ``refine_boundaries`` (on by default), each final mask's boundary is last refined on the colour
image (``segment_refine``: GrabCut within a few pixels of the mask, onto its rim where the depth has
no reading and, with ``refine_with_depth`` (on), onto pixels at the part's own depth; never onto
another part's pixels); the masks before it are saved beside them as the masks track fits to
(``Segmentation.fit_masks``).
Several early frames can be looked at; the one with the most confident parts is kept, its
parts named by their size over every candidate frame they are seen in (``segment_evidence``).
Noisy depth frames at least twice ``work_width`` wide are segmented with s x s pixel blocks
averaged (``work_scale``), the masks scaled back up to the frame.
Where they leave library shapes unexplained (a far camera: parts a few pixels across), the
learned segmenter looks at them again with each group of parts magnified (``predict_zoomed``).
Parts touch the parts they are joined to: of the clusters of touching masks, the one that
explains most library shapes is kept, others only for shapes it leaves unexplained
(``segment_assembly``; a look-alike distractor apart from the mechanism is background).
What fits no library shape (walls, floors, tables, distractors) is background, logged; a
library shape no part matched, even with the full motion cue (``segment_missing``) or a rod cut
from a mask it shares with its neighbour (``segment_merged``), is looked
for in the next candidate frames, named the same way (``segment_fallback``, at most
``SegmentConfig.fallback`` of them); one still unmatched is an error naming it
(``SegmentConfig.missing``).
On depth recordings, depth frames sampled over the clip tell moving detections from still
look-alikes (``segment_still``; not where a known actuator pushes the parts), in the frame
the ranking chose only (frames are ranked without motion): where a part moves, a still
detection loses a library name to a moving one, a still one with nothing moving beside it
(a table's leg) is background, and a moving region no detection covers is proposed as a
part where a library shape is unnamed (one per such shape): the full cue, ``motion_samples``.
By default only the narrow cue (``still_samples``, ``segment_still.StillMotion``): a still
detection pays more only for the library shapes the moving ones contest (``contested``: a still
distractor loses the cart's name to the moving cart; the still carcass keeps its own).
A named mask partly still, partly moving holds nested parts (a drawer front in the carcass's
mask): cut by motion where that names as well (``segment_nested``). A still named part apart in 3-D
from every moving part (a look-alike a part swings in front of) is left out where the frame, named
again without it, still explains every shape it did (``segment_contact``). A library name held only
by a look-alike apart from the mechanism, or a shape left unnamed, goes to a detection no part covers
that touches the mechanism's parts in 3-D (``segment_near``). Writes the overlay PNG.

An RGB-only recording is segmented by its motion instead (``segment_motion``: the regions
that move rigidly are the parts), unless ``motion.by_motion`` is "off".

Not here: mesh shapes in the library are never matched (the segmenter knows only
box, capsule, sphere and cylinder); tracking from the chosen frame is ``track``'s job.
"""
from __future__ import annotations

import logging
import contextlib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import cv2
import numpy as np

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.geometric import frame_geometry
from vid2sim.models.segmenter.model import DEFAULT_CHECKPOINT, Detection, Segmenter
from vid2sim.models.segmenter.normals import (depth_to_normal_image, downsample_depth, downsample_intrinsics,
                                              pseudo_depth_from_rgb, smooth_depth, upsample_mask)
from vid2sim.models.segmenter.reconcile import MAX_NOISE, depth_noise
from vid2sim.pipeline.actuators import hidden_pixels, off_actuators
from vid2sim.pipeline.segment_overlay import overlay
from vid2sim.pipeline.segment_assembly import assembly
from vid2sim.pipeline.segment_pieces import complete_pieces, join_pieces
from vid2sim.pipeline.segment_refine import part_depths, refine_boundaries
from vid2sim.pipeline.segment_contact import apart_from_mechanism, drop_apart
from vid2sim.pipeline.segment_evidence import linked_sizes
from vid2sim.pipeline.segment_fallback import FALLBACK, fall_back
from vid2sim.pipeline.segment_missing import (check_missing as _check_missing, findable, names_more,
                                              other_class_naming, split_rods)
from vid2sim.pipeline.segment_inside import drop_apart_repeats, sphere_inside
from vid2sim.pipeline.segment_merged import rods_from_merged
from vid2sim.pipeline.segment_near import near_mechanism
from vid2sim.pipeline.segment_loose import loose_to_moving
from vid2sim.pipeline.segment_nested import split_by_motion
from vid2sim.pipeline.segment_size import size_cost, measure_extents
from vid2sim.pipeline.segment_sphere import confirm_spheres, library_spheres, split_sphere
from vid2sim.pipeline.segment_match import (ROD_SIBLING, ROD_SIBLING_FLOOR, SURPLUS_SIZE_COST,  # noqa: F401 (re-exported)
                                            _confirmed, _cost_matrix, _match_cost, match_shapes)
from vid2sim.pipeline.segment_split import split_moving
from vid2sim.pipeline.segment_motion import SegmentMotion, segment_by_motion
from vid2sim.pipeline.segment_still import MOVING_SHARE, DepthMotion, Motion, StillMotion, moving_proposals
from vid2sim.pipeline.segment_zoom import (MIN_PIXELS_ZOOMED, ZOOM_MIN, ZOOM_TILES, _dedupe,  # noqa: F401 (re-exported)
                                          predict_zoomed, zoom_tiles)

if TYPE_CHECKING:
    from vid2sim.pipeline.artifacts import Segmentation

log = logging.getLogger(__name__)
OVERLAY_FILE = "segmentation_overlay.png"
METHODS = ("learned", "geometric")


@dataclass(frozen=True)
class SegmentConfig:
    """Settings of the segment stage."""

    # "learned" (Mask R-CNN + depth refinement, models/segmenter) or "geometric" (training-free
    # depth-edge regions, models/segmenter/geometric.py)
    method: str = "learned"
    frames: tuple[int, ...] = (0, 3, 6, 9, 12)  # candidate frames; the one explaining most library shapes (then most confident) is used
    score_threshold: float = 0.5  # in [0, 1]: parts scored below this are dropped
    checkpoint: str = ""  # learned segmenter weights (.pt); "" = the shipped models/segmenter/segmenter.pt
    # learned: average the class scores over a mirrored pass, then check and complete the detections
    # with the depth (models/segmenter/refine.py: masks snapped to depth-edge regions, merged masks split
    # into the geometric segmenter's parts, depth-confirmed low-score detections kept, class from network
    # scores + shape_net crops + geometric cues); False = the network's detections alone
    snap_to_depth: bool = True
    size_tolerance: float = 1.6  # >= 1: a part may look at most this many times larger than its library shape
    min_pixels: int = 100  # px: smaller parts are ignored (noise, slivers between parts)
    # a part fitting no library shape (a wall, the floor, a table, a distractor): "ignore" = background
    # (one INFO line each, with its class and size) or "error" (stop, naming what was seen)
    unmatched: str = "ignore"
    # a library shape (box, capsule, sphere, cylinder) no part matched: "error" (stop, naming it) or
    # "allow" (log it and go on: a library that lists shapes this scene may not show)
    missing: str = "error"
    # learned, >= 1: where the candidate frames leave library shapes unexplained, look at them again
    # with the region of the parts (a far camera: a few % of the frame) magnified up to this many times
    # (1 = never; predict_zoomed)
    zoom: float = 4.0
    # also take the magnified second look when the parts found cover less than this share of
    # the image (a far camera: a small part missed and a distractor taken for it), in [0, 1]
    zoom_below: float = 0.015
    # depth recordings without known actuators: frames sampled over the clip to tell moving detections
    # from still look-alikes (a table's leg), which lose a library name to a moving one (segment_still);
    # in the frame chosen by the motion-free ranking only; 0 = motion not looked at
    motion_samples: int = 0
    # depth recordings without known actuators: frames sampled over the clip to find detections partly
    # still and partly moving (a drawer's front and the carcass around it in one mask), split in every
    # candidate frame where the naming is then better (segment_split); 0 = no split (the default:
    # docs/decisions.md 2026-12-05)
    split_samples: int = 0
    # depth recordings without known actuators, used where motion_samples is 0: frames sampled over
    # the clip for the narrow motion cue in the chosen frame, a still detection costing more where one
    # that fits a library shape moves, nothing made background or proposed by it (segment_still.StillMotion;
    # a still distractor of a part's class and size loses the name to the moving part); 0 = not looked at
    still_samples: int = 12
    missing_samples: int = 12  # depth: frames sampled for the full motion cue where a shape is unnamed (segment_missing); 0 = off
    # depth: where the chosen frame leaves a library shape unnamed, at most this many more candidates
    # (best ranked first) are named the same way; the one naming most shapes at fitting sizes is kept
    # (segment_fallback); 0 = the chosen frame only
    fallback: int = FALLBACK
    overlay: bool = True  # write segmentation_overlay.png
    # each final mask's boundary refined on the colour image (segment_refine): grown onto its rim without
    # depth readings; the masks before it are kept as the fit masks track uses (Segmentation.fit_masks)
    refine_boundaries: bool = True
    # with refine_boundaries: pixels at the part's own depth may join too, and the mask's own may leave
    refine_with_depth: bool = True
    # px: noisy depth frames at least twice this wide are segmented at 1/s resolution, s = width // work_width
    # (s x s blocks averaged, downsample_depth; work_scale), their masks scaled back up; 0 = always full resolution
    work_width: int = 640
    motion: SegmentMotion = field(default_factory=SegmentMotion)  # RGB-only recordings: parts from their motion

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"segment: unknown method {self.method!r}; choose one of {', '.join(METHODS)}")
        if self.unmatched not in ("error", "ignore"):
            raise ValueError(f"segment: unmatched must be 'error' or 'ignore', got {self.unmatched!r}")
        if self.missing not in ("error", "allow"):
            raise ValueError(f"segment: missing must be 'error' or 'allow', got {self.missing!r}")
        if self.motion_samples < 0:
            raise ValueError(f"segment: motion_samples must be >= 0 (0 = motion not looked at), "
                             f"got {self.motion_samples}")
        if self.still_samples < 0:
            raise ValueError(f"segment: still_samples must be >= 0 (0 = not looked at), got {self.still_samples}")
        if self.split_samples < 0:
            raise ValueError(f"segment: split_samples must be >= 0 (0 = no motion split), got {self.split_samples}")
        if self.missing_samples < 0:
            raise ValueError(f"segment: missing_samples must be >= 0 (0 = not looked at), got {self.missing_samples}")
        if self.fallback < 0:
            raise ValueError(f"segment: fallback must be >= 0 (0 = the chosen frame only), got {self.fallback}")
        if self.work_width < 0:
            raise ValueError(f"segment: work_width must be >= 0 (0 = full resolution), got {self.work_width}")


_SEGMENTERS: dict[str, Segmenter] = {}


def _segmenter(path: str) -> Segmenter:
    key = str(Path(path).resolve())
    if key not in _SEGMENTERS:
        _SEGMENTERS[key] = Segmenter(path)
    return _SEGMENTERS[key]


def work_scale(cfg: SegmentConfig, rec: Recording, frame: int) -> int:
    """The integer factor s the recording's frames are segmented at 1/s of (1: full resolution).

    s = width // ``work_width`` where that is at least 2 and the depth of ``frame`` is noisy
    by the measure ``reconcile`` splits masks by (``depth_noise`` above ``MAX_NOISE``).
    Per-pixel depth noise does not shrink with the pixels: at twice the resolution the
    normals' finite differences span half the distance, so their noise doubles (the
    1280x720 realistic cartpole: 64 % of its pixels on concave creases, the floor no
    longer found as a plane, 1700 noise regions). Blocks of s x s pixels bring such a
    frame back to about ``work_width`` pixels across and average its noise down by s.
    Quieter depth keeps its full resolution and finer masks.
    """
    s = rec.camera.width // cfg.work_width if cfg.work_width > 0 and rec.has_depth else 1
    if s < 2:
        return 1
    depth = rec.depth(frame)
    P, N = frame_geometry(depth, rec.camera.K)
    return s if depth_noise(depth, P, N) > MAX_NOISE else 1


def frame_input(rec: Recording, i: int, s: int = 1) -> tuple[np.ndarray, np.ndarray, bool]:
    """(depth or pseudo-depth (H/s, W/s) m, normal image (H/s, W/s, 3) uint8, metric?) of frame i,
    at 1/s resolution (``downsample_depth``; the intrinsics are ``downsample_intrinsics(K, s)``)."""
    if rec.has_depth:
        depth = downsample_depth(rec.depth(i), s)
        metric = True
    else:
        depth = pseudo_depth_from_rgb(rec.color(i))
        metric = False
    return depth, depth_to_normal_image(depth, downsample_intrinsics(rec.camera.K, s)), metric


def detect(method: str, depth: np.ndarray, normal_img: np.ndarray, K: np.ndarray, score_threshold: float,
           checkpoint: str = "", min_pixels: int = 40, snap_to_depth: bool = True, zoom: float = 1.0,
           block: int = 1) -> list[Detection]:
    """Instances in one frame with the chosen segmenter, best first, of at least ``min_pixels``.

    zoom: learned only, the largest upscaling of the network's view of the parts
    (``predict_zoomed``); a part found magnified s times needs only min_pixels / s^2 frame
    pixels (at least ``MIN_PIXELS_ZOOMED``). block: the depth is the sensor's averaged over
    block x block pixels (``frame_input``; refine judges its noise by the sensor's pixels)."""
    scale = 1.0
    if method == "learned":
        net = _segmenter(checkpoint or str(DEFAULT_CHECKPOINT))
        if snap_to_depth:
            from vid2sim.models.segmenter.refine import LOW_SCORE, refine_detections

            dets, scale = predict_zoomed(net, normal_img, depth, min(LOW_SCORE, score_threshold), zoom)
            dets = refine_detections(dets, depth, K, score_threshold, block=block)
        else:
            dets, scale = predict_zoomed(net, normal_img, depth, score_threshold, zoom)
    elif method == "geometric":
        from vid2sim.models.segmenter.geometric import segment_geometric

        dets = [d for d in segment_geometric(depth, K, min_pixels) if d.score >= score_threshold]
    else:
        raise ValueError(f"segment: unknown method {method!r}; choose one of {', '.join(METHODS)}")
    least = min_pixels if scale == 1.0 else max(min_pixels / scale**2, MIN_PIXELS_ZOOMED)
    return [d for d in dets if d.mask.sum() >= least]


@contextlib.contextmanager
def logging_disabled():
    previous, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = previous


class Candidate(NamedTuple):
    """One candidate frame i, segmented without the motion cue; depth (H, W) m, normal image
    (H, W, 3) uint8 and masks at segment's working resolution (1/s, ``work_scale``)."""

    rank: tuple  # (library shapes explained, -parts not so explained, -doubtful names, total score)
    frame: int
    depth: np.ndarray
    nimg: np.ndarray
    metric: bool
    dets: list[Detection]  # the parts kept and named (``_name_frame``)
    seen: list[tuple[float, float]]  # their seen extents, m
    found: list[Detection]  # the segmenter's detections before naming
    smoothed: np.ndarray  # smooth_depth(depth)


def _name_frame(cfg: SegmentConfig, rec: Recording, i: int, depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray,
                found: list[Detection], metric: bool, s: int = 1, motion: DepthMotion | None = None
                ) -> tuple[list[Detection], list[str | None], list[tuple[float, float]], float]:
    """(parts, their library names (None: background), seen extents m, total score) of frame i
    from the segmenter's detections ``found``: low-score parts kept only where they explain an
    open library shape (``_confirmed``), pieces of one part joined and completed
    (``segment_pieces``). motion: the recording's sampled depth at 1/s (None: motion not looked
    at); with it, still look-alikes lose names to moving parts (``match_shapes``) and moving
    regions no part covers are proposed where a library shape is unnamed (``moving_proposals``).
    Logs nothing (the names are logged once, for the chosen frame)."""
    shapes_path = Path(rec.path) / "shapes.json"
    tol = cfg.size_tolerance
    dets = confirm_spheres(list(found), depth, K, rec.shapes) if metric else list(found)  # segment_sphere
    seen = [measure_extents(d.mask, depth, K, smoothed) for d in dets]
    total = sum(d.score for d in dets)

    def moving(dets: list[Detection]) -> Motion | None:
        return motion.cues(i, [d.mask for d in dets]) if motion is not None and metric else None

    with logging_disabled():
        mv = moving(dets)
        matched = match_shapes(dets, seen, rec.shapes, metric, tol, shapes_path, i, "ignore", mv)
        keep = _confirmed(dets, matched, seen, rec.shapes, metric, tol, cfg.score_threshold, mv)
        if len(keep) < len(dets):
            dets, seen = [dets[k] for k in keep], [seen[k] for k in keep]
            matched = match_shapes(dets, seen, rec.shapes, metric, tol, shapes_path, i, "ignore", moving(dets))
            total = sum(d.score for d in dets)
        n = len(dets)
        dets, matched, seen = join_pieces(dets, matched, seen, depth, K, smoothed, rec.shapes, metric, tol)
        grown = seen
        dets, seen = complete_pieces(dets, matched, seen, depth, K, smoothed, rec.shapes, metric, tol)
        if len(dets) < n or seen != grown:
            matched = match_shapes(dets, seen, rec.shapes, metric, tol, shapes_path, i, "ignore", moving(dets))
            total = sum(d.score for d in dets)
        if metric:  # a library sphere unnamed: cut out of a mask it shares with a rod (segment_sphere)
            dets, matched, seen = split_sphere(
                dets, matched, seen, depth, K, smoothed, rec.shapes, max(MIN_PIXELS_ZOOMED, round(cfg.min_pixels / s**2 / 4)),
                lambda p, e: match_shapes(p, e, rec.shapes, metric, tol, shapes_path, i, "ignore", moving(p)))
        keep = assembly(dets, lambda ks: match_shapes([dets[k] for k in ks], [seen[k] for k in ks], rec.shapes,
                                                      metric, tol, shapes_path, i, "ignore"), depth.shape[1],
                        lambda k, n: size_cost(seen[k], rec.shapes[n], metric, tol) <= SURPLUS_SIZE_COST)
        if len(keep) < len(dets):  # look-alikes apart from the mechanism (segment_assembly)
            dets, seen = [dets[k] for k in keep], [seen[k] for k in keep]
            matched = match_shapes(dets, seen, rec.shapes, metric, tol, shapes_path, i, "ignore", moving(dets))
            total = sum(d.score for d in dets)
        if motion is not None and metric and motion.proposes:
            least = max(MIN_PIXELS_ZOOMED, round(cfg.min_pixels / s**2 / 4))
            more, more_seen = moving_proposals(motion, i, dets, matched, rec.shapes, depth, K, smoothed, tol, least)
            if more:
                dets, seen = dets + more, seen + more_seen
                matched = match_shapes(dets, seen, rec.shapes, metric, tol, shapes_path, i, "ignore", moving(dets))
    return dets, matched, seen, total


def _naming_key(dets: list[Detection], matched: list[str | None], seen: list[tuple[float, float]],
                shapes: dict[str, Shape], metric: bool, tol: float) -> tuple[int, int, int, float]:
    """(library shapes explained at a size they can have (size cost at most ``SURPLUS_SIZE_COST``),
    -parts not so explained, -names among those, -the named parts' total ``_match_cost``) of one
    frame's naming: larger is better."""
    fit = {n for n, e in zip(matched, seen)
           if n is not None and size_cost(e, shapes[n], metric, tol) <= SURPLUS_SIZE_COST}
    doubtful = sum(n is not None for n in matched) - len(fit)
    cost = sum(_match_cost(d, e, shapes[n], metric, tol) for d, n, e in zip(dets, matched, seen) if n is not None)
    return len(fit), -(len(matched) - len(fit)), -doubtful, -float(cost)


def _candidates(cfg: SegmentConfig, rec: Recording, frames: list[int], zoom: float, s: int = 1,
                split: DepthMotion | None = None) -> list[Candidate]:
    """Each candidate frame segmented and ranked without the motion cue, the detections made
    with the network's view magnified up to ``zoom`` times, at 1/s resolution (``work_scale``).
    split: the recording's sampled depth (None: no motion split); with it, a detection partly
    still and partly moving is split where the frame's naming is then better (``segment_split``)."""
    K = downsample_intrinsics(rec.camera.K, s)
    candidates = []
    for i in frames:
        depth, nimg, metric = frame_input(rec, i, s)
        found = _dedupe(detect(cfg.method, depth, nimg, K, cfg.score_threshold, cfg.checkpoint,
                               max(1, round(cfg.min_pixels / s**2)), cfg.snap_to_depth and metric, zoom, s))
        found = off_actuators(rec, i, found, s)   # the hole a known actuator leaves is no part
        smoothed = smooth_depth(depth)  # once per frame, for every part's extents
        dets, matched, seen, total = _name_frame(cfg, rec, i, depth, K, smoothed, found, metric, s)
        if split is not None and metric:  # a mask partly still, partly moving: split where that names better
            found, (dets, matched, seen, total) = split_moving(
                split, i, found, (dets, matched, seen, total), max(1, round(cfg.min_pixels / s**2)),
                lambda f: _name_frame(cfg, rec, i, depth, K, smoothed, f, metric, s),
                lambda r: _naming_key(r[0], r[1], r[2], rec.shapes, metric, cfg.size_tolerance))
        # Rank frames by the library shapes explained at a size they can have, then by parts not so
        # explained (unexplained, repeating a shape, or at a size cost above SURPLUS_SIZE_COST), then by
        # the names among those (``_naming_key``): a frame where the pole cuts the cart's image in two is
        # worse than one where each is seen once. Among the best, ``_choose`` picks by total score.
        rank = _naming_key(dets, matched, seen, rec.shapes, metric, cfg.size_tolerance)[:3] + (total,)
        log.info("segment: frame %d%s: %d parts (%s), %d library shapes, total score %.2f", i,
                 f" (zoom up to {zoom:g})" if zoom > 1 else "", len(dets), ", ".join(CLASSES[d.label] for d in dets),
                 rank[0], total)
        candidates.append(Candidate(rank, i, depth, nimg, metric, dets, seen, found, smoothed))
    return candidates


def _choose(candidates: list[Candidate]) -> Candidate:
    """Of the candidates of the best rank (ignoring the total score), the earliest frame within 10 %
    of their best total score (the first in the list on a tie): the tracker runs backward from it
    without a velocity history, so the fewer frames before it the better (a fast pole is lost)."""
    top = max(c.rank[:3] for c in candidates)
    good = [c for c in candidates if c.rank[:3] == top]
    best_total = max(c.rank[3] for c in good)
    return min((c for c in good if c.rank[3] >= 0.9 * best_total), key=lambda c: c.frame)


def _coverage(candidates: list[Candidate]) -> float:
    """The median over candidate frames of the share of the image their detections cover."""
    return float(np.median([float(np.any([d.mask for d in c.dets], axis=0).mean()) if c.dets else 0.0
                            for c in candidates]))


def segment_frames(cfg: SegmentConfig, rec: Recording, frames: list[int], s: int = 1) -> tuple[list[Candidate], Candidate]:
    """(every candidate, the chosen one) of ``frames``, ranked without the motion cue; where
    the first look leaves library shapes unexplained or the parts small in the image
    (``zoom_below``), the learned segmenter looks again with the parts' region magnified."""
    pushed = getattr(rec, "actuation", None) is not None  # stillness says nothing of a pushed mechanism's parts
    split = (DepthMotion(rec, s, cfg.split_samples) if cfg.split_samples > 1 and rec.has_depth and not pushed
             else None)
    candidates = _candidates(cfg, rec, frames, 1.0, s, split)
    n_shapes = sum(sh.type in CLASSES for sh in rec.shapes.values())
    if cfg.method == "learned" and cfg.zoom > 1 and (max(c.rank[0] for c in candidates) < n_shapes
                                                     or _coverage(candidates) < cfg.zoom_below):
        # library shapes unexplained, or parts small in the image: look again, magnified where
        # the parts fill a small region
        candidates += _candidates(cfg, rec, frames, cfg.zoom, s, split)
    return candidates, _choose(candidates)


def _named(cfg: SegmentConfig, rec: Recording, best: Candidate, candidates: list[Candidate], s: int,
           motion: DepthMotion | None) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
    """(parts, seen extents m, library names) of the chosen candidate ``best``: named again with
    the motion cue where ``motion`` is given (``_name_frame``), each part's size taken over the
    candidate frames it is seen in (``segment_evidence``), parts no library shape explains left
    out (background, logged). Masks at 1/s resolution."""
    i, dets, seen, shapes_path = best.frame, best.dets, best.seen, Path(rec.path) / "shapes.json"
    if motion is not None:
        K = downsample_intrinsics(rec.camera.K, s)
        dets, _, seen, _ = _name_frame(cfg, rec, i, best.depth, K, best.smoothed, best.found, best.metric, s, motion)
        log.info("segment: frame %d with the motion cue (%d sampled frames): %d parts (%s)", i, len(motion.frames),
                 len(dets), ", ".join(CLASSES[d.label] for d in dets))
    if not dets:
        return [], [], []
    shares = motion.cues(i, [d.mask for d in dets]) if motion is not None else None
    sizes = linked_sizes([d.mask for d in dets], seen, [([d.mask for d in c.dets], c.seen) for c in candidates
                                                        if c.frame != i], rec.shapes,
                         [n for n, sh in rec.shapes.items() if sh.type in CLASSES], best.metric, cfg.size_tolerance)
    names = match_shapes(dets, seen, rec.shapes, best.metric, cfg.size_tolerance, shapes_path, i, cfg.unmatched,
                         shares, sizes)
    keep = [k for k, n in enumerate(names) if n is not None]
    return [dets[k] for k in keep], [seen[k] for k in keep], [names[k] for k in keep]


def _finish(cfg: SegmentConfig, rec: Recording, best: Candidate, candidates: list[Candidate], s: int,
            motion: DepthMotion | None, wanted: set[str], full: list[DepthMotion]
            ) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
    """(parts, seen extents m, library names) of candidate ``best``: ``_named`` with ``motion``,
    named again with the full motion cue where a shape of ``wanted`` is unnamed, rods cut from
    a mask over two and parts of a class the library lacks named by their size
    (``segment_missing``), then masks partly still and partly moving split (``segment_nested``)
    and names held by look-alikes apart from the mechanism, or left unnamed, given to detections
    joined to it (``segment_near``).
    full: the full cue's sampled depth, made on first use and kept."""
    i, shapes_path = best.frame, Path(rec.path) / "shapes.json"
    dets, seen, names = _named(cfg, rec, best, candidates, s, motion)
    K, least = downsample_intrinsics(rec.camera.K, s), max(MIN_PIXELS_ZOOMED, round(cfg.min_pixels / s**2 / 4))

    def with_full_cue(c: Candidate) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
        return _named(replace(cfg, unmatched="ignore"), rec, c, candidates, s, _full(full, rec, s, cfg.missing_samples))

    full_cue = best.metric and cfg.missing_samples > 1 and cfg.motion_samples <= 1   # segment_missing's steps
    if full_cue and not wanted <= set(names):
        # the library unexplained (a part the network never proposes, a look-alike with its name): the
        # full motion cue in this frame, then rods cut from a mask over two; kept where that explains
        # more and every part fits its shape's size (segment_missing)
        again = with_full_cue(best)
        again = split_rods(again if len(wanted & set(again[2])) > len(wanted & set(names)) else (dets, seen, names),
                           sorted(wanted), rec.shapes, best.depth, K, best.smoothed, cfg.size_tolerance, least,
                           SURPLUS_SIZE_COST)
        if names_more(again, (dets, seen, names), wanted, rec.shapes, cfg.size_tolerance, SURPLUS_SIZE_COST):
            log.info("segment: frame %d named again with the full motion cue: %s", i, ", ".join(again[2]))
            dets, seen, names = again
    if full_cue:  # a class the library lacks (segment_missing)
        dets, seen, names = other_class_naming((dets, seen, names), best, sorted(wanted), rec.shapes, K,
                                               cfg.size_tolerance, SURPLUS_SIZE_COST, with_full_cue)

    def rename(ds: list[Detection], es: list[tuple[float, float]]) -> list[str | None]:
        return match_shapes(ds, es, rec.shapes, True, cfg.size_tolerance, shapes_path, i, "ignore")

    if full_cue:  # a rod merged with a neighbour into a mask no shape fits (segment_merged)
        dets, seen, names = rods_from_merged((dets, seen, names), best.found, sorted(wanted), rec.shapes, best.depth,
                                             K, best.smoothed, cfg.size_tolerance, least, SURPLUS_SIZE_COST,
                                             rename, i, None if motion is None else
                                             lambda ms: motion.shares(i, ms) >= MOVING_SHARE)
    if motion is not None:
        scene = (rec.shapes, best.depth, K, best.smoothed, cfg.size_tolerance, least, SURPLUS_SIZE_COST)
        # a named mask partly still, partly moving holds several parts (segment_nested)
        dets, seen, names = split_by_motion(motion, i, (dets, seen, names), rename, *scene)
        apart = apart_from_mechanism([d.mask for d in dets], best.depth, K, motion.k)   # segment_contact
        # a name held only by a look-alike apart from the mechanism, or a shape unnamed: a detection joined to the
        # mechanism in 3-D that no part covers (segment_near)
        (dets, seen, names), apart = near_mechanism((dets, seen, names), apart, best.found, wanted,
                                                    lambda ms: motion.shares(i, ms), rename, rec.shapes, best.depth,
                                                    K, best.smoothed, motion.k, cfg.size_tolerance, least,
                                                    SURPLUS_SIZE_COST)
        # a name on a still piece joined to nothing that moves: a moving region of its size (segment_loose)
        again = loose_to_moving(motion, i, (dets, seen, names), rename, rec.shapes, best.depth, K, best.smoothed,
                                cfg.size_tolerance, least, SURPLUS_SIZE_COST)
        if again[0] is not dets:
            dets, seen, names = again
            apart = apart_from_mechanism([d.mask for d in dets], best.depth, K, motion.k)
        if set(library_spheres(rec.shapes)) & set(names):  # a sphere's name on a still look-alike (segment_inside)
            (dets, seen, names), apart = drop_apart_repeats((dets, seen, names), apart, library_spheres(rec.shapes))
            cues = DepthMotion.cues(motion, i, [d.mask for d in dets])   # the full cues: ``attached`` measured
            dets, seen, names = sphere_inside(cues, (dets, seen, names), rename, *scene, apart)
    return dets, seen, names


def _full(full: list[DepthMotion], rec: Recording, s: int, samples: int) -> DepthMotion:
    """The full motion cue's sampled depth, ``full[0]``, made on first use."""
    if not full:
        full.append(DepthMotion(rec, s, samples))
    return full[0]


def run(cfg: SegmentConfig, rec: Recording, out_dir: Path) -> "Segmentation":
    """Segment the best of ``cfg.frames`` (ranked without motion, ``segment_frames``), with the
    motion cue in that frame where ``cfg.motion_samples`` asks or a library shape is left unnamed
    (``segment_missing``), then ``segment_nested``; returns the artifact (the runner saves it)."""
    from vid2sim.pipeline.artifacts import Segmentation
    from vid2sim.datasets.atomic import write_bytes
    from vid2sim.pipeline.actuators import explain_actuators

    rec = explain_actuators(rec)   # known actuators' pixels are holes, their shapes no part
    shapes_path = Path(rec.path) / "shapes.json"
    if not rec.shapes:
        raise RecordingError(shapes_path, "shapes.json is missing; segment needs the library of part shapes")
    if not rec.has_depth and cfg.motion.by_motion == "auto":
        return _by_motion(cfg, rec, out_dir)
    frames = sorted({min(max(0, int(f)), rec.num_frames - 1) for f in cfg.frames}) or [0]
    s = work_scale(cfg, rec, frames[0])
    candidates, best = segment_frames(cfg, rec, frames, s)
    metric = best.metric
    # a pushed mechanism rests until its known actuator reaches it: stillness says nothing of its parts
    pushed = getattr(rec, "actuation", None) is not None
    motion = None
    samples = cfg.motion_samples if cfg.motion_samples > 1 else cfg.still_samples
    if samples > 1 and metric and not pushed:
        motion = (DepthMotion if cfg.motion_samples > 1 else StillMotion)(rec, s, samples)
    order = findable(rec.shapes, shapes_path)   # shapes.json's order, for the error
    full: list[DepthMotion] = []   # the full motion cue, sampled once (segment_missing)

    def finish(c: Candidate) -> tuple[list[Detection], list[tuple[float, float]], list[str]]:
        return _finish(cfg, rec, c, candidates, s, motion, set(order), full)

    dets, seen, names = finish(best)
    if motion is not None:  # a still name apart in depth from the moving parts (segment_contact)
        dets, seen, names = drop_apart(motion, best, (dets, seen, names), finish, set(order), rec.shapes,
                                       downsample_intrinsics(rec.camera.K, s), cfg.size_tolerance, SURPLUS_SIZE_COST)
    if metric and rec.has_depth:  # a library shape still unnamed: the next candidate frames (segment_fallback)
        best, (dets, seen, names) = fall_back(candidates, best, (dets, seen, names), finish,
                                              lambda c: c.rank, set(order), rec.shapes, cfg.size_tolerance,
                                              SURPLUS_SIZE_COST, cfg.fallback)
    i, nimg = best.frame, best.nimg
    if not dets:
        raise RecordingError(shapes_path, f"frame {i}: segment ({cfg.method}) found no part that matches a library "
                                          f"shape in frames {frames} (score threshold {cfg.score_threshold})")
    _check_missing(cfg, rec.shapes, names, frames, shapes_path, order)
    h, w = rec.camera.height, rec.camera.width
    masks = fit_masks = np.stack([upsample_mask(d.mask, s, (h, w)) for d in dets]).astype(np.uint8)
    if cfg.refine_boundaries and rec.has_color and rec.has_depth:   # segment_refine; track fits fit_masks
        masks = refine_boundaries(masks, names, rec.color(i), rec.depth(i), hidden_pixels(rec, i),
                                  cfg.refine_with_depth, *part_depths(rec, masks, names, i))
    scores = np.array([d.score for d in dets], np.float64)
    for d, n, e in zip(dets, names, seen):
        log.info("segment: %s (%s, score %.2f, seen %.3f x %.3f m)", n, CLASSES[d.label], d.score, *e)
    if cfg.overlay:
        img = overlay(upsample_mask(nimg, s, (h, w)), rec.color(i) if rec.has_color else None, masks, names, scores)
        ok, png = cv2.imencode(".png", cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        if ok:
            write_bytes(Path(out_dir) / OVERLAY_FILE, png.tobytes())
    return Segmentation(masks, int(i), list(names), scores, None if np.array_equal(masks, fit_masks) else fit_masks)


def _by_motion(cfg: SegmentConfig, rec: Recording, out_dir: Path) -> "Segmentation":
    """An RGB-only recording's parts from its rigid motion (``segment_motion``), with the overlay."""
    return segment_by_motion(cfg.motion, rec, cfg.min_pixels, cfg.missing,
                             Path(out_dir) / OVERLAY_FILE if cfg.overlay else None)
