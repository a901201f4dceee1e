"""Segment's magnified second look: the learned segmenter's view of a small region of parts,
magnified (a far camera: parts a few pixels across), and duplicate detections dropped."""
from __future__ import annotations

import logging
import math

import cv2
import numpy as np

from vid2sim.models.segmenter.model import Detection, Segmenter, mask_iou

log = logging.getLogger(__name__)


ZOOM_MIN = 1.5  # a region that would be upscaled less than this is seen at full frame
MIN_PIXELS_ZOOMED = 20  # frame pixels of the smallest part kept from a magnified view
ZOOM_TILES = 3  # at most this many overlapping views along the region's long side (an elongated region)


def zoom_tiles(dets: list[Detection], depth: np.ndarray, zoom: float) -> tuple[list[tuple[int, int, int, int]], float]:
    """The views (x0, y0, x1, y1) pixels, of the frame's aspect, to look at again magnified,
    and their magnification; ([], 1.0) for none.

    The region is the box around the detections narrower and lower than half the frame (a
    wall or the floor is no part to magnify; else around the pixels with depth, where they
    cover less than half the frame), grown by a quarter of its size and 8 px on every
    side. One view holds it where that magnifies it at least ``ZOOM_MIN`` times; a region
    much taller or wider than the frame's aspect (a hanging chain) that one view cannot
    magnify so much is instead covered by up to ``ZOOM_TILES`` views along its long side,
    each overlapping the next by half. The magnification is at most ``zoom``; none below
    ``ZOOM_MIN``.
    """
    h, w = depth.shape
    dets = [d for d in dets if all(a < b / 2 for a, b in zip(_span(d.mask), (w, h)))]  # not a wall or floor
    if dets:
        mask = np.any([d.mask for d in dets], axis=0)
    else:
        mask = depth > 0
        if mask.mean() > 0.5:
            return [], 1.0
    v, u = np.nonzero(mask)
    if not len(u):
        return [], 1.0
    cx, cy = 0.5 * (u.min() + u.max() + 1), 0.5 * (v.min() + v.max() + 1)
    bw, bh = 1.5 * (u.max() + 1 - u.min()) + 16, 1.5 * (v.max() + 1 - v.min()) + 16
    one = min(w / bw, h / bh)
    along_x = min(2 * w / bw, h / bh)  # views side by side, overlapping by half
    along_y = min(w / bw, 2 * h / bh)
    s = min(one if one >= ZOOM_MIN else max(along_x, along_y), zoom)
    if s < ZOOM_MIN:
        return [], 1.0
    tw, th = w / s, h / s
    nx = 1 if bw <= tw else min(ZOOM_TILES, math.ceil(2 * bw / tw - 1))
    ny = 1 if bh <= th or nx > 1 else min(ZOOM_TILES, math.ceil(2 * bh / th - 1))
    views = []
    for x in np.linspace(cx - bw / 2 + tw / 2, cx + bw / 2 - tw / 2, nx) if nx > 1 else [cx]:
        for y in np.linspace(cy - bh / 2 + th / 2, cy + bh / 2 - th / 2, ny) if ny > 1 else [cy]:
            x0 = int(round(min(max(x - tw / 2, 0), w - tw)))
            y0 = int(round(min(max(y - th / 2, 0), h - th)))
            views.append((x0, y0, min(x0 + int(round(tw)), w), min(y0 + int(round(th)), h)))
    return views, s


def _span(mask: np.ndarray) -> tuple[int, int]:
    """(width, height) pixels of a mask's bounding box."""
    v, u = np.nonzero(mask)
    return (int(np.ptp(u)) + 1, int(np.ptp(v)) + 1) if len(u) else (0, 0)


def _touches_cut(mask: np.ndarray, box: tuple[int, int, int, int], shape: tuple[int, int]) -> bool:
    """The view's mask reaches a side of the view that is not the frame's border (a part cut by the view)."""
    x0, y0, x1, y1 = box
    h, w = shape
    return bool((x0 > 0 and mask[:, 0].any()) or (x1 < w and mask[:, -1].any())
                or (y0 > 0 and mask[0].any()) or (y1 < h and mask[-1].any()))


def predict_zoomed(net: Segmenter, normal_img: np.ndarray, depth: np.ndarray, score_threshold: float,
                   zoom: float) -> tuple[list[Detection], float]:
    """The network's detections (class scores mirror-averaged), looking again at the parts
    magnified where they fill little of the frame, and the magnification used (1: none).

    The network sees frames resized to ``network.INPUT_SIZE`` and proposes nothing much
    narrower than its smallest anchors (16 px at 1/4 aspect): a rod 3-5 px across at 320 x 240
    is missed or merged. Where ``zoom_tiles`` finds a small region, each of its views is cut
    out, upscaled (nearest neighbour) and detected again; their masks, mapped back to the
    frame, replace the first pass's detections inside them. With several views, a mask that
    reaches a side a view cut through is dropped (the overlapping view holds that part
    whole), a part seen in two views is kept once (mask IoU above 0.5: the higher score), and
    a first-pass detection stays unless the views' masks cover half of it.
    """
    first = net.predict(normal_img, score_threshold)
    views, scale = zoom_tiles(first, depth, zoom) if zoom > 1 else ([], 1.0)
    if not views:
        return net.mirror_average(normal_img, first), 1.0
    h, w = normal_img.shape[:2]
    out: list[Detection] = []
    inside = np.zeros((h, w), bool)
    for box in views:
        x0, y0, x1, y1 = box
        inside[y0:y1, x0:x1] = True
        crop = normal_img[y0:y1, x0:x1]
        big = cv2.resize(crop, (w, int(round(w * (y1 - y0) / (x1 - x0)))), interpolation=cv2.INTER_NEAREST)
        for d in net.predict(big, score_threshold, mirror=True):
            small = cv2.resize(d.mask.astype(np.float32), (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA) >= 0.5
            if not small.any() or (len(views) > 1 and _touches_cut(small, box, (h, w))):
                continue
            m = np.zeros((h, w), bool)
            m[y0:y1, x0:x1] = small
            out.append(Detection(m, d.label, d.score, d.class_scores))
    out = _dedupe(sorted(out, key=lambda d: -d.score))
    if len(views) > 1:  # a part longer than the views' overlap is cut in every view: the first pass's stays
        inside = np.any([d.mask for d in out], axis=0) if out else np.zeros((h, w), bool)
    rest = [d for d in net.mirror_average(normal_img, first) if (d.mask & inside).sum() < 0.5 * d.mask.sum()]
    log.debug("segment: looked again at %s magnified %.1f times: %d parts", views, scale, len(out))
    return sorted(out + rest, key=lambda d: -d.score), scale


def _dedupe(dets: list[Detection], iou: float = 0.5) -> list[Detection]:
    kept: list[Detection] = []
    for d in dets:
        if all(mask_iou(d.mask, k.mask) <= iou for k in kept):
            kept.append(d)
    return kept
