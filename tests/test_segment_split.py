"""A detection partly still and partly moving is split where that names the library better
(pipeline/segment_split.py, hooked into segment._candidates)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.models.segmenter.model import Detection
from vid2sim.pipeline import segment
from vid2sim.pipeline.run import StageError
from vid2sim.pipeline.segment import SegmentConfig, run
from vid2sim.pipeline.segment_split import split_pieces
from vid2sim.pipeline.segment_still import DepthMotion

CARCASS = Shape("carcass", "box", size=(0.5, 0.4, 0.6))
DRAWER = Shape("drawer", "box", size=(0.4, 0.36, 0.12))
POLE = Shape("pole", "capsule", radius=0.025, length=0.5)
CAM = Camera(320, 240, 300.0, 300.0, 160.0, 120.0)  # 150 px per m at 2 m
BOX = CLASSES.index("box")


def _det(mask: np.ndarray, label: int = BOX, score: float = 0.9) -> Detection:
    return Detection(mask, label, score, np.eye(len(CLASSES))[label] * score)


def _cabinet(path: Path, n: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """A carcass's 0.5 x 0.6 m front at 2.0 m with a 0.4 x 0.12 m drawer front 10 mm proud of it,
    sliding 0.15 m out toward the camera over n frames, nothing behind; (front, drawer) masks."""
    front = np.zeros((240, 320), bool)
    front[75:165, 123:198] = True  # 90 x 75 px
    drawer = np.zeros((240, 320), bool)
    drawer[85:103, 130:190] = True  # 18 x 60 px
    with RecordingWriter(path, CAM, {"carcass": CARCASS, "drawer": DRAWER}) as w:
        for f in range(n):
            d = np.zeros((240, 320), np.float32)
            d[front] = 2.0
            d[drawer] = 1.99 - 0.15 * f / (n - 1)
            w.add(d)
    return front, drawer


def _swing(path: Path, n: int = 24) -> np.ndarray:
    """A 0.5 x 0.05 m rod at 2.0 m (75 x 8 px) swinging +-0.25 rad about its top end; its mask in
    frame 0. Its pixels within about 20 px of the pivot stay on the rod: a still piece."""
    with RecordingWriter(path, CAM, {"pole": POLE}) as w:
        for f in range(n):
            d = np.zeros((240, 320), np.float32)
            a = 0.25 * np.sin(2 * np.pi * f / n)
            for t in np.linspace(0, 75, 300):
                u, v = int(round(160 + t * np.sin(a))), int(round(60 + t * np.cos(a)))
                d[v - 4:v + 4, u - 4:u + 4] = 2.0
            w.add(d)
    return open_recording(path).depth(0) > 0


def _one_detection(monkeypatch, label: int):
    """segment's detector stand-in: one detection, every pixel with a depth reading."""
    monkeypatch.setattr(segment, "detect", lambda method, depth, *a, **k: [_det(depth > 0, label)])


def test_a_drawer_front_in_the_carcass_face_is_split_off_as_it_slides_out(tmp_path, monkeypatch):
    front, drawer = _cabinet(tmp_path / "rec")
    _one_detection(monkeypatch, BOX)
    rec = open_recording(tmp_path / "rec")
    seg = run(SegmentConfig(overlay=False, split_samples=12), rec, tmp_path / "run")
    names = list(seg.shape_names)
    assert sorted(names) == ["carcass", "drawer"]
    m_drawer = seg.masks[names.index("drawer")] > 0
    m_carcass = seg.masks[names.index("carcass")] > 0
    assert (m_drawer & drawer).sum() / (m_drawer | drawer).sum() > 0.95
    assert not (m_carcass & drawer).any() and (m_carcass & front & ~drawer).sum() > 0.9 * (front & ~drawer).sum()
    # without the split (split_samples=0, the default) the one mask is named carcass, the drawer
    # unnamed: segment_nested cuts the drawer front from it by motion; with no motion cue at all
    # the drawer is missing
    seg0 = run(SegmentConfig(overlay=False), rec, tmp_path / "run0")
    assert sorted(seg0.shape_names) == ["carcass", "drawer"]
    m_drawer = seg0.masks[list(seg0.shape_names).index("drawer")] > 0
    assert (m_drawer & drawer).sum() / (m_drawer | drawer).sum() > 0.9
    with pytest.raises(StageError, match="drawer is missing"):
        run(SegmentConfig(overlay=False, still_samples=0, missing_samples=0), rec, tmp_path / "run1")


def test_a_rod_swinging_about_its_end_is_not_cut_at_its_still_end(tmp_path, monkeypatch):
    rod = _swing(tmp_path / "rec")
    dm = DepthMotion(open_recording(tmp_path / "rec"), 1, 12)
    changed, _, regions = dm.changed(0)
    assert len(split_pieces(_det(rod), regions, changed.mean(0), 100)) == 2  # a moving tip and a still top
    _one_detection(monkeypatch, CLASSES.index("capsule"))
    cfg = SegmentConfig(overlay=False, frames=(0,), split_samples=12)
    seg = run(cfg, open_recording(tmp_path / "rec"), tmp_path / "run")
    assert list(seg.shape_names) == ["pole"]
    assert (seg.masks[0] > 0).tolist() == rod.tolist()  # the whole rod, its still top included


def test_split_pieces_needs_a_share_moving_and_a_share_still():
    mask = np.zeros((100, 100), bool)
    mask[10:90, 10:90] = True  # 6400 px
    regions = np.zeros((100, 100), bool)
    regions[11:29, 11:89] = True  # 1600 px moving with its 1 px rim: a quarter
    pieces = split_pieces(_det(mask), regions, regions.astype(float), 20)
    assert [int(p.mask.sum()) for p in pieces] == [1600, 4800]
    assert all(p.label == BOX and p.score == 0.9 for p in pieces)
    regions[:] = False
    regions[10:13, 10:90] = True  # 320 px with its rim: 5 %, a moving edge
    assert split_pieces(_det(mask), regions, regions.astype(float), 20) == []
    regions[:] = False
    regions[10:90, 10:85] = True  # 94 % moving, 400 px still
    assert split_pieces(_det(mask), regions, regions.astype(float), 20) == []


def test_pixels_changed_in_a_few_frames_join_the_moving_part_they_touch_or_stop_the_split():
    mask = np.zeros((100, 100), bool)
    mask[10:90, 10:90] = True
    regions = np.zeros((100, 100), bool)
    regions[10:30, 10:90] = True  # the moving core (a door's free side)
    freq = regions.astype(float)
    freq[30:40, 10:90] = 0.3  # beside the core, changed in its widest swing only (near the hinge)
    freq[60:62, 10:90] = 0.3  # apart from it: 4 % of the still piece (noise)
    pieces = split_pieces(_det(mask), regions, freq, 20)
    assert [int(p.mask.sum()) for p in pieces] == [31 * 80, 49 * 80]  # the core, its 10 rows and 1 px
    # changed in under GROW_SHARE of the frames: not moving, and a still piece with 20 % of its
    # pixels changed at times is no fixed part (the side of a door near its hinge): no split
    freq[30:40, 10:90] = 0.1
    assert split_pieces(_det(mask), regions, freq, 20) == []
