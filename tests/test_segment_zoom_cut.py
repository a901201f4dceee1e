"""segment_zoom.predict_zoomed: a part of one region reaching into a neighbouring region's view is
cut by that view; the cut piece is dropped where the part's own view holds it whole."""
from __future__ import annotations

import cv2
import numpy as np

from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline.segment_zoom import predict_zoomed, zoom_groups

H, W = 240, 424
BOXES = [(100, 110, 180, 130), (200, 110, 280, 130)]  # (u0, v0, u1, v1): two parts 20 px apart


class BlobNet:
    """A stand-in segmenter: every 8-connected blob of non-zero pixels is a box (label 1, score 0.9),
    its mask clear of the image's outer 4 px (a network's mask stops short of a view's side)."""

    def predict(self, img: np.ndarray, score_threshold: float, mirror: bool = False) -> list[Detection]:
        n, lab = cv2.connectedComponents((img[..., 0] > 0).astype(np.uint8), connectivity=8)
        inner = np.zeros(lab.shape, bool)
        inner[4:-4, 4:-4] = True
        return [Detection((lab == k) & inner, 1, 0.9) for k in range(1, n) if ((lab == k) & inner).any()]

    def mirror_average(self, img: np.ndarray, dets: list[Detection]) -> list[Detection]:
        return dets


def _frame() -> np.ndarray:
    img = np.zeros((H, W, 3), np.uint8)
    for u0, v0, u1, v1 in BOXES:
        img[v0:v1, u0:u1] = 200
    return img


def test_the_groups_are_looked_at_apart_and_each_view_reaches_the_other_part():
    """The set-up the next test rests on: two regions, one view each, and each view takes in
    a few columns of the other region's part."""
    net, img = BlobNet(), _frame()
    groups = zoom_groups(net.predict(img, 0.5), np.ones((H, W)), 4.0)
    assert len(groups) == 2 and all(len(views) == 1 for views, _ in groups)
    (a,), (b,) = sorted(views for views, _ in groups)
    assert a[2] > BOXES[1][0] + 2 and b[0] < BOXES[0][2] - 2, (a, b)


def test_a_neighbours_piece_cut_by_a_view_is_not_a_part():
    """Two boxes, each seen whole in its own view and cut (stopping a pixel short of the cut) in
    the other's: two parts come back, each the whole box, not four."""
    dets, scale = predict_zoomed(BlobNet(), _frame(), np.ones((H, W)), 0.5, 4.0)
    assert scale > 2.5
    assert len(dets) == 2, [tuple(np.nonzero(d.mask)[1][[0, -1]]) for d in dets]
    spans = sorted((int(np.nonzero(d.mask)[1].min()), int(np.nonzero(d.mask)[1].max())) for d in dets)
    for (lo, hi), (u0, _, u1, _) in zip(spans, BOXES):
        assert abs(lo - u0) <= 2 and abs(hi - (u1 - 1)) <= 2, spans
