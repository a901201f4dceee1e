"""Segment on depth recordings: which detections move over the clip, a cue for naming them.

A table's leg, a shelf's post or a distractor can have a library part's class and size; the
part itself moves (or is welded to one that does), the look-alike does not. ``DepthMotion``
samples ``samples`` depth frames evenly over the whole recording (at the resolution segment
works at). A pixel of the candidate frame i has *changed* in sampled frame j when frame j
shows no reading within ``change_threshold`` of it in the pixel's 3 x 3 neighbourhood
(``changed_pixels``: the part moved away, leaving empty space or another surface; a still
surface's dropouts and flying pixels at its edges leave a reading of it beside them). The
threshold is k z^2, k measured from the recording's own frame-to-frame depth changes
(``noise_k``). ``motion_shares`` gives each detection the median over the sampled frames of
the share of its pixels that changed (the narrow cue, ``StillMotion``, with
``DepthMotion.shares``: where its changes hardly ever show a farther surface, only those that
show no nearer one: a still surface a moving part passes in front of has not moved); the
*moving regions* are the pixels changed in at least ``REGION_SHARE`` of the sampled frames.

``Motion`` holds the cues segment's naming uses (``segment.match_shapes``), only where a
detection that fits some library shape moves (share at least ``MOVING_SHARE``):
- a still detection costs ``STILL_COST`` more, so a moving look-alike of the same class and
  size takes the library name from it, and it repeats no library name (a surplus still
  detection of a part's size is clutter);
- a still detection with no moving region on or within ``ATTACH_M`` of it is background: a
  fixed part of a moving mechanism (a cabinet's carcass, a base welded to the world) holds
  or touches a part that moves;
- ``moving_proposals``: a moving region no named detection covers, and not along one's rim,
  becomes a detection of a library shape no detection names, at most one per such shape (a
  thin pole the network never proposes); only a region whose changes show a farther surface
  more often than a nearer one (``moves_away``: not background a part sweeps over), and not
  one farther than ``TOUCH_M`` in 3-D from the named parts and the proposals that touch them
  (a moving distractor).
Where nothing that fits a library shape moves (a recording where nothing moves, or only a
distractor), every detection is named as without motion.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import cv2
import numpy as np
from scipy.optimize import linear_sum_assignment

from vid2sim.datasets.recording import Recording, RecordingError
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import downsample_depth
from vid2sim.pipeline.segment_size import measure_extents, size_cost

log = logging.getLogger(__name__)

MOVING_SHARE = 0.15  # in [0, 1]: a detection whose pixels changed in at least this median share of sampled frames moves
CONTEST_MARGIN = 0.25  # naming cost: shapes a moving detection fits this close to its best are alike to it (contested)
STILL_COST = 3.0  # naming cost (segment._match_cost units) added to a still detection where a nameable one moves
NOISE_K = 0.03  # 1/m: the largest k of a change threshold k z^2 taken from a recording (noise_k)
STEPS = 2.0  # noise_k: the threshold in 75th percentiles of a still scene's depth change
MIN_CHANGE = 0.02  # m: the smallest depth change that counts as motion
ATTACH_M = 0.2  # m: a still detection this close (in the image, at its depth) to a moving region may be a fixed part
REGION_SHARE = 0.5  # in [0, 1]: a pixel changed in at least this share of the sampled frames is in a moving region
PROPOSAL_SCORE = 0.2  # score of a moving region no detection covers, proposed as a part (moving_proposals)
MIN_REGION = 10  # px (at the working resolution): the smallest moving region a still part may be attached to
RIM_PX = 3  # px (at the working resolution): moving pixels this close to a named detection may be its rim
CARVE_TRIES = 300  # RANSAC pairs per rod (carve_rods)
CARVE_PAD_PX = 1.0  # px: a carved rod holds the region's pixels this far beyond its radius in the image
RIM_SHARE = 0.5  # in [0, 1]: a moving region with more of its pixels that close is a named part's rim, no proposal
TOUCH_M = 0.1  # m: a proposed region must come this close in 3-D to a named part (or a proposal that does)
AWAY_SHARE = 0.1  # in [0, 1]: least share of a moving region's changes that show a farther surface (moves_away, shares)


def change_threshold(z: np.ndarray, k: float = 0.0) -> np.ndarray:
    """Depth change (m) that counts as motion at depth z (m): the larger of ``MIN_CHANGE`` and
    k z^2 (``noise_k``)."""
    return np.maximum(MIN_CHANGE, k * z * z)


def noise_k(depths: list[np.ndarray]) -> float:
    """k (1/m) such that a still surface's depth changes between images of one camera (m, 0 =
    none) by more than k z^2 seldom: ``STEPS`` times the 75th percentile of |difference| / z^2
    over the pixels with a reading in the first and another image (most of a scene holds still;
    a RealSense-like sensor's readings differ by 0 or one disparity step, about 0.0074 z^2 at
    320 x 240, and Gaussian noise of sigma = c z^2 gives 1.63 c), at most ``NOISE_K``; 0 (only
    ``MIN_CHANGE``) with fewer than two images or exact depth."""
    if len(depths) < 2:
        return 0.0
    d0 = depths[0]
    r = [np.abs(d - d0)[(d > 0) & (d0 > 0)] / d0[(d > 0) & (d0 > 0)] ** 2 for d in depths[1:]]
    r = np.concatenate(r)
    return float(min(STEPS * np.percentile(r, 75), NOISE_K)) if len(r) else 0.0


@dataclass(frozen=True)
class Motion:
    """Motion cues of n detections of one frame: shares (n,) ``motion_shares`` (NaN: unknown);
    attached (n,) bool, whether a moving region of the frame (``DepthMotion.changed``) lies on
    the detection or within ``ATTACH_M`` of it."""

    shares: np.ndarray
    attached: np.ndarray
    # True (``StillMotion``): a still detection costs more only for the library shapes the moving
    # detections contest (``contested``: one each, of their class), so a mechanism's fixed part (a
    # cabinet's carcass) keeps its name where its moving parts fit other shapes
    narrow: bool = False

    def still(self, candidates: np.ndarray | None = None) -> np.ndarray | None:
        """(n,) bool: the detections that are still (share under ``MOVING_SHARE``) where one of
        ``candidates`` ((n,) bool, default all: those that may be library parts) moves; None
        where motion says nothing (no shares, or no candidate moving: a recording where nothing
        moves, or only a distractor)."""
        m = np.nan_to_num(np.asarray(self.shares, float), nan=-1.0)
        c = np.ones(len(m), bool) if candidates is None else np.asarray(candidates, bool)
        if not len(m) or not (c & (m >= MOVING_SHARE)).any():
            return None
        return (m >= 0) & (m < MOVING_SHARE)

    def loose(self, candidates: np.ndarray | None = None) -> np.ndarray | None:
        """(n,) bool: still detections (``still``) with no moving region on or within ``ATTACH_M``
        of them: no part of a mechanism that moves (a table's leg); None as ``still``."""
        st = self.still(candidates)
        return None if st is None else st & ~self.attached


def contested(cost: np.ndarray, motion: Motion, alike: np.ndarray | None = None) -> np.ndarray:
    """(m,) 1.0 for each of m library shapes a still detection pays ``STILL_COST`` for
    (``cost`` (n, m) the n detections' naming costs, inf: not that shape): every one, or with
    ``motion.narrow`` one per moving detection (share at least ``MOVING_SHARE``), of the shapes
    ``alike`` ((n, m) bool, None: all) marks for it: its own class's and the other rod class's
    (a moving fragment over two arms, classed cylinder, contests no box: the still hub keeps
    its name), else 0.0.

    The one a moving detection contests is the shape it fits best, except where it fits
    others within ``CONTEST_MARGIN`` of that and a still detection fits one of these: then,
    of those a still detection fits, the one where the moving detection's cost exceeds the
    still detections' best by least (a moving part that fits a still part's shape about as
    well as its own contests its own, and the still part keeps its name)."""
    if not motion.narrow:
        return np.ones(cost.shape[1])
    out = np.zeros(cost.shape[1])
    shares = np.nan_to_num(np.asarray(motion.shares, float), nan=-1.0)   # -1: not measured
    moving, still = shares >= MOVING_SHARE, (shares >= 0) & (shares < MOVING_SHARE)
    held = cost[still].min(0) if still.any() else np.full(cost.shape[1], np.inf)  # the still ones' best, per shape
    for k in np.flatnonzero(moving):
        c = cost[k] if alike is None else np.where(alike[k], cost[k], np.inf)
        if not np.isfinite(c).any():
            continue
        j = int(np.argmin(c))
        near = np.flatnonzero((c <= c[j] + CONTEST_MARGIN) & np.isfinite(held))
        if np.isfinite(held[j]) and len(near) > 1:
            j = int(near[np.argmin(c[near] - held[near])])
        out[j] = 1.0
    return out


class DepthMotion:
    """Sampled depth frames of one recording at 1/s resolution, for ``motion_shares``."""

    proposes = True  # segment proposes moving regions no detection covers (``moving_proposals``)

    def __init__(self, rec: Recording, s: int = 1, samples: int = 12):
        n = rec.num_frames
        frames = sorted({int(round(f)) for f in np.linspace(0, n - 1, min(samples, n))}) if rec.has_depth else []
        self.depths = {}
        for j in frames:  # a sampled frame that cannot be read is left out: the cue is a hint, not the stage's input
            try:
                self.depths[j] = downsample_depth(rec.depth(j), s)
            except RecordingError as e:
                log.warning("segment: the motion cue leaves out frame %d (%s)", j, e)
        self.frames = sorted(self.depths)
        self.fx = rec.camera.fx / s
        self.k = noise_k([self.depths[j] for j in self.frames])
        self._rec, self._s = rec, s
        self._cache: dict[int, tuple[np.ndarray, ...]] = {}  # frame i -> changed, valid, regions, d0[, far, near]

    def frame_depth(self, i: int) -> np.ndarray:
        """(H, W) m: frame i's depth at 1/s resolution (0 = no reading)."""
        return self.depths[i] if i in self.depths else downsample_depth(self._rec.depth(i), self._s)

    def changed(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """((F, H, W) bool: pixels changed between frame i and each sampled frame j != i
        (``changed_pixels``), (H, W) bool: pixels with a reading in frame i, (H, W) bool: the
        moving regions, pixels changed in at least ``REGION_SHARE`` of the sampled frames, closed
        by 3 x 3 pixels (a part's own dropouts) and in regions of at least ``MIN_REGION`` px)."""
        if i not in self._cache:
            d0 = self.frame_depth(i)
            valid = d0 > 0
            out = [changed_pixels(d0, d, self.k) for j, d in self.depths.items() if j != i]
            changed = np.stack(out) if out else np.zeros((0,) + d0.shape, bool)
            often = (changed.mean(0) >= REGION_SHARE) if len(changed) else np.zeros(d0.shape, bool)
            often = cv2.morphologyEx(often.astype(np.uint8), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8))
            n, lab, stats, _ = cv2.connectedComponentsWithStats(often, connectivity=8)
            regions = np.isin(lab, [k for k in range(1, n) if stats[k, cv2.CC_STAT_AREA] >= MIN_REGION])
            self._cache = {i: (changed, valid, regions, d0)}
        return self._cache[i][:3]

    def beyond(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """((F, H, W) bool, (F, H, W) bool): the pixels of frame i whose reading in sampled frame j
        (each j != i, as ``changed``) is farther, and nearer, than theirs by more than
        ``change_threshold``: the surface seen there moved away and shows what lies behind it,
        or something came in front of it. Computed once per frame i (each region asks)."""
        self.changed(i)
        if len(self._cache[i]) == 4:
            d0 = self._cache[i][3]
            thr = change_threshold(d0, self.k)
            far = [(d > 0) & (d0 > 0) & (d > d0 + thr) for j, d in self.depths.items() if j != i]
            near = [(d > 0) & (d0 > 0) & (d < d0 - thr) for j, d in self.depths.items() if j != i]
            empty = np.zeros((0,) + d0.shape, bool)
            self._cache[i] += (np.stack(far), np.stack(near)) if far else (empty, empty)
        return self._cache[i][4:6]

    def shares(self, i: int, masks: list[np.ndarray]) -> np.ndarray:
        """(n,) ``motion_shares`` of the masks (H, W) bool of frame i, where a mask's changes
        show a farther surface in under ``AWAY_SHARE`` of them counting only the changes that do
        not show a nearer one (``beyond``): a still surface something passes in front of (a
        distractor behind a swinging arm) has not moved itself; a part that moves shows what
        lies behind it somewhere. Used by the narrow cue (``StillMotion``) only: a part moving
        towards the camera (a door swinging out) shows mostly nearer surfaces as well."""
        changed, valid, _ = self.changed(i)
        out = motion_shares(masks, changed, valid)
        if not len(changed):
            return out
        far, near = self.beyond(i)
        own = motion_shares(masks, changed & ~near, valid)
        for k, m in enumerate(masks):
            moved = int(changed[:, m].sum())
            if moved and int((changed & far)[:, m].sum()) < AWAY_SHARE * moved:
                out[k] = own[k]
        return out

    def cues(self, i: int, masks: list[np.ndarray]) -> Motion:
        """``Motion`` of the masks (H, W) bool of frame i."""
        changed, valid, regions = self.changed(i)
        shares = motion_shares(masks, changed, valid)
        d0 = self._cache[i][3]
        attached = np.zeros(len(masks), bool)
        for k, m in enumerate(masks):
            z = float(np.median(d0[m & valid])) if (m & valid).any() else 0.0
            if z <= 0:
                continue
            r = max(2, int(round(ATTACH_M * self.fx / z)))
            near = cv2.dilate(m.astype(np.uint8), np.ones((2 * r + 1, 2 * r + 1), np.uint8)) > 0
            attached[k] = bool((near & regions).sum() >= MIN_REGION // 2)
        return Motion(shares, attached)


class StillMotion(DepthMotion):
    """``DepthMotion`` whose cue only ranks names: a still detection costs ``STILL_COST`` more
    for a library shape a moving detection contests (``contested``; a still distractor of a part's class
    and size loses the name to the moving part; ``Motion.narrow``), but none is made background for having nothing moving beside it
    (``Motion.loose``: every detection counts as attached) and no moving region is proposed."""

    proposes = False

    def cues(self, i: int, masks: list[np.ndarray]) -> Motion:
        """``Motion`` of the masks (H, W) bool of frame i (``DepthMotion.shares``), every one attached."""
        return Motion(self.shares(i, masks), np.ones(len(masks), bool), narrow=True)


def changed_pixels(d0: np.ndarray, d1: np.ndarray, k: float = 0.0) -> np.ndarray:
    """(H, W) bool: the pixels of depth image d0 (m, 0 = no reading) whose surface depth image d1
    no longer shows: no reading of d1 in the pixel's 3 x 3 neighbourhood lies within
    ``change_threshold(z, k)`` of it. A part that moved away leaves empty space or another
    surface there. A still surface's sensor dropouts and flying pixels at its edges (a
    RealSense-like sensor loses 20-80 % of the pixels beside a depth edge, independently per
    frame) leave a reading of the same surface beside them: on the RealSense-like 320 x 240
    rott and cartpole (seed 23) the still pixels' median share of changed frames is 0.16-0.32
    pixel by pixel and 0.00-0.01 this way, the swinging parts' 0.87-1.00 and 0.76-1.00."""
    h, w = d0.shape
    thr = change_threshold(d0, k)
    pad = np.pad(d1, 1)
    seen = np.zeros((h, w), bool)
    for dy in range(3):
        for dx in range(3):
            q = pad[dy:dy + h, dx:dx + w]
            seen |= (q > 0) & (np.abs(q - d0) <= thr)
    return (d0 > 0) & ~seen


def motion_shares(masks: list[np.ndarray], changed: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """(n,) per mask: the median over the F sampled frames of the share of its valid pixels that
    changed (``DepthMotion.changed``); NaN for a mask without valid pixels or with no sampled frame."""
    out = np.full(len(masks), np.nan)
    if not len(changed):
        return out
    for k, m in enumerate(masks):
        m = m & valid
        n = int(m.sum())
        if n:
            out[k] = float(np.median(changed[:, m].sum(1) / n))
    return out


def carve_rods(region: np.ndarray, depth: np.ndarray, K: np.ndarray, shapes: list[Shape],
               tries: int = CARVE_TRIES) -> list[np.ndarray]:
    """Rods cut from a moving ``region`` (H, W) bool: for each rod shape of ``shapes``
    (capsule, cylinder) in turn, the image segment of at most its length (capsule with its
    caps) at the region's median depth (m, ``depth``; intrinsics K) that holds the most
    pixels left of the region within its radius plus ``CARVE_PAD_PX`` (RANSAC: ``tries``
    random pairs of region pixels, seeded, as the segment's ends), those pixels taken as one
    rod. Returns the rods' masks; [] where the region has no depth or the shapes no rod."""
    z = depth[region & (depth > 0)]
    rods = [sh for sh in shapes if sh.type in ("capsule", "cylinder")]
    if not len(z) or not rods:
        return []
    f, zm = float(K[0, 0]), float(np.median(z))
    v, u = np.nonzero(region)
    pts = np.stack([u, v], 1).astype(np.float64)
    left = np.ones(len(pts), bool)
    rng = np.random.default_rng(0)
    out = []
    for sh in rods:
        idx = np.flatnonzero(left)
        if len(idx) < 3:
            break
        length = (sh.length + (2 * sh.radius if sh.type == "capsule" else 0.0)) * f / zm
        width = sh.radius * f / zm + CARVE_PAD_PX
        best = None
        for _ in range(tries):
            a, b = pts[rng.choice(idx, 2, replace=False)]
            d = b - a
            n = float(np.hypot(*d))
            if n < 1.0 or n > length:
                continue
            t = np.clip((pts[idx] - a) @ d / n**2, 0.0, 1.0)
            near = np.hypot(*(pts[idx] - a - t[:, None] * d).T) <= width
            if best is None or near.sum() > best.sum():
                best = near
        if best is None:
            continue
        rod = np.zeros(region.shape, bool)
        rod[v[idx[best]], u[idx[best]]] = True
        left[idx[best]] = False
        out.append(rod)
    return out


__all__ = ["carve_rods", "ATTACH_M", "AWAY_SHARE", "DepthMotion", "MOVING_SHARE", "Motion", "STILL_COST", "StillMotion",
           "TOUCH_M", "contested", "change_threshold", "changed_pixels", "motion_shares", "moves_away",
           "moving_proposals"]


def _cloud(mask: np.ndarray, depth: np.ndarray, K: np.ndarray, most: int = 3000) -> np.ndarray:
    """(N, 3) camera-frame points (m) of the mask's depth pixels, at most ``most`` (evenly strided)."""
    v, u = np.nonzero(mask & (depth > 0))
    step = max(1, len(v) // most)
    v, u = v[::step], u[::step]
    z = depth[v, u].astype(np.float64)
    return np.stack([(u - K[0, 2]) / K[0, 0] * z, (v - K[1, 2]) / K[1, 1] * z, z], 1)


def _touching(masks: list[np.ndarray], seen: list[tuple[float, float]], named: list[np.ndarray],
              depth: np.ndarray, K: np.ndarray, i: int) -> tuple[list[np.ndarray], list[tuple[float, float]]]:
    """The region masks (and their extents) that come within ``TOUCH_M`` in 3-D of the named
    parts' masks, or of a region that does (in turn): every part of a mechanism is joined to
    another, so a moving region apart from it (a moving distractor, a far wall) is none of its
    parts. Depth (m) and K at segment's working resolution."""
    from scipy.spatial import cKDTree

    clouds = [_cloud(m, depth, K) for m in masks]
    base = [c for c in (_cloud(m, depth, K) for m in named) if len(c)]
    if not base:
        return masks, seen
    tree = cKDTree(np.concatenate(base))
    gaps = [float(tree.query(c)[0].min()) if len(c) else math.inf for c in clouds]
    keep = [g <= TOUCH_M for g in gaps]
    grew = True
    while grew:  # a region joined to the named parts through another region
        grew = False
        for k in (k for k in range(len(masks)) if not keep[k] and len(clouds[k])):
            near = [j for j in range(len(masks)) if keep[j] and len(clouds[j])]
            if near and min(float(cKDTree(clouds[j]).query(clouds[k])[0].min()) for j in near) <= TOUCH_M:
                keep[k] = grew = True
    for k in range(len(masks)):
        if not keep[k]:
            log.info("segment: frame %d: background: a moving region of %d px %.2f m from the named parts",
                     i, int(masks[k].sum()), gaps[k])
    return [m for m, k in zip(masks, keep) if k], [e for e, k in zip(seen, keep) if k]


def moves_away(motion: DepthMotion, i: int, region: np.ndarray) -> bool:
    """Whether ``region`` (H, W) bool of frame i moves away from where it is: of its changed
    pixels over the sampled frames (``DepthMotion.changed``), more show a farther surface
    there than a nearer one, and at least ``AWAY_SHARE`` of them a farther one
    (``DepthMotion.beyond``). A part that moves away leaves the surface behind it (or, on a
    RealSense-like sensor, often no reading: 68 % of a far chain's changes); background a part
    sweeps over (the floor behind a swinging ball, the space a drawer slides into) shows a
    nearer one, and a known actuator's path (its pixels are holes) no surface at all. True
    where the motion holds no per-frame changes (nothing to judge by)."""
    changed = motion.changed(i)[0]
    if changed is None or not len(changed):
        return True
    moved = int(changed[:, region].sum())
    if moved == 0:
        return True
    inside = changed[:, region]
    farther, nearer = (int((inside & b[:, region]).sum()) for b in motion.beyond(i))
    return farther > nearer and farther >= AWAY_SHARE * moved


def moving_proposals(motion: DepthMotion, i: int, dets: list[Detection], names: list[str | None],
                     shapes: dict[str, Shape], depth: np.ndarray, K: np.ndarray, smoothed: np.ndarray,
                     tol: float, min_px: int) -> tuple[list[Detection], list[tuple[float, float]]]:
    """Detections (score ``PROPOSAL_SCORE``) for the moving regions of frame i that no named
    detection covers, at most one per library shape that no detection names (``names``, the
    naming with the motion cue), and their seen extents (m). A region is a connected part of
    the moving regions (``DepthMotion.changed``) outside the named detections (dilated by
    1 px), of at least ``min_px`` px and with at most ``RIM_SHARE`` of its pixels within
    ``RIM_PX`` of a named detection (else it is that part's rim: pixels the mask missed, or
    its motion's edge); a region larger than every unnamed shape can look (the moving links of
    a chain in one region) is cut into rods of the unnamed rod shapes' size (``carve_rods``);
    a region whose changes show a farther surface no more often than a nearer one, or seldom,
    is no part moving away (``moves_away``: the floor behind a swinging ball, a known
    actuator's path), no proposal; regions and unnamed shapes are paired by ``size_cost``
    (Hungarian, finite costs only), each region taking its shape's class. A thin part the network never
    proposes (a pole 3-5 px across at 320 x 240) is still seen to move. Masks, depth (m) and
    K at segment's working resolution."""
    named = [d.mask for d, n in zip(dets, names) if n is not None]
    open_ = [n for n, s in shapes.items() if s.type in CLASSES and n not in set(names)]
    if not open_:
        return [], []
    _, _, regions = motion.changed(i)
    near = np.zeros(regions.shape, bool)
    if named:
        union = np.any(named, axis=0).astype(np.uint8)
        regions = regions & ~(cv2.dilate(union, np.ones((3, 3), np.uint8)) > 0)
        near = cv2.dilate(union, np.ones((2 * RIM_PX + 1, 2 * RIM_PX + 1), np.uint8)) > 0
    n, lab, stats, _ = cv2.connectedComponentsWithStats(regions.astype(np.uint8), connectivity=8)
    masks, seen = [], []
    for k in range(1, n):
        if stats[k, cv2.CC_STAT_AREA] < min_px:
            continue
        m = lab == k
        if (m & near).sum() > RIM_SHARE * stats[k, cv2.CC_STAT_AREA]:
            continue
        if not moves_away(motion, i, m):
            log.info("segment: frame %d: background: a changing region of %d px that shows no surface behind it "
                     "(swept over by a part, or a known actuator's path)", i, int(stats[k, cv2.CC_STAT_AREA]))
            continue
        e = measure_extents(m, depth, K, smoothed)
        if all(math.isinf(size_cost(e, shapes[s], True, tol)) for s in open_):  # a moving chain of parts
            pieces = [p for p in carve_rods(m, depth, K, [shapes[s] for s in open_]) if p.sum() >= min_px]
            masks += pieces
            seen += [measure_extents(p, depth, K, smoothed) for p in pieces]
        else:
            masks.append(m)
            seen.append(e)
    if named and masks:
        masks, seen = _touching(masks, seen, named, depth, K, i)
    if not masks:
        return [], []
    cost = np.array([[size_cost(e, shapes[s], True, tol) for s in open_] for e in seen])
    rows, cols = linear_sum_assignment(np.where(np.isfinite(cost), cost, 1e6))
    out, out_seen = [], []
    for r, c in zip(rows, cols):
        if np.isfinite(cost[r, c]):
            label = CLASSES.index(shapes[open_[c]].type)
            out.append(Detection(masks[r], label, PROPOSAL_SCORE, np.eye(len(CLASSES))[label] * PROPOSAL_SCORE))
            out_seen.append(seen[r])
    return out, out_seen
