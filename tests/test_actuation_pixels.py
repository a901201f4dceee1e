"""Known actuators' pixels explained (pipeline/actuators.py): the pusher's pixels of a
synthetic ``pushed`` recording, found from its recorded pose and shape, against the
renderer's own tip mask (truth_masks, written by a different renderer)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from vid2sim.datasets.recording import open_recording
from vid2sim.pipeline.actuators import ExplainedRecording, explain_actuators, fill_hidden, off_actuators


@pytest.fixture(scope="module")
def pushed(tmp_path_factory):
    from vid2sim.datasets.synthetic import make_recording

    # 60 frames at 30 fps: the tip reaches the linkage (seed 0) at about frame 45
    return make_recording("pushed", tmp_path_factory.mktemp("push") / "rec", frames=60, size=(320, 240))


def test_the_pushers_pixels_are_explained_and_the_parts_kept(pushed):
    from vid2sim.datasets.synthetic import TIP_ID

    rec = open_recording(pushed)
    ex = explain_actuators(rec)
    assert isinstance(ex, ExplainedRecording)
    assert "pusher_tip" not in ex.shapes and set(ex.shapes) == {"link1", "link2", "link3"}
    for k in (0, 45, 59):
        ids = cv2.imread(str(pushed / "truth_masks" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
        tip, body = ids == TIP_ID, (ids > 0) & (ids < 254)
        hidden = ex.hidden(k)
        assert tip.sum() > 50
        assert (hidden & tip).sum() >= 0.97 * tip.sum(), k               # the tip's pixels are explained
        assert (hidden & body).sum() <= 0.02 * body.sum(), k             # the parts' pixels are kept
        assert (hidden & ~tip & ~body).sum() <= 0.5 * tip.sum(), k       # a one-pixel ring of floor at most
        d = ex.depth(k)
        assert np.all(d[hidden] == 0) and np.array_equal(d[~hidden], rec.depth(k)[~hidden])


def test_the_hole_the_pusher_leaves_is_no_part_and_a_link_touching_it_is_kept(pushed):
    """Frame 0: the segmenter (magnified look) finds the tip's hole as a box (216 of its 245 px
    hidden); frame 45: a link's mask holds the tip it touches (171 of 646 px hidden). The
    first is dropped, the second and the other links kept, at full and at half resolution."""
    from vid2sim.datasets.synthetic import TIP_ID
    from vid2sim.models.segmenter.model import Detection
    from vid2sim.pipeline.segment import SegmentConfig, _candidates

    ex = explain_actuators(open_recording(pushed))
    cfg = SegmentConfig()
    for k in (0, 45):
        ids = cv2.imread(str(pushed / "truth_masks" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
        links = [ids == b for b in (1, 2, 3)]
        assert (ids == TIP_ID).sum() > 100, k
        found = _candidates(cfg, ex, [k], cfg.zoom)[0].found
        hidden = ex.hidden(k)
        share = [(d.mask & hidden).sum() / d.mask.sum() for d in found]
        assert max(share) < 0.3, (k, share)                    # no detection is mostly the tip's hole
        for link in links:                                     # every link found
            assert max((d.mask & link).sum() for d in found) >= 0.8 * link.sum(), k
        hole = cv2.dilate(hidden.astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
        dets = [Detection(hole, 0, 0.5), *[Detection(m | (hole & (cv2.dilate(m.astype(np.uint8), np.ones((9, 9),
                                                                     np.uint8)) > 0)), 0, 0.8) for m in links]]
        assert len(off_actuators(ex, k, dets)) == len(dets) - 1, k   # the hole alone is dropped
        half = [Detection(d.mask.reshape(120, 2, 160, 2).any(axis=(1, 3)), 0, d.score) for d in dets]
        assert [d.score for d in off_actuators(ex, k, half, s=2)] == [0.8, 0.8, 0.8], k


def test_a_recording_without_actuators_is_itself(tmp_path):
    from vid2sim.datasets.synthetic import make_recording

    rec = open_recording(make_recording("cartpole", tmp_path / "rec", frames=2, size=(80, 60)))
    assert explain_actuators(rec) is rec


def test_fill_hidden_restores_a_plane():
    """Inpainting the hole an actuator leaves in a tilted plane's depth recovers it to 1 mm."""
    v, u = np.mgrid[0:60, 0:80]
    plane = (1.0 + 0.002 * u + 0.001 * v).astype(np.float32)
    hole = np.zeros_like(plane, bool)
    hole[20:35, 30:42] = True
    filled = fill_hidden(np.where(hole, 0, plane), hole)
    assert np.abs(filled - plane)[hole].max() < 1e-3
    assert np.abs(np.where(hole, 0, plane) - plane)[hole].max() > 0.9   # the test's hole was one
