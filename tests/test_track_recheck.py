"""The tracker's second look at a body whose fit turned much worse than in its last frames
(track_recheck.py): a capsule that a frame's steps left 6 mm along its own axis, on a slab's edge,
is aligned again from its last good pose; the judge of "much worse" in numbers."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording
from vid2sim.datasets.shapes import Shape
from vid2sim.models.render import make_renderer
from vid2sim.pipeline import track
from vid2sim.pipeline.artifacts import Segmentation
from vid2sim.pipeline.track_recheck import HISTORY, FitHistory, much_worse, nearest_twin, recheck, relative

ROD = Shape("rod", "capsule", radius=0.02, length=0.1)
SLAB = Shape("slab", "box", size=(0.4, 0.03, 0.2))
ROD_ACROSS = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])   # the rod's axis along world x
STILL = torch.zeros(2, 6, dtype=torch.float64)


def _rod_above_slab(path: Path) -> tuple[np.ndarray, Segmentation]:
    """A rod (40 mm wide, 140 mm long) moving down the view 30-40 mm a frame towards a still slab
    150-300 mm below it, both 1.2 m in front of a wall 2 m away (320x240, clean depth); returns the
    true poses (5, 2, 4, 4) and the segmentation of frame 0."""
    cam = Camera(320, 240, 240.0, 240.0, 159.5, 119.5)
    r = make_renderer(cam, [ROD, SLAB])
    truth = np.tile(np.eye(4), (5, 2, 1, 1))
    truth[:, 0, :3, :3] = ROD_ACROSS
    truth[:, 0, 1, 3] = [-0.2, -0.16, -0.12, -0.08, -0.05]
    truth[:, :, 2, 3] = 1.2
    truth[:, 1, 1, 3] = 0.1
    with RecordingWriter(path, cam, {"rod": ROD, "slab": SLAB}) as w:
        for i in range(len(truth)):
            out = r.render(torch.as_tensor(truth[i]))
            body = out.body.numpy().reshape(240, 320)
            w.add(np.where(body >= 0, out.depth.numpy().reshape(240, 320), 2.0).astype(np.float32))
            if i == 0:
                masks = np.stack([body == 0, body == 1]).astype(np.uint8)
    return truth, Segmentation(masks, 0, ["rod", "slab"], np.ones(2))


def test_a_rod_left_along_its_axis_is_aligned_again_from_its_last_good_pose(tmp_path):
    """Frames 0-3 tracked from the truth fit to 0.2 mm; frame 4 started 100 mm along the rod's axis
    and 30 mm towards the slab ends 5.9 mm off (along its axis; residual 0.9 mm, seen on 154 of its
    212 rays): much worse than before. The second look, from frame 3's pose, finds it within 0.5 mm."""
    truth, seg = _rod_above_slab(tmp_path / "rec")
    rec = open_recording(tmp_path / "rec")
    cfg = track._with_depth_noise(track.TrackConfig(overlay=False), rec, seg)
    scene = track.TrackScene(rec, [track.Primitive.from_shape(s) for s in (ROD, SLAB)], cfg)
    scene.set_background(rec.depth(0), seg.masks, None)
    tracker = track._Tracker(cfg, scene, False)
    history = FitHistory(torch.as_tensor(truth[0]), 0)
    for i in range(4):
        T = torch.as_tensor(truth[i])
        T, lost, res, px, _ = tracker.frame(rec.depth(i), T, T, use_prior=False)
        history.update(cfg, i, T, relative(cfg, scene, T, res), px, lost, STILL)
    assert len(history.res[0]) == 4 and int(history.good.frame[0]) == 3
    start = torch.as_tensor(truth[4]).clone()
    start[0, :2, 3] += torch.tensor([0.1, 0.03], dtype=torch.float64)
    result = tracker.frame(rec.depth(4), start, start, use_prior=False)
    before = np.linalg.norm(result[0][0, :3, 3].numpy() - truth[4, 0, :3, 3])
    assert before > 0.004 and not result[1].any()
    assert much_worse(cfg, history, relative(cfg, scene, result[0], result[2]), result[3], result[1]).tolist() == \
        [True, False]
    out = recheck(tracker, rec, history, 4, rec.depth(4), None, result)
    after = np.linalg.norm(out[0][0, :3, 3].numpy() - truth[4, 0, :3, 3])
    assert after < 0.0005 and not out[1].any(), (before, after)
    assert np.linalg.norm(out[0][1].numpy() - truth[4, 1]) < 0.001   # the slab stays


def test_much_worse_by_residual_or_by_pixels_and_a_new_normal_after_history_frames():
    """Typical relative residual 0.4 on 1000 pixels: 0.95 is much worse (> 1.5 x 0.4 and > 0.4 + 0.5),
    0.85 is not (by less than the 0.5 floor), 550 pixels are (< 0.6 x 1000), 650 are not; a lost body
    never is. Judged much worse ``HISTORY`` (5) frames in a row, a body starts its history again there."""
    cfg = track.TrackConfig()
    T = torch.eye(4, dtype=torch.float64).repeat(2, 1, 1)
    h = FitHistory(T, 0)
    for i in range(3):
        h.update(cfg, i, T, np.array([0.4, 0.4]), np.array([1000, 1000]), np.zeros(2, bool), STILL)
    lost = np.zeros(2, bool)
    assert much_worse(cfg, h, np.array([0.95, 0.85]), np.array([1000, 1000]), lost).tolist() == [True, False]
    assert much_worse(cfg, h, np.array([0.4, 0.4]), np.array([550, 650]), lost).tolist() == [True, False]
    assert much_worse(cfg, h, np.array([0.95, 0.95]), np.array([1000, 1000]), np.array([True, False])).tolist() == \
        [False, True]
    for i in range(3, 3 + HISTORY):
        h.update(cfg, i, T, np.array([2.0, 0.4]), np.array([1000, 1000]), lost, STILL)
    assert list(h.res[0]) == [(2.0, 1000.0)] and h.good.frame.tolist() == [7, 7]   # the new normal: from frame 7
    assert not much_worse(cfg, FitHistory(T, 0), np.array([9.0, 9.0]), np.array([1, 1]), lost).any()  # no history


def test_the_twin_nearest_the_frames_own_fit_is_kept():
    """A capsule end over end, a box a half turn about its y axis: each shows the part as before, and
    the orientation kept is the one nearest the reference (here the unturned one); a sphere has none."""
    R = torch.as_tensor(ROD_ACROSS)
    flip = R * torch.tensor([1.0, -1.0, -1.0], dtype=torch.float64)   # a half turn about the rod's x axis
    rod, box = track.Primitive.from_shape(ROD), track.Primitive.from_shape(SLAB)
    assert torch.allclose(nearest_twin(rod, flip, R), R) and torch.allclose(nearest_twin(rod, R, R), R)
    half_y = R * torch.tensor([-1.0, 1.0, -1.0], dtype=torch.float64)
    assert torch.allclose(nearest_twin(box, half_y, R), R)
    ball = track.Primitive.from_shape(Shape("ball", "sphere", radius=0.05))
    assert torch.allclose(nearest_twin(ball, flip, R), flip)
