"""Training-free segmenter: depth discontinuities + normal clustering + primitive fitting.

The baseline beside the learned segmenter, and a fallback the user selects explicitly
(``SegmentConfig.method = "geometric"``). Steps, on one depth frame:

1. large planes (floor, walls) are found by RANSAC on points *and* normals (Fischler &
   Bolles 1981) and removed as background;
2. the remaining pixels are split into connected regions at depth discontinuities
   (``normals.discontinuities``), so parts in front of each other separate;
3. each region is classified by fitting primitives: mostly flat faces in at most three
   normal directions -> box; points on a sphere -> sphere; otherwise an axis from the
   normals (the side normals of a cylinder or capsule are perpendicular to it) and the
   normals at the ends decide: flat ends -> cylinder, rounded ends -> capsule.

It does not split two parts that touch at the same depth (the learned segmenter can).
"""
from __future__ import annotations

import logging
import math

import cv2
import numpy as np
from scipy import ndimage

from vid2sim.datasets.shapes import CLASSES
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import depth_to_normals, discontinuities, smooth_depth

log = logging.getLogger(__name__)

BOX, CAPSULE, SPHERE, CYLINDER = (CLASSES.index(c) for c in ("box", "capsule", "sphere", "cylinder"))


def backproject(depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """(H, W) metres -> (H, W, 3) camera-frame points."""
    h, w = depth.shape
    u, v = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return np.stack([(u - K[0, 2]) / K[0, 0] * depth, (v - K[1, 2]) / K[1, 1] * depth, depth], -1)


def _noise_tol(z: np.ndarray | float) -> np.ndarray | float:
    """Distance tolerance (m) for a fit at depth z: quantisation plus ~3 sigma of sensor noise."""
    return 0.004 + 0.005 * np.asarray(z) ** 2


def find_background_planes(P: np.ndarray, N: np.ndarray, valid: np.ndarray, rng: np.random.Generator,
                           max_planes: int = 3, min_fraction: float = 0.12, trials: int = 150) -> np.ndarray:
    """(H, W) bool: pixels on large planes (floor, walls) that span most of the image."""
    h, w = valid.shape
    bg = np.zeros_like(valid)
    for _ in range(max_planes):
        idx = np.flatnonzero(valid & ~bg)
        if len(idx) < min_fraction * h * w:
            break
        sub = rng.choice(idx, size=min(len(idx), 4000), replace=False)
        p, n = P.reshape(-1, 3)[sub], N.reshape(-1, 3)[sub]
        tol = _noise_tol(p[:, 2]) * 1.5
        best, best_count = None, 0
        for _ in range(trials):
            i = rng.integers(len(sub))
            nn = n[i]  # a point and its normal define a plane hypothesis
            d = np.abs((p - p[i]) @ nn)
            inl = (d < tol) & (np.abs(n @ nn) > 0.95)
            c = int(inl.sum())
            if c > best_count:
                best, best_count = (p[i], nn), c
        if best is None or best_count < min_fraction * h * w * len(sub) / len(idx):
            break
        p0, nn = best
        allp, alln = P.reshape(-1, 3), N.reshape(-1, 3)
        inl = ((np.abs((allp - p0) @ nn) < _noise_tol(allp[:, 2]) * 1.5) & (np.abs(alln @ nn) > 0.9)).reshape(h, w) & valid
        ys, xs = np.nonzero(inl)
        if len(xs) == 0 or max(np.ptp(xs) / w, np.ptp(ys) / h) < 0.7:
            break  # a big face of a part, not the room
        bg |= inl
    # Close pin-holes in the background left by noisy normals.
    bg = cv2.morphologyEx(bg.astype(np.uint8), cv2.MORPH_CLOSE, np.ones((3, 3), np.uint8)) > 0
    return bg & valid


def concave_creases(P: np.ndarray, N: np.ndarray, step: int = 2, thresh: float = 0.2) -> np.ndarray:
    """(H, W) bool: pixels on a concave crease, where two parts meet at the same depth.

    Between neighbours ``step`` pixels apart, the normal turns against the direction of
    travel on a concave surface ((n_q - n_p) . (p_q - p_p) < 0) and with it on a convex one
    (Stein et al. 2014, locally convex connected patches). Box edges are convex and stay
    joined; a pole entering a cart, or a part resting on another, is cut.
    """
    crease = np.zeros(P.shape[:2], bool)
    valid = np.any(N != 0, axis=-1)
    for axis in (0, 1):
        sl_a = [slice(None)] * 2
        sl_b = [slice(None)] * 2
        sl_a[axis] = slice(0, -step)
        sl_b[axis] = slice(step, None)
        dp = P[tuple(sl_b)] - P[tuple(sl_a)]
        dn = N[tuple(sl_b)] - N[tuple(sl_a)]
        dpn = dp / np.maximum(np.linalg.norm(dp, axis=-1, keepdims=True), 1e-9)
        conc = ((dn * dpn).sum(-1) < -thresh) & valid[tuple(sl_a)] & valid[tuple(sl_b)]
        crease[tuple(sl_a)] |= conc
        crease[tuple(sl_b)] |= conc
    return crease


def _planar_fraction(n: np.ndarray, rng: np.random.Generator, cos_tol: float = np.cos(np.radians(12))) -> float:
    """Fraction of normals within ``cos_tol`` of one of at most three dominant directions."""
    left = np.ones(len(n), bool)
    dirs: list[np.ndarray] = []
    for _ in range(3):
        if not left.any():
            break
        cand = n[rng.choice(np.flatnonzero(left), size=min(60, int(left.sum())), replace=False)]
        hits = (n[left] @ cand.T) > cos_tol
        best = hits.sum(0).argmax()
        # Box faces meet at right angles: a cluster next to an earlier one is a curved surface.
        if any(abs(float(cand[best] @ d0)) > 0.5 for d0 in dirs):
            break
        sel = np.flatnonzero(left)[hits[:, best]]
        if len(sel) < 0.05 * len(n):
            break
        dirs.append(cand[best])
        left[sel] = False
    return 1.0 - left.mean()


def _fit_sphere(p: np.ndarray) -> tuple[np.ndarray, float]:
    A = np.concatenate([2 * p, np.ones((len(p), 1))], 1)
    b = (p**2).sum(1)
    x, *_ = np.linalg.lstsq(A, b, rcond=None)
    c = x[:3]
    r = float(np.sqrt(max(x[3] + c @ c, 1e-12)))
    return c, r


# region_features columns: planar fraction, sphere inliers, log elongation, rounded ends, flat ends
FEATURES = ("planar", "sphere_inliers", "log_elongation", "round_ends", "flat_ends")


def interior_pixels(mask: np.ndarray, N: np.ndarray) -> np.ndarray | None:
    """Where an instance's points are read: its pixels with a normal one pixel in from the
    outline (all its pixels with a normal where that leaves fewer than 20); None under 10."""
    valid = np.any(N != 0, axis=-1)
    inner = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    use = inner & valid if (inner & valid).sum() >= 20 else mask & valid
    return use if use.sum() >= 10 else None


def region_features(p: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """p, n: (N, 3) points and normals of one region -> (5,) the cues ``classify_region`` decides on.

    planar: share of normals in at most three perpendicular directions (box faces);
    sphere_inliers: share of points on the least-squares sphere with radial normals;
    log_elongation: log ratio of the two largest point-spread eigenvalues; round_ends,
    flat_ends: at the ends of the rod's axis, share of normals that turn smoothly
    towards it (a capsule's hemispheres) or lie along it (a cylinder's flat cap); -1
    where the region has no ends to look at.
    """
    planar = _planar_fraction(n, rng)
    q = p - p.mean(0)
    evals, evecs = np.linalg.eigh(q.T @ q / len(q))
    elong = float(evals[2] / max(evals[1], 1e-12))
    c, r = _fit_sphere(p)
    res = np.abs(np.linalg.norm(p - c, axis=1) - r)
    radial = (p - c) / np.maximum(np.linalg.norm(p - c, axis=1, keepdims=True), 1e-9)
    sphere_inl = float(np.mean((res < np.maximum(0.05 * r, _noise_tol(p[:, 2]))) & ((radial * n).sum(1) > 0.85)))
    # Axis: the points' main direction when elongated; otherwise the direction the side
    # normals are perpendicular to (smallest eigenvector of sum n n^T).
    axis = evecs[:, 2]
    if elong < 4.0:
        axis = np.linalg.eigh(n.T @ n / len(n))[1][:, 0]
    t = q @ axis
    radius = 0.5 * float(np.ptp(q @ evecs[:, 1])) if elong >= 4.0 else 0.25 * float(np.ptp(t))
    a_dot = np.abs(n @ axis)
    # The ends decide: a capsule's hemispheres turn their normals smoothly towards the
    # axis; a cylinder's end is its side (normals across the axis) or a flat cap (along it).
    ends = (t < t.min() + radius) | (t > t.max() - radius)
    round_ = flat = -1.0
    if ends.sum() >= 5:
        round_ = float(np.mean((a_dot[ends] > 0.35) & (a_dot[ends] < 0.92)))
        flat = float(np.mean(a_dot[ends] >= 0.92))
    return np.array([planar, sphere_inl, np.log(max(elong, 1e-12)), round_, flat])


def classify_region(p: np.ndarray, n: np.ndarray, rng: np.random.Generator) -> tuple[int, float]:
    """p, n: (N, 3) points and normals of one region -> (class index, confidence in [0, 1])."""
    return classify_features(region_features(p, n, rng))


def classify_features(f: np.ndarray) -> tuple[int, float]:
    """The training-free decision on ``region_features``: (class index, confidence)."""
    planar, sphere_inl, log_elong, round_, flat = (float(x) for x in f)
    if planar > 0.75:
        return BOX, planar
    if sphere_inl > 0.9 and log_elong < np.log(4.0):
        return SPHERE, sphere_inl
    if round_ < 0:
        return CYLINDER, 0.5
    if round_ > 0.25 and round_ > flat:
        return CAPSULE, min(1.0, 0.5 + round_)
    return CYLINDER, min(1.0, 1.0 - round_)


MERGE_MAX_REGIONS = 300   # merge_occluded's pairwise search beyond this many regions would take minutes


def merge_occluded(lab: np.ndarray, depth: np.ndarray, ids: list[int], max_gap_px: int = 30) -> np.ndarray:
    """Join regions that are one part seen on both sides of a thinner part in front of it.

    Two regions merge when the straight gap between their closest pixels crosses a
    surface (or passes within 4 px of a segmented part) nearer the camera than both
    ends and nothing behind them, and the depths at the two ends agree (within 8 %): a
    pole in front of a cart cuts the cart's image in two, and the depth-discontinuity
    band around the pole widens the cut so that the gap may pass just beside the pole's
    end. The room's planes (a floor nearer the camera below a part) do not count.
    """
    lab = lab.copy()
    ids = list(ids)
    changed = True
    while changed:
        changed = False
        boxes = ndimage.find_objects(lab)
        for ia in ids:
            near_ids = [ib for ib in ids if ib != ia and _box_gap(boxes[ia - 1], boxes[ib - 1]) <= 1.1 * max_gap_px + 2]
            if not near_ids:     # every other region's box is farther than the gap (a bound on the distance)
                continue
            A = lab == ia
            dist, _ = cv2.distanceTransformWithLabels((~A).astype(np.uint8), cv2.DIST_L2, 5,
                                                      labelType=cv2.DIST_LABEL_PIXEL)
            for ib in near_ids:
                if one_part_behind(lab, depth, ids, A, dist, lab == ib, max_gap_px):
                    lab[lab == ib] = ia
                    ids.remove(ib)
                    changed = True
                    break
            if changed:
                break
    return lab


def one_part_behind(lab: np.ndarray, depth: np.ndarray, ids: list[int], A: np.ndarray, dist: np.ndarray,
                    B: np.ndarray, max_gap_px: int) -> bool:
    """Whether regions A and B (H, W) bool are one part seen on both sides of a nearer one
    (``merge_occluded``'s rule). dist: (H, W) px distance to A; depth (H, W) m; lab, ids:
    the region labels and the ids of the segmented parts."""
    bv, bu = np.nonzero(B)
    k = int(np.argmin(dist[bv, bu]))
    if dist[bv[k], bu[k]] > max_gap_px:
        return False
    av, au = np.nonzero(A)
    j = int(np.argmin((av - bv[k]) ** 2 + (au - bu[k]) ** 2))
    za, zb = float(depth[av[j], au[j]]), float(depth[bv[k], bu[k]])
    if abs(za - zb) > 0.08 * min(za, zb):
        return False
    n = int(max(abs(av[j] - bv[k]), abs(au[j] - bu[k]))) + 1
    vs = np.round(np.linspace(av[j], bv[k], n)).astype(int)
    us = np.round(np.linspace(au[j], bu[k], n)).astype(int)
    between = ~(A[vs, us] | B[vs, us])
    zs = depth[vs, us][between]
    zfront = min(za, zb) - max(0.01, 0.02 * min(za, zb))
    # nearest depth of the other segmented parts (not the room's planes) within 4 px
    other = (depth > 0) & np.isin(lab, ids) & ~A & ~B
    near = cv2.erode(np.where(other, depth, np.inf).astype(np.float32), np.ones((9, 9), np.uint8))
    front = ((zs > 0) & (zs < zfront)) | (near[vs, us][between] < zfront)
    behind = (zs <= 0) | (zs > max(za, zb) * 1.04 + 0.01)
    return bool(front.any() and not behind.any())


def _box_gap(a: tuple[slice, slice] | None, b: tuple[slice, slice] | None) -> float:
    """The larger of the row and column gaps (px) between two ``find_objects`` boxes: no pixel
    of one is nearer than this to a pixel of the other (inf where a box is missing)."""
    if a is None or b is None:
        return math.inf
    return float(max(max(a[k].start - b[k].stop + 1, b[k].start - a[k].stop + 1, 0) for k in (0, 1)))


def split_bent(mask: np.ndarray, rng: np.random.Generator, min_pixels: int, fill: float = 0.6,
               trials: int = 200, origin: tuple[int, int] = (0, 0)) -> list[np.ndarray]:
    """Split a region that is several rods joined end to end (an L, a V, a chain).

    A single primitive fills most of its minimum-area rectangle; a bent chain does not.
    Such a region is cut into straight pieces by sequential RANSAC of 2-D lines over its
    pixels (inlier band: the rod's width from the distance transform); leftover pixels
    join the nearest piece. origin: (x, y) px of the mask's first column and row in the frame
    (a mask cut from a larger frame: the line fit sees frame coordinates).
    """
    v, u = np.nonzero(mask)
    pts = np.stack([u + origin[0], v + origin[1]], 1).astype(np.float32)
    (_, (rw, rh), _) = cv2.minAreaRect(pts)
    if len(pts) < 2 * min_pixels or len(pts) / max(rw * rh, 1.0) >= fill:
        return [mask]
    dt = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    half = max(2.0, 1.3 * float(np.percentile(dt[mask], 95)))
    left = np.ones(len(pts), bool)
    pieces = []
    while left.sum() >= min_pixels and len(pieces) < 6:
        P = pts[left]
        best_in = None
        for _ in range(trials):
            a, b = P[rng.integers(len(P), size=2)]
            d = b - a
            nrm = np.linalg.norm(d)
            if nrm < 3 * half:
                continue
            n = np.array([-d[1], d[0]]) / nrm
            inl = np.abs((P - a) @ n) < half
            if best_in is None or inl.sum() > best_in.sum():
                best_in = inl
        if best_in is None or best_in.sum() < min_pixels:
            break
        idx = np.flatnonzero(left)[best_in]
        piece = np.zeros_like(mask)
        piece[v[idx], u[idx]] = True
        # keep the largest connected run along the line (the band may cross other rods)
        cnt, lab = cv2.connectedComponents(piece.astype(np.uint8), connectivity=8)
        if cnt > 2:
            sizes = np.bincount(lab[piece])
            piece = lab == int(np.argmax(sizes[1:]) + 1)
        pieces.append(piece)
        left &= ~piece[v, u]
    if len(pieces) < 2:
        return [mask]
    # leftover pixels to the nearest piece
    dists = [cv2.distanceTransform((~p).astype(np.uint8), cv2.DIST_L2, 3) for p in pieces]
    owner = np.argmin(np.stack(dists), 0)
    return [mask & (owner == k) for k in range(len(pieces))]


def split_blob(mask: np.ndarray, min_pixels: int, ratio: float = 2.0) -> list[np.ndarray]:
    """Split a thick blob (a ball) off a rod it is attached to at the same depth.

    The rod's half-width is the typical value of the distance transform on its ridge
    (local maxima); a core much thicker than that is a different part, which is grown
    back to its full radius and cut off.
    """
    dt = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    ridge = mask & (dt >= cv2.dilate(dt, np.ones((3, 3), np.uint8))) & (dt > 0)
    if ridge.sum() < 5:
        return [mask]
    half = float(np.median(dt[ridge]))
    core = dt > ratio * max(half, 1.0)
    if not core.any():
        return [mask]
    v, u = np.unravel_index(int(np.argmax(dt)), dt.shape)
    R = float(dt[v, u])
    yy, xx = np.mgrid[: mask.shape[0], : mask.shape[1]]
    blob = mask & ((yy - v) ** 2 + (xx - u) ** 2 <= (R + 1.5) ** 2)
    rest = mask & ~blob
    if blob.sum() < min_pixels or rest.sum() < min_pixels or rest.sum() < 0.2 * mask.sum():
        return [mask]
    cnt, lab = cv2.connectedComponents(rest.astype(np.uint8), connectivity=8)
    sizes = np.bincount(lab[rest])
    rest = lab == int(np.argmax(sizes[1:]) + 1)
    return [blob, rest]


# The look-alikes of each class at low resolution: a thin capsule's rounded ends vanish
# into the edge pixels, a short capsule seen along its axis is a sphere.
_CONFUSABLE = {BOX: (CYLINDER,), CAPSULE: (CYLINDER, SPHERE), SPHERE: (CAPSULE,), CYLINDER: (CAPSULE, BOX)}


def class_scores(cls: int, conf: float) -> np.ndarray:
    """Soft per-class scores: the decision ``cls`` at ``conf``, its look-alikes lower."""
    cs = np.zeros(len(CLASSES))
    for other in _CONFUSABLE[cls]:
        cs[other] = max(0.3, 0.9 * (1.0 - conf))
    cs[cls] = conf
    return cs


_PAD = 2  # px a region's box is grown by in segment_geometric: its 3x3 erosion and dilation stay inside


def _grown(box: tuple[slice, slice] | None, shape: tuple[int, int]) -> tuple[slice, slice] | None:
    """A ``find_objects`` box (rows, columns) grown by ``_PAD`` px on every side, inside an image of
    ``shape`` (H, W); None stays None."""
    if box is None:
        return None
    v, u = box
    return (slice(max(v.start - _PAD, 0), min(v.stop + _PAD, shape[0])),
            slice(max(u.start - _PAD, 0), min(u.stop + _PAD, shape[1])))


def segment_geometric(depth: np.ndarray, K: np.ndarray, min_pixels: int = 40, seed: int = 0,
                      P: np.ndarray | None = None, N: np.ndarray | None = None) -> list[Detection]:
    """depth: (H, W) metres (0 = none), K: (3, 3) -> detections (mask, class, confidence).

    ``P``/``N``: the frame's ``frame_geometry`` when the caller already has it.
    """
    rng = np.random.default_rng(seed)
    if P is None or N is None:
        P, N = frame_geometry(depth, K)
    d = P[..., 2]
    valid = np.any(N != 0, axis=-1)
    bg = find_background_planes(P, N, valid, rng)
    fg = (d > 0) & ~bg & ~discontinuities(d) & ~concave_creases(P, N)
    fg[:2] = fg[-2:] = False  # border rows/columns have one-sided differences only
    fg[:, :2] = fg[:, -2:] = False
    count, lab = cv2.connectedComponents(fg.astype(np.uint8), connectivity=4)
    h, w = d.shape
    boxes = ndimage.find_objects(lab)
    ids = []
    for k in range(1, count):
        v, u = boxes[k - 1]
        if np.count_nonzero(lab[v, u] == k) < min_pixels:
            continue
        # A band from one image border to the other is a piece of the room (a floor strip
        # beyond a plane's inlier band), not a part.
        if (u.start <= 3 and u.stop - 1 >= w - 4) or (v.start <= 3 and v.stop - 1 >= h - 4):
            continue
        ids.append(k)
    if len(ids) <= MERGE_MAX_REGIONS:
        lab = merge_occluded(lab, d, ids)
        boxes = ndimage.find_objects(lab)
    else:
        log.warning("segment: %d depth regions of >= %d px (a shattered frame, e.g. sensor noise at high "
                    "resolution): the merge of parts cut by a nearer one is skipped", len(ids), min_pixels)
    ones = np.ones((3, 3), np.uint8)

    def classify(m: np.ndarray, box: tuple[slice, slice]) -> tuple[int, float] | None:
        inner = cv2.erode(m.astype(np.uint8), ones) > 0
        ok = valid[box]
        use = inner & ok if (inner & ok).sum() >= 20 else m & ok
        return classify_region(P[box][use], N[box][use], rng) if use.sum() >= 10 else None

    regions = []  # (mask in its box, class or None, box): each region is worked on in its box grown by _PAD
    for k in ids:
        box = _grown(boxes[k - 1] if k <= len(boxes) else None, (h, w))
        if box is None:
            continue  # merged into another region
        m = lab[box] == k
        c = classify(m, box)
        if c is None:
            continue
        pieces = [m]
        if c[0] != BOX:
            pieces = split_blob(m, min_pixels)
            if len(pieces) == 2 and (classify(pieces[0], box) or (None,))[0] != SPHERE:
                pieces = [m]  # only a ball is cut off a rod
            pieces = [q for p in pieces for q in split_bent(p, rng, min_pixels, origin=(box[1].start, box[0].start))]
        regions.extend([(m, c, box)] if len(pieces) == 1 else [(p, None, box) for p in pieces])
    dets = []
    for m, c, box in regions:
        if m.sum() < min_pixels:
            continue
        c = c or classify(m, box)
        if c is None:
            continue
        cls, conf = c
        # Give back the edge pixels the discontinuity cut removed (one pixel around).
        near = cv2.dilate(m.astype(np.uint8), ones) > 0
        near &= (d[box] > 0) & ~bg[box] & ((lab[box] == 0) | m)
        full = np.zeros((h, w), bool)
        full[box] = near
        cs = class_scores(cls, conf)
        dets.append(Detection(full, cls, float(conf), cs))
    return sorted(dets, key=lambda d: -d.score)


def frame_geometry(depth: np.ndarray, K: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(H, W) metres -> camera-frame points of the smoothed depth (H, W, 3) and normals (H, W, 3)."""
    return backproject(smooth_depth(depth), K), depth_to_normals(depth, K)


def depth_regions(depth: np.ndarray, K: np.ndarray, P: np.ndarray | None = None,
                  N: np.ndarray | None = None) -> np.ndarray:
    """(H, W) int32 over-segmentation: connected pixels not separated by a depth
    discontinuity or a concave crease (0 = edge or no depth). ``P``/``N``: the frame's
    back-projected smoothed depth and normals when the caller already has them."""
    if P is None or N is None:
        P, N = frame_geometry(depth, K)
    d = P[..., 2]
    fg = (d > 0) & np.any(N != 0, axis=-1) & ~discontinuities(d) & ~concave_creases(P, N)
    _, lab = cv2.connectedComponents(fg.astype(np.uint8), connectivity=4)
    return lab


LEFTOVER = 0.1  # share of a mask's region pixels it must still claim once more confident masks took theirs


def snap_to_regions(dets: list[Detection], regions: np.ndarray, min_share: float = 0.5) -> list[Detection]:
    """Snap (blobby, 28x28-resolution) network masks to depth regions.

    A region joins a mask when more than ``min_share`` of it lies inside the mask; the
    mask's own pixels on region borders (edge pixels) stay. A mask that claims no
    region is returned unchanged, and so is one whose pixels inside regions lie mostly
    in regions a more confident mask took while the rest claims less than ``LEFTOVER`` of
    them: cut down to those leftovers (slivers and its edge pixels) it would become a piece
    of no part (a whole-cabinet mask takes the door, drawer and carcass regions; the
    drawer's own mask, then, only a rim of edge pixels). Such a mask is the same parts seen
    again; ``reconcile.split_merged`` drops it.
    """
    if not dets:
        return dets
    n = int(regions.max()) + 1
    area = np.bincount(regions.ravel(), minlength=n)
    out = []
    taken = np.zeros(n, bool)
    for d in dets:  # best first: a region goes to the most confident mask claiming it
        inside = np.bincount(regions[d.mask], minlength=n)
        share = inside / np.maximum(area, 1)
        claim = (share > min_share) & ~taken
        claim[0] = False
        inner = inside[1:].sum()
        if not claim.any() or (inside[claim].sum() < LEFTOVER * inner and inside[1:][taken[1:]].sum() >= 0.5 * inner):
            out.append(d)
            continue
        taken |= claim
        m = claim[regions] | (d.mask & (regions == 0))
        out.append(Detection(m, d.label, d.score, d.class_scores))
    return out
