"""Segment's magnified second look: the learned segmenter's view of a small region of parts,
magnified (a far camera: parts a few pixels across), and duplicate detections dropped."""
from __future__ import annotations

import logging
import math

import cv2
import numpy as np

from vid2sim.models.segmenter.model import BoxedMask, Detection, Segmenter, boxed, iou_above

log = logging.getLogger(__name__)


ZOOM_MIN = 1.5  # a region that would be upscaled less than this is seen at full frame
MIN_PIXELS_ZOOMED = 20  # frame pixels of the smallest part kept from a magnified view
ZOOM_TILES = 3  # at most this many overlapping views along the region's long side (an elongated region)


def zoom_tiles(dets: list[Detection], depth: np.ndarray, zoom: float) -> tuple[list[tuple[int, int, int, int]], float]:
    """Every view of ``zoom_groups`` (x0, y0, x1, y1) pixels, and the least magnification
    among them; ([], 1.0) for none."""
    groups = zoom_groups(dets, depth, zoom)
    return ([v for views, _ in groups for v in views], min(s for _, s in groups)) if groups else ([], 1.0)


def zoom_groups(dets: list[Detection], depth: np.ndarray, zoom: float
                ) -> list[tuple[list[tuple[int, int, int, int]], float]]:
    """The regions to look at again magnified: per region, its views (x0, y0, x1, y1)
    pixels, of the frame's aspect, and their magnification (at most ``zoom``, at least
    ``ZOOM_MIN``); regions that cannot be magnified so much are left out.

    A region is a group of detections narrower and lower than half the frame (a wall or the
    floor is no part to magnify; without any, the pixels with depth, where they cover less
    than half the frame): masks within ``GROUP_GAP`` of the frame's width of each other are
    one group, and two groups are one region where the box around both is still magnified
    ``zoom`` times (``_region_views``). A mechanism and a distractor across the frame are
    so looked at apart, each magnified as its own size allows (one box around both, at
    far framing, is too large to magnify at all). A region's views are ``_region_views``'s.
    """
    h, w = depth.shape
    dets = [d for d in dets if all(a < b / 2 for a, b in zip(_span(d.mask), (w, h)))]  # not a wall or floor
    if dets:
        masks = [d.mask for d in dets]
    else:
        masks = [depth > 0]
        if masks[0].mean() > 0.5:
            return []
    boxes = _groups(masks, max(1, int(round(GROUP_GAP * w))))
    merged = True
    while merged:  # regions whose common box is still magnified fully are one
        merged = False
        for a in range(len(boxes)):
            for b in range(a + 1, len(boxes)):
                both = (min(boxes[a][0], boxes[b][0]), min(boxes[a][1], boxes[b][1]),
                        max(boxes[a][2], boxes[b][2]), max(boxes[a][3], boxes[b][3]))
                if _region_views(both, (h, w), zoom)[1] >= zoom:
                    boxes[a] = both
                    del boxes[b]
                    merged = True
                    break
            if merged:
                break
    out = []
    for box in sorted(boxes):
        views, s = _region_views(box, (h, w), zoom)
        if views:
            out.append((list(dict.fromkeys(views)), s))
    return out


GROUP_GAP = 0.02  # share of the frame's width: masks this close are one group (zoom_groups)


def _groups(masks: list[np.ndarray], gap: int) -> list[tuple[int, int, int, int]]:
    """Boxes (u0, v0, u1, v1) pixels, end exclusive, of the groups of ``masks`` (H, W) bool
    whose pixels come within ``gap`` px of each other (8-connected after dilation by gap / 2)."""
    union = np.any(masks, axis=0).astype(np.uint8)
    k = 2 * (gap // 2) + 1
    n, lab = cv2.connectedComponents(cv2.dilate(union, np.ones((k, k), np.uint8)), connectivity=8)
    boxes = []
    for i in range(1, n):
        v, u = np.nonzero((lab == i) & (union > 0))
        if len(u):
            boxes.append((int(u.min()), int(v.min()), int(u.max()) + 1, int(v.max()) + 1))
    return boxes


def _region_views(box: tuple[int, int, int, int], shape: tuple[int, int], zoom: float
                  ) -> tuple[list[tuple[int, int, int, int]], float]:
    """The views (x0, y0, x1, y1) of a frame of ``shape`` (H, W) that magnify the region
    ``box`` (u0, v0, u1, v1), end exclusive, and their magnification; ([], 1.0) for none.

    The region is grown by a quarter of its size and 8 px on every side. One view holds it
    where that magnifies it at least ``ZOOM_MIN`` times; a region much taller or wider than
    the frame's aspect (a hanging chain) that one view cannot magnify so much is instead
    covered by up to ``ZOOM_TILES`` views along its long side, each overlapping the next by
    half. The magnification is at most ``zoom``; none below ``ZOOM_MIN``.
    """
    h, w = shape
    u0, v0, u1, v1 = box
    cx, cy = 0.5 * (u0 + u1), 0.5 * (v0 + v1)
    bw, bh = 1.5 * (u1 - u0) + 16, 1.5 * (v1 - v0) + 16
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


def _touches_cut(mask: np.ndarray, box: tuple[int, int, int, int], shape: tuple[int, int], margin: int = 0) -> bool:
    """The view's mask reaches within ``margin`` px of a side of the view that is not the frame's
    border (a part cut by the view)."""
    x0, y0, x1, y1 = box
    h, w = shape
    k = margin + 1
    return bool((x0 > 0 and mask[:, :k].any()) or (x1 < w and mask[:, -k:].any())
                or (y0 > 0 and mask[:k].any()) or (y1 < h and mask[-k:].any()))


CUT_MARGIN = 0.01  # share of a view's width: a mask this near a side the view cuts through is cut there


def predict_zoomed(net: Segmenter, normal_img: np.ndarray, depth: np.ndarray, score_threshold: float,
                   zoom: float) -> tuple[list[Detection], float]:
    """The network's detections (class scores mirror-averaged), looking again at the parts
    magnified where they fill little of the frame, and the least magnification used (1: none).

    The network sees frames resized to ``network.INPUT_SIZE`` and proposes nothing much
    narrower than its smallest anchors (16 px at 1/4 aspect): a rod 3-5 px across at 320 x 240
    is missed or merged. For each region ``zoom_groups`` finds, each of its views is cut
    out, upscaled (nearest neighbour) and detected again; their masks, mapped back to the
    frame, replace the first pass's detections inside them. With several views of a region,
    a mask that reaches a side a view cut through is dropped (the overlapping view holds
    that part whole) and a first-pass detection stays unless the views' masks cover half of
    it; a part seen in two views is kept once (mask IoU above 0.5: the higher score). A neighbouring
    region's part that reaches into a one-view region is cut there too: such a cut piece is
    dropped where at least half of it lies in a mask another region's view holds whole
    (``_drop_cut_pieces``).
    """
    first = net.predict(normal_img, score_threshold)
    groups = zoom_groups(first, depth, zoom) if zoom > 1 else []
    if not groups:
        return net.mirror_average(normal_img, first), 1.0
    h, w = normal_img.shape[:2]
    out: list[tuple[int, Detection, bool]] = []  # (region, detection, cut by its view)
    inside = np.zeros((h, w), bool)
    for g, (views, _) in enumerate(groups):
        found = [(d, cut) for box in views
                 for d, cut in _view_detections(net, normal_img, box, score_threshold, len(views) > 1)]
        if len(views) > 1:  # a part longer than the views' overlap is cut in every view: the first pass's stays
            for d, _ in found:
                inside |= d.mask
        else:
            x0, y0, x1, y1 = views[0]
            inside[y0:y1, x0:x1] = True
        out += [(g, d, cut) for d, cut in found]
    out = _dedupe(sorted(_drop_cut_pieces(out), key=lambda d: -d.score))
    rest = [d for d in net.mirror_average(normal_img, first) if (d.mask & inside).sum() < 0.5 * d.mask.sum()]
    scale = min(s for _, s in groups)
    log.debug("segment: looked again at %s magnified %s times: %d parts", [v for v, _ in groups],
              [round(s, 1) for _, s in groups], len(out))
    return sorted(out + rest, key=lambda d: -d.score), scale


def _view_detections(net: Segmenter, normal_img: np.ndarray, box: tuple[int, int, int, int],
                     score_threshold: float, drop_cut: bool) -> list[tuple[Detection, bool]]:
    """The network's detections (mirror-averaged) in view ``box`` (x0, y0, x1, y1) of the
    (H, W, 3) normal image, upscaled to the frame's width, each with whether its mask reaches
    a side of the view inside the frame (cut by the view: within ``CUT_MARGIN`` of its width);
    masks (H, W) bool back in the frame. drop_cut: leave out the masks reaching such a side."""
    h, w = normal_img.shape[:2]
    x0, y0, x1, y1 = box
    crop = normal_img[y0:y1, x0:x1]
    big = cv2.resize(crop, (w, int(round(w * (y1 - y0) / (x1 - x0)))), interpolation=cv2.INTER_NEAREST)
    out = []
    for d in net.predict(big, score_threshold, mirror=True):
        small = cv2.resize(d.mask.astype(np.float32), (x1 - x0, y1 - y0), interpolation=cv2.INTER_AREA) >= 0.5
        if not small.any():
            continue
        if drop_cut and _touches_cut(small, box, (h, w)):
            continue
        cut = _touches_cut(small, box, (h, w), max(1, round(CUT_MARGIN * (x1 - x0))))
        m = np.zeros((h, w), bool)
        m[y0:y1, x0:x1] = small
        out.append((Detection(m, d.label, d.score, d.class_scores), cut))
    return out


def _drop_cut_pieces(found: list[tuple[int, Detection, bool]], share: float = 0.5) -> list[Detection]:
    """The detections of ``found`` (region, detection, cut by its view) less each cut one with at
    least ``share`` of its pixels inside an uncut mask of another region's view: the piece of a
    neighbouring region's part that the view cut through, which that region's own view holds whole."""
    whole = [(g, d.mask) for g, d, cut in found if not cut]
    out = []
    for g, d, cut in found:
        n = int(d.mask.sum())
        if cut and any(k != g and int((d.mask & m).sum()) >= share * n for k, m in whole):
            continue
        out.append(d)
    return out


def _dedupe(dets: list[Detection], iou: float = 0.5) -> list[Detection]:
    """``dets`` less each one whose mask IoU with an earlier kept one is above ``iou`` (>= 0)."""
    kept: list[Detection] = []
    boxes: list[BoxedMask] = []
    for d in dets:
        b = boxed(d.mask)
        if not any(iou_above(b, k, iou) for k in boxes):
            kept.append(d)
            boxes.append(b)
    return kept
