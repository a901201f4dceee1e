"""Segment's per-mask work done in the mask's box: the same answers as over the whole frame."""
from __future__ import annotations

import numpy as np

from vid2sim.models.segmenter.geometric import split_bent
from vid2sim.models.segmenter.model import Detection, boxed, iou_above, mask_iou
from vid2sim.pipeline.segment_zoom import _dedupe


def _random_masks(rng: np.random.Generator, n: int, shape=(40, 50)) -> list[np.ndarray]:
    """Rectangles (some empty, some thinned at random), touching the frame's sides or not."""
    h, w = shape
    out = []
    for _ in range(n):
        m = np.zeros(shape, bool)
        y, x = rng.integers(0, h), rng.integers(0, w)
        m[y:y + rng.integers(0, 16), x:x + rng.integers(0, 16)] = True
        if rng.random() < 0.3:
            m &= rng.random(shape) < 0.7
        out.append(m)
    return out


def test_iou_above_agrees_with_the_whole_frame_iou_for_masks_apart_touching_nested_and_empty():
    rng = np.random.default_rng(0)
    masks = _random_masks(rng, 60)
    a = np.zeros((40, 50), bool)
    a[10:20, 10:20] = True
    b = a.copy()
    b[10:20, 20:29] = True  # IoU 100 / 190 = 0.526: above 0.5
    c = a.copy()
    c[10:20, 20:31] = True  # IoU 100 / 210 = 0.476: not
    masks += [a, b, c, np.zeros((40, 50), bool)]
    assert iou_above(boxed(a), boxed(b), 0.5) and not iou_above(boxed(a), boxed(c), 0.5)
    assert boxed(a).box == (10, 10, 20, 20) and boxed(a).area == 100
    assert boxed(masks[-1]).area == 0
    pairs = 0
    for i, p in enumerate(masks):
        for q in masks[i + 1:]:
            for t in (0.0, 0.3, 0.5):
                assert iou_above(boxed(p), boxed(q), t) == (mask_iou(p, q) > t)
            pairs += 1
    assert pairs == 64 * 63 // 2


def test_dedupe_keeps_what_the_pairwise_whole_frame_iou_keeps():
    rng = np.random.default_rng(1)
    for trial in range(200):
        dets = [Detection(m, 0, 0.5) for m in _random_masks(rng, int(rng.integers(1, 12)))]
        kept: list[Detection] = []
        for d in dets:  # the definition: no kept mask overlaps it by IoU above 0.5
            if all(mask_iou(d.mask, k.mask) <= 0.5 for k in kept):
                kept.append(d)
        assert [id(d) for d in _dedupe(dets)] == [id(d) for d in kept], trial


def test_a_bent_rod_cut_out_of_its_box_splits_as_in_the_whole_frame():
    frame = np.zeros((200, 240), bool)
    frame[60:70, 50:170] = True      # an L: a 120 x 10 px bar ...
    frame[60:160, 160:170] = True    # ... and a 100 px leg
    whole = split_bent(frame, np.random.default_rng(3), 40)
    y0, y1, x0, x1 = 58, 162, 48, 172
    cut = split_bent(frame[y0:y1, x0:x1], np.random.default_rng(3), 40, origin=(x0, y0))
    assert len(whole) == len(cut) == 2
    for w, c in zip(whole, cut):
        placed = np.zeros_like(frame)
        placed[y0:y1, x0:x1] = c
        assert np.array_equal(w, placed)
    assert sorted(int(p.sum()) for p in whole) == sorted(int(p.sum()) for p in cut)
