"""Learned masks cut where the frame's depth geometry says they hold several parts.

The network (28x28 mask head, trained from scratch) sometimes returns one mask over
parts that touch (two rods of a chain, a row of links, a door and the carcass behind
it), and snapping to depth regions (``geometric.snap_to_regions``) can make it worse: a
depth region that holds two rods meeting at a joint goes to the mask of either. The
training-free segmenter (``geometric.segment_geometric``: depth discontinuities, concave
creases, cutting bent rod chains and balls off rods) separates such parts, but it also
cuts single parts into fragments (more so on noisy depth), so a mask is split only when
the geometry is unambiguous:

- the mask holds two or three geometric parts, each mostly inside it and each at least
  ``MIN_SHARE`` of it, that together cover at least ``COVER`` of it (a part fragmented
  by noise comes in more, smaller pieces that leave gaps);
- the mask as a whole is not a sphere (``geometric.region_features`` sphere inliers
  above ``SPHERE_INLIERS``): a ball is one part however the geometry cuts it;
- it is not a rod and a "sphere" no thicker than the rod: that is a capsule's hemispherical
  end, not a ball on a rod;
- on noisy depth (``depth_noise`` above ``MAX_NOISE``), where the geometric cuts often
  follow the noise, only where the network itself saw one of the held parts on its own:
  another of its detections covers that part alone (IoU at least ``SECOND_OPINION``; on the
  realistic-noise cabinet the whole-cabinet mask holds door, drawer and carcass, and the
  network's own door mask matches the geometric door).

A later mask made mostly of parts already split out of an earlier one is the same parts
seen again and is dropped. The thresholds were chosen on training-stream frames
(``TRAIN_SEED`` samples 100000-100199, clean and noisy; not the benchmark's seed); their
measurements are in docs/decisions.md ("Settings and their measured reasons").
It does not re-classify (``refine`` does) and never merges masks.
"""
from __future__ import annotations

import cv2
import numpy as np

from vid2sim.models.segmenter.geometric import SPHERE, region_features
from vid2sim.models.segmenter.model import Detection, box_overlap, boxed, mask_iou

INSIDE = 0.6  # share of a geometric part inside a learned mask for it to count as held
MIN_SHARE = 0.15  # a held part must be at least this share of the mask's region pixels
COVER = 0.9  # share of the mask's region pixels the held parts must cover to split it
SPHERE_INLIERS = 0.6  # a mask whose points fit one sphere this well is never split
CAP_RATIO = 1.5  # a "sphere" piece thinner than this times the rod beside it is a capsule end
SEEN = 0.7  # share of a later mask's region pixels inside already split-out parts for it to be dropped
# Median |depth - smoothed depth| / z^2 (1/m): 0.03e-3 to 1.0e-3 on clean training-stream
# frames (millimetre rounding, edges), 2.5e-3 to 2.9e-3 with realistic sensor noise.
MAX_NOISE = 1.75e-3
SECOND_OPINION = 0.5  # noisy depth: IoU of another detection with a held part that corroborates the split


def depth_noise(depth: np.ndarray, P: np.ndarray, N: np.ndarray) -> float:
    """Median |depth - smoothed depth| / z^2 (1/m) over the pixels with a normal: the depth
    noise relative to the quadratic growth of a structured-light or stereo sensor's."""
    z = P[..., 2]
    use = (depth > 0) & (z > 0) & np.any(N != 0, axis=-1)
    if not use.any():
        return 0.0
    return float(np.median(np.abs(depth[use] - z[use]) / z[use] ** 2))


def _is_sphere(mask: np.ndarray, P: np.ndarray, N: np.ndarray, rng: np.random.Generator) -> bool:
    valid = np.any(N != 0, axis=-1)
    use = (cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0) & valid
    if use.sum() < 20:
        return False
    f = region_features(P[use], N[use], rng)
    return bool(f[1] > SPHERE_INLIERS)


def _thickness(mask: np.ndarray) -> float:
    """Largest inscribed radius (px) of a mask."""
    return float(cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5).max())


def _capsule_end(parts: list[Detection]) -> bool:
    """Two pieces, one a "sphere" no thicker than the other: a rod and its rounded end."""
    if len(parts) != 2:
        return False
    for a, b in (parts, parts[::-1]):
        if a.label == SPHERE and _thickness(a.mask) < CAP_RATIO * _thickness(b.mask):
            return True
    return False


def split_merged(dets: list[Detection], parts: list[Detection], regions: np.ndarray, P: np.ndarray,
                 N: np.ndarray, rng: np.random.Generator, min_pixels: int = 40,
                 noisy: bool = False) -> list[Detection]:
    """dets: learned detections (snapped), best first; parts: ``segment_geometric``'s
    detections of the frame; regions: (H, W) its ``geometric.depth_regions`` (0 = edge);
    P, N: (H, W, 3) its ``frame_geometry``; noisy: the depth is noisy (``depth_noise``
    above ``MAX_NOISE``): split only where another detection corroborates a held part.

    Returns the detections with merged masks replaced by the geometric parts they hold,
    in parent order (pieces keep their parent's score and network class scores). Shares
    are of the mask's pixels inside depth regions: a snapped mask keeps the edge pixels
    of the blob the network proposed, which along creases can be as many as the rest.
    """
    parts = [p for p in parts if p.mask.sum() >= min_pixels]
    boxes = [boxed(p.mask) for p in parts]
    area = np.array([b.area for b in boxes], float)
    taken = np.zeros(len(parts), bool)
    split_out = np.zeros(regions.shape, bool)
    out: list[Detection] = []
    for d in dets:
        m = d.mask
        inner = m & (regions > 0)
        n_inner = max(int(inner.sum()), 1)
        if split_out.any() and (inner & split_out).sum() >= SEEN * n_inner:
            continue
        box = boxed(m).box
        in_inner = {k: box_overlap(boxes[k], inner, box) for k in range(len(parts))   # parts inside the mask
                    if not taken[k] and box_overlap(boxes[k], m, box) >= INSIDE * area[k]}
        held = [k for k, n in in_inner.items() if n >= MIN_SHARE * n_inner]
        if (not 2 <= len(held) <= 3 or sum(in_inner[k] for k in held) < COVER * n_inner
                or _capsule_end([parts[k] for k in held]) or _is_sphere(m, P, N, rng)
                or noisy and not _corroborated([parts[k] for k in held], d, dets)):
            out.append(d)
            continue
        for k in held:
            taken[k] = True
            split_out |= parts[k].mask
            out.append(Detection(parts[k].mask, d.label, d.score, d.class_scores))
    return out


def _corroborated(held: list[Detection], d: Detection, dets: list[Detection]) -> bool:
    """Another detection than ``d`` covers one of the ``held`` parts alone (IoU >= ``SECOND_OPINION``)."""
    return any(mask_iou(p.mask, e.mask) >= SECOND_OPINION for p in held for e in dets if e is not d)
