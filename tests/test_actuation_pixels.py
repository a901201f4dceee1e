"""Known actuators' pixels explained (pipeline/actuators.py): the pusher's pixels of a
synthetic ``pushed`` recording, found from its recorded pose and shape, against the
renderer's own tip mask (truth_masks, written by a different renderer)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest

from vid2sim.datasets.recording import open_recording
from vid2sim.pipeline.actuators import ExplainedRecording, explain_actuators, fill_hidden


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
