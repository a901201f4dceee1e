"""Motion as a cue: the parts of an RGB-only recording are the regions that move rigidly.

Candidate parts are colour regions: k-means clusters (``colours``, in Lab) of a frame split
into connected regions (a flat-coloured part shows motion only at its edges, so per-pixel
flow alone would leave its inside static). Up to ``pairs`` evenly spaced start frames f0 in
``motion_first..motion_last`` are looked at. For each, dense optical flow (Farneback,
``cv2.calcOpticalFlowFarneback``) from f0 to f0 + ``motion_step`` frames, on grey images
normalised to zero mean and unit spread (an exposure change is no motion), at a working
resolution whose longer side is at most ``max_side`` px; a region's motion is the better
(lower grey residual) of its flow's RANSAC similarity (``cv2.estimateAffinePartial2D``) and
that refined by ECC (``cv2.findTransformECC``, Euclidean). A region *moves* when its box's
corners move more than ``min_motion_px`` and warping by its motion explains the frame
difference (the mean grey residual over it drops by more than 2 levels, to under 70 %);
a region that does not is tried again over 3 x ``motion_step`` frames (a slow part). What
never moves relative to the camera is background. Moving regions that touch, or lie a thin
occluder apart (5 px), and move alike per frame (within 2 x ``rigid_px``) are one rigid
group, if they also move alike (within 2 x ``rigid_px`` per step) from f0 to ``FAR_STEPS``
steps before and after it and to the window's ends, wherever both are explained there (a
hand that came down onto a part and then moves with it is not the part); a group drops its
connected pieces under a quarter of ``min_pixels``.

The start frame kept is the one whose moving regions overlap most what differs between
the first and the last frame looked at (a part moved for good, a closed lid, not a hand
that came and went) or between the start frame and the window's still scene (the per-pixel
median of ``STILL_FRAMES`` frames: a drawer pulled out and pushed back), then the one where
most moves. Its groups are the parts, named after
the library shapes (one group per shape, Hungarian) by proportions alone (an RGB-only
recording has no metric size: the long-to-short ratio of the group's rotated bounding
rectangle against a shape's face proportions), preferring large groups and groups inside
that difference and groups that do not touch the image border (an arm reaches in from
outside the view); groups left over (a hand, an arm) are clutter, logged.

A recording where no region of ``min_pixels`` px moves is an error saying so.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import cv2
import numpy as np
from scipy.optimize import linear_sum_assignment

from vid2sim.datasets.recording import Recording
from vid2sim.datasets.shapes import Shape

if TYPE_CHECKING:
    from vid2sim.pipeline.artifacts import Segmentation

log = logging.getLogger(__name__)
STILL_FRAMES = 31  # frames whose per-pixel median is the window's still scene
BORDER_COST = 1.0  # naming cost of a group touching the image border (an arm reaching into the view)
FAR_STEPS = 3  # motion_step multiples before and after the chosen frame at which grouped regions must still agree


@dataclass(frozen=True)
class SegmentMotion:
    """Settings of segmenting an RGB-only recording by its motion."""

    # "auto": RGB-only recordings are segmented by their motion (depth recordings never are);
    # "off": RGB-only recordings go through the pseudo-depth segmenter instead
    by_motion: str = "auto"
    motion_first: int = 0  # first frame looked at for motion
    motion_last: int = 90  # last frame looked at for motion (clipped to the recording)
    motion_step: int = 3  # frames between the two images of a flow pair, >= 1
    min_motion_px: float = 1.0  # px (full resolution) a pixel must move within a pair to count as moving
    max_side: int = 320  # px: flow is computed with the image's longer side scaled down to this
    rigid_px: float = 1.0  # px (full resolution): RANSAC inlier distance of a rigid group's flow
    pairs: int = 8  # flow pairs looked at (evenly spaced); the one where the most moves is segmented
    colours: int = 8  # k-means colour clusters whose connected regions are the candidate parts

    def __post_init__(self):
        if self.by_motion not in ("auto", "off"):
            raise ValueError(f"segment.by_motion must be auto or off, got {self.by_motion!r}")
        if self.motion_step < 1 or self.motion_last < self.motion_first or self.motion_first < 0:
            raise ValueError(f"segment: motion frames {self.motion_first}-{self.motion_last} step "
                             f"{self.motion_step}: need 0 <= first <= last and step >= 1")


@dataclass
class MotionCue:
    """moving: (H, W) bool, the groups' union; groups: (G, H, W) bool rigid groups at ``frame``;
    transforms: (G, 2, 3) their similarity (frame -> frame + its step, full-resolution px); flow:
    (G,) median flow magnitude px of each group; frames: (first, last) looked at."""

    moving: np.ndarray
    groups: np.ndarray
    transforms: np.ndarray
    flow: np.ndarray
    frame: int
    frames: tuple[int, int]
    displaced: np.ndarray  # (H, W) bool: looks different at the last frame than at the first, or at ``frame``
    # than the window's still scene (all True: nowhere)


def _grey(rec: Recording, i: int, scale: float) -> np.ndarray:
    g = cv2.cvtColor(rec.color(i), cv2.COLOR_RGB2GRAY).astype(np.float32)
    if scale != 1.0:
        g = cv2.resize(g, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
    return np.clip((g - g.mean()) / max(float(g.std()), 1e-3) * 40.0 + 128.0, 0, 255).astype(np.uint8)


def _flow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return cv2.calcOpticalFlowFarneback(a, b, None, 0.5, 4, 15, 3, 5, 1.2, 0)


def _clean(mask: np.ndarray, k: int) -> np.ndarray:
    m = cv2.morphologyEx(mask.astype(np.uint8), cv2.MORPH_OPEN, np.ones((k, k), np.uint8))
    return cv2.morphologyEx(m, cv2.MORPH_CLOSE, np.ones((k, k), np.uint8)) > 0


def _big_regions(mask: np.ndarray, min_px: int) -> np.ndarray:
    """``mask`` without its connected regions under ``min_px`` px (a group seen past an occluder
    keeps both sides)."""
    n, lab, stats, _ = cv2.connectedComponentsWithStats(mask.astype(np.uint8), connectivity=8)
    return np.isin(lab, [j for j in range(1, n) if stats[j, cv2.CC_STAT_AREA] >= min_px])


def _regions(rgb: np.ndarray, k: int, min_px: int, seed: int) -> tuple[np.ndarray, int]:
    """(H, W) int region labels (-1: none) of an RGB image: k-means colour clusters (Lab) split
    into connected regions, those under ``min_px`` px dropped; and the number of labels."""
    lab = cv2.cvtColor(cv2.GaussianBlur(rgb, (5, 5), 0), cv2.COLOR_RGB2LAB).reshape(-1, 3).astype(np.float32)
    cv2.setRNGSeed(seed)
    crit = (cv2.TERM_CRITERIA_EPS + cv2.TERM_CRITERIA_MAX_ITER, 20, 1.0)
    _, cl, _ = cv2.kmeans(lab, k, None, crit, 2, cv2.KMEANS_PP_CENTERS)
    cl = cl.reshape(rgb.shape[:2])
    out = np.full(cl.shape, -1)
    n = 0
    for c in range(k):
        m, lab_c, stats, _ = cv2.connectedComponentsWithStats((cl == c).astype(np.uint8), connectivity=4)
        for j in range(1, m):
            if stats[j, cv2.CC_STAT_AREA] >= min_px:
                out[lab_c == j] = n
                n += 1
    return out, n


def _residual(g0: np.ndarray, g1: np.ndarray, M: np.ndarray, grown: np.ndarray) -> float:
    """Mean |I0(x) - I1(M x)| over ``grown``."""
    moved = cv2.warpAffine(g1, M, g1.shape[::-1], flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                           borderMode=cv2.BORDER_REPLICATE)
    return float(np.abs(g0[grown].astype(float) - moved[grown]).mean())


def _ecc_region(g0: np.ndarray, g1: np.ndarray, grown: np.ndarray, M: np.ndarray) -> np.ndarray | None:
    """(2, 3) rigid motion of the region by ECC (cv2.findTransformECC, Euclidean) from ``M``, on
    the box around it (the warp's origin at its corner); None where it does not converge."""
    ys, xs = np.nonzero(grown)
    H, W = grown.shape
    x0, y0 = max(xs.min() - 12, 0), max(ys.min() - 12, 0)
    x1, y1 = min(xs.max() + 13, W), min(ys.max() + 13, H)
    O = np.array([[1.0, 0, x0], [0, 1, y0], [0, 0, 1]])
    Mc = (np.linalg.inv(O) @ np.vstack([M, [0, 0, 1]]) @ O)[:2].astype(np.float32)
    try:
        _, Mc = cv2.findTransformECC(g0[y0:y1, x0:x1].astype(np.float32), g1[y0:y1, x0:x1].astype(np.float32), Mc,
                                     cv2.MOTION_EUCLIDEAN, (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, 50, 1e-4),
                                     grown[y0:y1, x0:x1].astype(np.uint8), 5)
    except cv2.error:
        return None
    return (O @ np.vstack([Mc, [0, 0, 1]]) @ np.linalg.inv(O))[:2]


def _region_motion(region: np.ndarray, flow: np.ndarray, g0: np.ndarray, g1: np.ndarray, cfg: SegmentMotion,
                   s: float) -> tuple[np.ndarray | None, float, float, float]:
    """(similarity (2, 3) or None, px its bounding box's corners move at most, mean |I0 - I1| unmoved,
    mean |I0 - I1(M x)|) of one region (working resolution), the grey residuals over the region
    grown by 2 px. M is the better of the RANSAC similarity of the region's flow and its ECC
    refinement; a region whose grey levels do not change (by 2 levels on average) is not looked at."""
    grown = cv2.dilate(region.astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
    still = float(np.abs(g0[grown].astype(float) - g1[grown]).mean())
    if still < 2.0:
        return None, 0.0, still, still
    ys, xs = np.nonzero(region)
    pick = np.random.default_rng(0).choice(len(xs), min(len(xs), 1500), replace=False)
    src = np.stack([xs[pick], ys[pick]], 1).astype(np.float32)
    M, _ = cv2.estimateAffinePartial2D(src, src + flow[ys[pick], xs[pick]], method=cv2.RANSAC,
                                       ransacReprojThreshold=cfg.rigid_px * s, maxIters=500)
    if M is None:
        return None, 0.0, still, still
    best = (_residual(g0, g1, M, grown), M)
    Me = _ecc_region(g0, g1, grown, M)
    if Me is not None:
        best = min(best, (_residual(g0, g1, Me, grown), Me), key=lambda r: r[0])
    moved, M = best
    c = np.array([[xs.min(), ys.min()], [xs.max(), ys.min()], [xs.min(), ys.max()], [xs.max(), ys.max()]], float)
    speed = float(np.linalg.norm(c @ M[:, :2].T + M[:, 2] - c, axis=1).max())
    return M, speed, still, moved


def _agree(a: tuple, b: tuple, region: np.ndarray, tol: float) -> bool:
    """Whether two moving regions' similarities (``_moving_regions`` entries, over their own frame
    steps) move the corners of ``region``'s bounding box alike: per frame, within ``tol`` px over
    the shorter step."""
    ys, xs = np.nonzero(region)
    c = np.array([[xs.min(), ys.min()], [xs.max(), ys.min()], [xs.min(), ys.max()], [xs.max(), ys.max()]], float)
    da = (c @ a[1][:, :2].T + a[1][:, 2] - c) / a[3]
    db = (c @ b[1][:, :2].T + b[1][:, 2] - c) / b[3]
    return bool(np.abs(da - db).max() < tol / min(a[3], b[3]))


def _far_motions(rec: Recording, f0: int, labels: np.ndarray, moving: list[tuple], s: float, cfg: SegmentMotion,
                 window: tuple[int, int]) -> list[dict[int, np.ndarray]]:
    """Per ``moving`` region (``_moving_regions`` entries), its similarity (2, 3), working-resolution
    px, from f0 to f0 + o, keyed by o, for o = -+``FAR_STEPS`` x ``motion_step`` frames and the
    offsets to ``window``'s first and last frame (those within it, at least a step away): the
    identity where the region's grey levels do not change, else the rigid motion that explains it
    (the test of ``_moving_regions``); an offset is missing where none does."""
    out: list[dict[int, np.ndarray]] = [{} for _ in moving]
    step = cfg.motion_step
    offsets = [o for o in sorted({-FAR_STEPS * step, FAR_STEPS * step, window[0] - f0, window[1] - f0})
               if window[0] <= f0 + o <= window[1] and abs(o) >= step]
    grey = {f: _grey(rec, f, s) for f in sorted({f0} | {f0 + o for o in offsets})}   # in frame order: a video decodes forward
    g0 = grey[f0]
    for o in offsets:
        g1 = grey[f0 + o]
        flow = _flow(g0, g1)
        for k, m in enumerate(moving):
            M, speed, still, moved = _region_motion(labels == m[0], flow, g0, g1, cfg, s)
            if M is None and still < 2.0:
                out[k][o] = np.eye(2, 3)
            elif M is not None and still - moved > 2.0 and moved < 0.7 * still:
                out[k][o] = M
    return out


def _agree_far(a: dict[int, np.ndarray], b: dict[int, np.ndarray], region: np.ndarray, tol: float,
               step: int) -> bool:
    """Whether two regions' ``_far_motions`` move the corners of ``region``'s bounding box alike,
    within ``tol`` px per ``step`` frames, at every offset where both have one."""
    ys, xs = np.nonzero(region)
    c = np.array([[xs.min(), ys.min()], [xs.max(), ys.min()], [xs.min(), ys.max()], [xs.max(), ys.max()]], float)
    for o in a.keys() & b.keys():
        d = (c @ a[o][:, :2].T + a[o][:, 2]) - (c @ b[o][:, :2].T + b[o][:, 2])
        if np.abs(d).max() >= tol * abs(o) / step:
            return False
    return True


def _still_scene(rec: Recording, frames: list[int], s: float) -> np.ndarray:
    """(h, w) int16: the per-pixel median of up to ``STILL_FRAMES`` evenly spaced normalised grey
    images (``_grey``, working resolution) of ``frames``: the scene as it looks most of the time,
    without what passes through it."""
    pick = [frames[int(round(i))] for i in np.linspace(0, len(frames) - 1, min(len(frames), STILL_FRAMES))]
    return np.median(np.stack([_grey(rec, i, s) for i in pick]), 0).astype(np.int16)


def _pairs(frames: list[int], step: int, most: int) -> list[tuple[int, int]]:
    """Up to ``most`` evenly spaced pairs (f, f + step) within ``frames[0]..frames[-1]``."""
    starts = [f for f in frames if f + step <= frames[-1]]
    if len(starts) > most:
        starts = [starts[int(round(i))] for i in np.linspace(0, len(starts) - 1, most)]
    return [(f, f + step) for f in starts]


def _moving_regions(rec: Recording, f0: int, steps: list[int], s: float, cfg: SegmentMotion, min_px: int,
                    seed: int) -> tuple[np.ndarray, list[tuple[int, np.ndarray, float, int]], np.ndarray]:
    """(region labels at f0, [(region, similarity (2, 3), px its box's corners move, frames)] of the
    regions that move between f0 and f0 + frames (the first of ``steps`` in which they do: a slow
    part shows over the longer step), the first step's flow (H, W, 2)), at the working resolution."""
    g0 = _grey(rec, f0, s)
    rgb = rec.color(f0)
    if s != 1.0:
        rgb = cv2.resize(rgb, g0.shape[::-1], interpolation=cv2.INTER_AREA)
    labels, n = _regions(rgb, cfg.colours, max(8, min_px // 8), seed)
    moving, left, first_flow = [], list(range(n)), None
    for step in steps:
        g1 = _grey(rec, f0 + step, s)
        flow = _flow(g0, g1)
        first_flow = flow if first_flow is None else first_flow
        still_left = []
        for r in left:
            M, speed, still, moved = _region_motion(labels == r, flow, g0, g1, cfg, s)
            if M is not None and speed > cfg.min_motion_px * s and still - moved > 2.0 and moved < 0.7 * still:
                moving.append((r, M, speed, step))
            else:
                still_left.append(r)
        left = still_left
    return labels, moving, first_flow


def motion_cue(rec: Recording, cfg: SegmentMotion, min_pixels: int, seed: int = 0) -> MotionCue:
    """The moving regions and rigid groups of frames ``cfg.motion_first..motion_last`` (module
    docstring); raises ``ValueError("nothing moves in frames A-B ...")`` when no region of
    ``min_pixels`` px moves."""
    a, b = min(cfg.motion_first, rec.num_frames - 1), min(cfg.motion_last, rec.num_frames - 1)
    frames = list(range(a, b + 1, cfg.motion_step))
    if frames[-1] != b:
        frames.append(b)
    H, W = rec.camera.height, rec.camera.width
    s = min(1.0, cfg.max_side / max(H, W))
    min_px = max(8, int(min_pixels * s * s))
    k = 3 if s * max(H, W) <= 400 else 5
    nothing = (f"nothing moves in frames {a}-{b} (no region of {min_pixels} px moved more than "
               f"{cfg.min_motion_px:g} px between frames {cfg.motion_step} apart)")
    if len(frames) < 2 or frames[-1] - frames[0] < cfg.motion_step:
        raise ValueError(nothing)
    # what looks different at the end than at the start (a part moved for good, a closed lid, not a
    # hand that came and went), or at the start frame than the window's still scene (a drawer
    # pulled out and pushed back again)
    ends = _clean(np.abs(_grey(rec, a, s).astype(np.int16) - _grey(rec, b, s)) > 25, k)
    still = _still_scene(rec, frames, s)
    best = (0, 0, frames[0], None, [], None, ends)
    for f0, _ in _pairs(frames, cfg.motion_step, cfg.pairs):
        steps = [st for st in (cfg.motion_step, 3 * cfg.motion_step) if f0 + st <= frames[-1]]
        # f0 read before the frames after it: a video decodes forward only
        displaced = ends | _clean(np.abs(_grey(rec, f0, s).astype(np.int16) - still) > 25, k)
        labels, moving, flow = _moving_regions(rec, f0, steps, s, cfg, min_px, seed)
        if displaced.sum() < min_px:
            displaced[:] = True
        region = np.isin(labels, [m[0] for m in moving]) if moving else np.zeros_like(displaced)
        if (int((region & displaced).sum()), int(region.sum())) > best[:2]:
            best = (int((region & displaced).sum()), int(region.sum()), f0, labels, moving, flow, displaced)
    _, area, f0, labels, moving, flow, displaced = best
    if area < min_px:
        raise ValueError(nothing)
    far = _far_motions(rec, f0, labels, moving, s, cfg, (a, b))
    tol = 2 * cfg.rigid_px * s
    parent = list(range(len(moving)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i
    for i in range(len(moving)):
        # touching, or a thin occluder (a rod in front of a box) apart
        near = cv2.dilate((labels == moving[i][0]).astype(np.uint8), np.ones((11, 11), np.uint8)) > 0
        for j in range(i + 1, len(moving)):
            rj = labels == moving[j][0]
            both = rj | (labels == moving[i][0])
            if ((near & rj).any() and _agree(moving[i], moving[j], both, tol)
                    and _agree_far(far[i], far[j], both, tol, cfg.motion_step)):
                parent[root(j)] = root(i)
    groups, transforms, speeds = [], [], []
    for g in sorted({root(i) for i in range(len(moving))}):
        members = [i for i in range(len(moving)) if root(i) == g]
        small = _clean(np.isin(labels, [moving[i][0] for i in members]), k)
        small = _big_regions(small, max(8, min_px // 4))
        if small.sum() < min_px:
            continue
        Mf = moving[max(members, key=lambda i: (labels == moving[i][0]).sum())][1].copy()
        Mf[:, 2] /= s
        groups.append(cv2.resize(small.astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST) > 0)
        transforms.append(Mf)
        speeds.append(float(np.median(np.linalg.norm(flow[small], axis=1))) / s)
    if not groups:
        raise ValueError(nothing)
    order = np.argsort([-g.sum() for g in groups])
    displaced = cv2.resize(displaced.astype(np.uint8), (W, H), interpolation=cv2.INTER_NEAREST) > 0
    return MotionCue(np.any(groups, axis=0), np.stack([groups[o] for o in order]),
                     np.stack([transforms[o] for o in order]), np.array([speeds[o] for o in order]), int(f0), (a, b),
                     displaced)


def shape_ratios(shape: Shape) -> list[float]:
    """Long-to-short ratios (>= 1) of the outlines a library shape can show, face-on or side-on."""
    if shape.type == "box":
        x, y, z = shape.size
        return [max(p, q) / max(min(p, q), 1e-9) for p, q in ((x, y), (y, z), (x, z))]
    if shape.type == "sphere":
        return [1.0]
    if shape.type in ("capsule", "cylinder"):
        d = 2 * shape.radius
        L = shape.length + (d if shape.type == "capsule" else 0.0)
        return [max(L, d) / d, 1.0]
    return []


def group_ratio(mask: np.ndarray) -> float:
    """Long-to-short ratio of ``mask``'s rotated bounding rectangle (cv2.minAreaRect)."""
    ys, xs = np.nonzero(mask)
    (_, _), (w, h), _ = cv2.minAreaRect(np.stack([xs, ys], 1).astype(np.float32))
    return max(w, h) / max(min(w, h), 1.0)


def _touches_border(g: np.ndarray) -> bool:
    """Whether mask ``g`` (H, W) has a pixel in the image's outermost rows or columns."""
    return bool(g[0].any() or g[-1].any() or g[:, 0].any() or g[:, -1].any())


def name_groups(cue: MotionCue, shapes: dict[str, Shape]) -> list[str | None]:
    """Library shape name of each rigid group (one group per shape), None = clutter. Cost: the
    log-ratio of the group's proportions to the nearest of the shape's, plus a quarter of the
    log-ratio of the largest group's area to the group's (small groups are more often slivers),
    plus the share of the group outside ``cue.displaced`` (a hand comes and goes; a part stays moved),
    plus ``BORDER_COST`` for a group touching the image border (the arm moving a part reaches in
    from outside the view)."""
    names = [n for n, s in shapes.items() if shape_ratios(s)]
    largest = max(int(g.sum()) for g in cue.groups)
    cost = np.array([[min(abs(math.log(group_ratio(g) / r)) for r in shape_ratios(shapes[n]))
                      + 0.25 * math.log(largest / max(int(g.sum()), 1))
                      + 1.0 - float((g & cue.displaced).sum()) / max(int(g.sum()), 1)
                      + BORDER_COST * _touches_border(g) for n in names]
                     for g in cue.groups]).reshape(len(cue.groups), len(names))
    out: list[str | None] = [None] * len(cue.groups)
    if cost.size:
        for gi, ni in zip(*linear_sum_assignment(cost)):
            out[gi] = names[ni]
    return out


def motion_overlay(rgb: np.ndarray, cue: MotionCue, names: list[str | None]) -> np.ndarray:
    """(H, W, 3) uint8: the named groups filled in colour and labelled, clutter groups outlined in grey."""
    img = rgb.astype(np.float32)
    colors = [(230, 50, 50), (50, 130, 230), (240, 200, 30), (80, 200, 80), (180, 80, 200), (250, 130, 30)]
    named = [k for k, n in enumerate(names) if n is not None]
    for j, k in enumerate(named):
        g = cue.groups[k]
        img[g] = 0.45 * img[g] + 0.55 * np.array(colors[j % len(colors)], np.float32)
    img = np.clip(img, 0, 255).astype(np.uint8)
    for k, n in enumerate(names):
        cnts, _ = cv2.findContours(cue.groups[k].astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cv2.drawContours(img, cnts, -1, (255, 255, 255) if n else (150, 150, 150), 1)
        ys, xs = np.nonzero(cue.groups[k])
        if n:
            cv2.putText(img, n, (int(xs.mean()) - 15, int(ys.mean())), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1,
                        cv2.LINE_AA)
    cv2.putText(img, f"frame {cue.frame}: moving in {cue.frames[0]}-{cue.frames[1]}", (5, 15),
                cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)
    return img


def segment_by_motion(cfg: SegmentMotion, rec: Recording, min_pixels: int, missing: str,
                      overlay: Path | None = None) -> Segmentation:
    """The Segmentation of an RGB-only recording from its rigid motion groups (module docstring);
    ``missing`` "error": a library shape no moving group took is a ``StageError``. Writes
    ``motion_overlay`` as a PNG to ``overlay`` when given."""
    from vid2sim.datasets.atomic import write_bytes
    from vid2sim.pipeline.artifacts import Segmentation
    from vid2sim.pipeline.run import StageError

    shapes_path = Path(rec.path) / "shapes.json"
    try:
        cue = motion_cue(rec, cfg, min_pixels)
    except ValueError as e:
        raise StageError(f"segment: {rec.path}: {e}") from None
    names = name_groups(cue, rec.shapes)
    a, b = cue.frames
    log.info("segment: %.1f %% of the image moves in frames %d-%d; %d rigid group(s) at frame %d",
             100 * cue.moving.mean(), a, b, len(names), cue.frame)
    for g, n, v in zip(cue.groups, names, cue.flow):
        log.info("segment: moving group of %d px (ratio %.2f, %.1f px per %d frames) -> %s", g.sum(),
                 group_ratio(g), v, cfg.motion_step, n or "clutter (no library shape left for it)")
    findable = [n for n, s in rec.shapes.items() if shape_ratios(s)]
    absent = [n for n in findable if n not in names]
    if absent:
        msg = f"{', '.join(absent)}: no rigidly moving region in frames {a}-{b} for it (static parts are background)"
        if missing == "error":
            raise StageError(f"segment: {shapes_path}: {msg}")
        log.info("segment: %s", msg)
    if overlay is not None:
        ok, png = cv2.imencode(".png", cv2.cvtColor(motion_overlay(rec.color(cue.frame), cue, names), cv2.COLOR_RGB2BGR))
        if ok:
            write_bytes(overlay, png.tobytes())
    keep = [k for k, n in enumerate(names) if n is not None]
    masks = cue.groups[keep].astype(np.uint8)
    scores = np.ones(len(keep))
    return Segmentation(masks, cue.frame, [names[k] for k in keep], scores)


__all__ = ["MotionCue", "SegmentMotion", "motion_cue", "motion_overlay", "name_groups", "segment_by_motion"]
