"""Segment's last step: each final mask's boundary refined against the colour image and the depth.

The segmenter's masks come from the depth (normals, depth regions), so they stop where the depth
stops: a RealSense-like sensor leaves holes along every part's edges (no reading where the surface
turns away or a nearer edge shadows it), and a mask snapped to the depth misses a rim one to three
pixels wide around each part. On a rod a few pixels across that rim is most of the part.

Each mask is refined on its own by GrabCut (Rother, Kolmogorov, Blake 2004, ``cv2.grabCut``) in a
window around it: a band ``BAND_PX`` wide around the mask is probable background, everything beyond
the band sure background. By default the mask is sure foreground and may only grow onto band pixels
without a depth reading, in holes that do not reach the window's edge (a void beyond the sensor's
range is no part's rim): the depth pixels each part holds are the segmenter's. With ``with_depth``
the mask is probable foreground (its core, one pixel in, sure foreground), and band pixels whose
depth is within ``DEPTH_TOL_M`` of the nearest mask pixel's depth may join as well (never a nearer
or farther surface: a distractor, the wall behind); mask pixels may then be dropped, and given the
parts' sizes and the depth noise, a mask's pixels whose depth lies off its part's depth interval (the wall
behind it) are sure background and its pixels without depth away from that interval (a sensor shadow
beside it) or in a hole reaching the window's edge (a void behind it) probable background. Either way a
mask takes no pixel another part's mask holds or that lies nearer to another mask than to it (the
rim between two touching parts is split between them), only pixels joined to the mask, and a result
that keeps less than ``MIN_KEPT`` of the mask or grows it by more than ``MAX_GROWTH`` is dropped for
the mask as it was. Given its part's least extent and largest projected area in pixels, a mask narrower than
its part (the depth segmenter's half of a near cylinder, or its ring) gets a band as wide as it falls short
and may grow to that area. ``ROUNDS`` such refinements run in turn. It does not move masks, name parts or
find parts the segmenter missed.
"""
from __future__ import annotations

import logging

import cv2
import numpy as np

from vid2sim.datasets.noise import estimate_depth_noise
from vid2sim.pipeline.track_fit import depth_cluster

log = logging.getLogger(__name__)

BAND_PX = 3  # px: how far beyond its mask a part's boundary may move
DEPTH_TOL_M = 0.03  # m: a band pixel with depth joins a part only this close to the part's nearest depth
MIN_KEPT = 0.85  # share of a mask's pixels the refined mask must keep
MAX_GROWTH = 1.0  # the refined mask may add at most this share of the mask's pixels
ITERATIONS = 4  # GrabCut's iterations (colour models re-estimated, graph cut again)
NARROW = 0.8  # a mask whose mean width is under this share of its part's least extent (px) is narrow
ROUNDS = 2  # refinements in turn, each from the last one's masks: a boundary moves at most ROUNDS bands
MARGIN_PX = 12  # px: the window around a mask, beyond the band: GrabCut's background colour samples
RNG_SEED = 0  # OpenCV's RNG seed for GrabCut's colour models (k-means++ starts)


def _near_depth(mask: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """(H, W) m: at every pixel, the depth of the nearest mask pixel with a depth reading (0 where
    the mask has none). mask: (H, W) bool; depth: (H, W) m, 0 = no reading."""
    seen = mask & (depth > 0)
    if not seen.any():
        return np.zeros_like(depth)
    _, labels = cv2.distanceTransformWithLabels((~seen).astype(np.uint8), cv2.DIST_L2, 3,
                                                labelType=cv2.DIST_LABEL_PIXEL)
    ys, xs = np.nonzero(seen)
    # labels number the zero pixels of the input (the seen pixels) in row-major order, from 1
    lut = np.zeros(len(ys) + 1, np.float32)
    lut[1:] = depth[ys, xs]
    return lut[labels]


def _rim_holes(depth: np.ndarray) -> np.ndarray:
    """(h, w) bool: the pixels without depth in a window depth (h, w) m, but for holes (4-connected)
    that reach the window's edge: a void beyond the sensor's range, not a part's rim."""
    holes = (depth == 0).astype(np.uint8)
    _, lab = cv2.connectedComponents(holes, connectivity=4)
    edge = np.unique(np.concatenate([lab[0], lab[-1], lab[:, 0], lab[:, -1]]))
    return (holes > 0) & ~np.isin(lab, edge[edge > 0])


def _off_part(m: np.ndarray, d: np.ndarray, size_m: float, k: float) -> tuple[np.ndarray, np.ndarray]:
    """Pixels of mask m (h, w) bool that are not its part, by depth d (h, w) m (0 = no reading): (off, far),
    (h, w) bool each. off: pixels whose depth lies outside the densest interval ``size_m`` + 2 ``DEPTH_TOL_M``
    + 6 noise sigmas (k z^2, k 1/m) long of the mask's depths (``track_fit.depth_cluster``: a wall or floor
    behind the part); far: pixels without a reading more than ``BAND_PX`` from every pixel of that interval
    (a sensor shadow beside the part), and those in a hole that reaches the window's edge, however near
    (a void beyond the sensor's range behind the part, ``_rim_holes``)."""
    own = depth_cluster(d, m, size_m + 2 * DEPTH_TOL_M, lambda z: k * z ** 2)
    if not own.any():
        return np.zeros_like(m), np.zeros_like(m)
    off = m & (d > 0) & ~own
    far = m & (d == 0) & ((cv2.distanceTransform((~own).astype(np.uint8), cv2.DIST_L2, 3) > BAND_PX)
                          | ~_rim_holes(d))
    return off, far


def _band(mask: np.ndarray, part_px: tuple[float, float] | None) -> tuple[int, float]:
    """(band px, area px) for mask (H, W) bool: ``BAND_PX`` and 0, or, for a mask whose mean width (its pixels
    over its minimum-area rectangle's long side) is under ``NARROW`` of its part's least extent seen at its
    depth (part_px: (least extent px, largest projected area px)), a band as wide as the shortfall and the
    part's largest projected area, which the mask may grow to."""
    if not part_px:
        return BAND_PX, 0.0
    width_px, area_px = part_px
    pts = cv2.findNonZero(mask.astype(np.uint8))
    seen = float(mask.sum()) / max(max(cv2.minAreaRect(pts)[1]), 1.0)
    if seen >= NARROW * width_px:
        return BAND_PX, 0.0
    return max(BAND_PX, int(np.ceil(width_px - seen))), area_px


def refine_mask(k: int, masks: np.ndarray, color: np.ndarray, depth: np.ndarray,
                blocked: np.ndarray | None = None, with_depth: bool = False,
                size_m: float | None = None, noise: float = 0.0,
                part_px: tuple[float, float] | None = None) -> np.ndarray:
    """Mask k of masks (K, H, W) with its boundary refined on color (H, W, 3) uint8 RGB and depth
    (H, W) m (0 = no reading); (H, W) bool. The others' pixels, and ``blocked`` (H, W) bool
    (a known actuator's), are never taken. with_depth False: the mask only grows, onto pixels
    without depth; True: it may also take pixels of its surface's depth and lose its own, and with
    ``size_m`` (m, the diagonal of its part's extents) its pixels of another surface are dropped and those in
    a shadow beside it or in a void behind it start as probable background, in its core too (``_off_part``;
    noise: the depth noise's k, 1/m, sigma = k z^2).
    With ``part_px`` ((least extent, largest projected area) of its part seen at its depth, px), a mask
    narrower than its part has a wider band and may grow up to that area (``_band``)."""
    mask = masks[k] > 0
    n = int(mask.sum())
    if n == 0:
        return mask
    band, area = _band(mask, part_px if with_depth else None)
    h, w = mask.shape
    ys, xs = np.nonzero(mask)
    pad = band + MARGIN_PX
    y0, y1 = max(ys.min() - pad, 0), min(ys.max() + pad + 1, h)
    x0, x1 = max(xs.min() - pad, 0), min(xs.max() + pad + 1, w)
    m = mask[y0:y1, x0:x1]
    others = (np.delete(masks, k, axis=0)[:, y0:y1, x0:x1] > 0).any(0) if len(masks) > 1 else np.zeros_like(m)
    if blocked is not None:
        others |= blocked[y0:y1, x0:x1]
    d = depth[y0:y1, x0:x1]
    dist = cv2.distanceTransform((~m).astype(np.uint8), cv2.DIST_L2, 3)
    near = _near_depth(m, d)
    # nearer to this mask than to any other: the rim between two touching parts is split between them
    nearer = dist < cv2.distanceTransform((~others).astype(np.uint8), cv2.DIST_L2, 3) if others.any() else True
    same_surface = (d == 0) | ((near > 0) & (np.abs(d - near) <= DEPTH_TOL_M)) if with_depth else _rim_holes(d)
    allowed = (dist <= band) & ~m & ~others & nearer & same_surface
    core = cv2.erode(m.astype(np.uint8), cv2.getStructuringElement(cv2.MORPH_CROSS, (3, 3))) > 0
    gc = np.full(m.shape, cv2.GC_BGD, np.uint8)
    gc[allowed] = cv2.GC_PR_BGD
    gc[m] = cv2.GC_PR_FGD if with_depth else cv2.GC_FGD
    gc[core] = cv2.GC_FGD
    if with_depth and size_m is not None:
        off, far = _off_part(m, d, size_m, noise)
        gc[far] = cv2.GC_PR_BGD
        gc[off] = cv2.GC_BGD
        n -= int(off.sum()) + int(far.sum())
    img = np.ascontiguousarray(color[y0:y1, x0:x1, ::-1])
    bgd, fgd = np.zeros((1, 65), np.float64), np.zeros((1, 65), np.float64)
    cv2.setRNGSeed(RNG_SEED)   # GrabCut's k-means starts from OpenCV's global RNG: the same masks every call
    try:
        cv2.grabCut(img, gc, None, bgd, fgd, ITERATIONS, cv2.GC_INIT_WITH_MASK)
    except cv2.error:  # too few pixels of one kind for its colour model
        return mask
    fg = ((gc == cv2.GC_FGD) | (gc == cv2.GC_PR_FGD)) & (m | allowed)
    _, lab = cv2.connectedComponents(fg.astype(np.uint8), connectivity=8)
    fg &= np.isin(lab, np.unique(lab[fg & m]))
    kept, added = int((fg & m).sum()), int((fg & ~m).sum())
    if n <= 0 or kept < MIN_KEPT * n or added > max(MAX_GROWTH * n, area - n):
        return mask
    out = np.zeros_like(mask)
    out[y0:y1, x0:x1] = fg
    return out


def refine_boundaries(masks: np.ndarray, names: list[str], color: np.ndarray | None,
                      depth: np.ndarray | None, blocked: np.ndarray | None = None,
                      with_depth: bool = False, sizes_m: list[float] | None = None,
                      noise: float = 0.0,
                      parts_px: list[tuple[float, float] | None] | None = None) -> np.ndarray:
    """masks (K, H, W) uint8 of one frame with each part's boundary refined (``refine_mask``)
    ``ROUNDS`` times, each mask against the others' masks of the round before; a pixel two masks
    newly take in a round goes to neither. color (H, W, 3) uint8 RGB, depth (H, W) m (0 = no
    reading), blocked (H, W) bool: pixels no part may take; with_depth and sizes_m (K,) m, each mask's
    part's extents' diagonal (or None), noise (1/m), parts_px (K,) (px, px^2): see ``refine_mask``; without
    colour or depth, masks as given."""
    if color is None or depth is None or len(masks) == 0 or color.shape[:2] != masks.shape[1:]:
        return masks
    refined = masks > 0
    for _ in range(ROUNDS):
        was = refined
        refined = np.stack([refine_mask(j, was, color, depth, blocked, with_depth, sizes_m and sizes_m[j], noise,
                                        parts_px and parts_px[j]) for j in range(len(was))])
        refined &= ~((refined & ~was).sum(0) > 1)   # a pixel two parts newly take: neither's
    for name, a, b in zip(names, masks, refined):
        log.info("segment: %s's boundary refined on colour and depth: %d -> %d px", name, int((a > 0).sum()),
                 int(b.sum()))
    return refined.astype(masks.dtype)


def part_depths(rec, masks: np.ndarray, names: list[str],
                frame: int) -> tuple[list[float], float, list[tuple[float, float] | None]]:
    """What ``refine_boundaries`` needs to tell a part's depths from those behind it and its width: each named
    part's extents' diagonal (m), the recording's depth noise k (1/m, sigma = k z^2), measured as track
    measures it (``estimate_depth_noise``: static pixels away from the masks (K, H, W) of ``frame``, else their
    surfaces), and each part's least extent (px) and largest projected area (px^2, its extents' diagonal times
    their middle one) seen at its mask's median depth (None for a mask without depth)."""
    sizes = [float(np.linalg.norm(rec.shapes[n].extents())) for n in names]
    depth, fx = rec.depth(frame), float(rec.camera.K[0, 0])
    widths = []
    for m, n, size in zip(masks, names, sizes):
        z = depth[(m > 0) & (depth > 0)]
        ext = np.sort(np.asarray(rec.shapes[n].extents(), float))
        px = fx / float(np.median(z)) if len(z) else 0.0
        widths.append((float(ext[0]) * px, size * float(ext[1]) * px * px) if px else None)
    fg = cv2.dilate(masks.any(0).astype(np.uint8), np.ones((31, 31), np.uint8)) > 0
    try:
        return sizes, float(estimate_depth_noise(rec, exclude=fg, surface=masks, surface_frame=frame).k), widths
    except ValueError:   # one frame: no noise to measure between frames; the parts' sizes alone
        return sizes, 0.0, widths
