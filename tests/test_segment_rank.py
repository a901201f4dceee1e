"""Segment's frame ranking is motion-free; the motion cue's proposals only fill unnamed shapes."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.shapes import CLASSES, Shape
from vid2sim.datasets.synthetic import make_recording
from vid2sim.models.segmenter.model import Detection
from vid2sim.models.segmenter.normals import smooth_depth
from vid2sim.pipeline.segment import SegmentConfig, run
from vid2sim.pipeline.segment_still import PROPOSAL_SCORE, moving_proposals

CART = Shape("cart", "box", size=(0.3, 0.16, 0.1))
POLE = Shape("pole", "capsule", radius=0.025, length=0.5)
K = np.array([[300.0, 0.0, 160.0], [0.0, 300.0, 120.0], [0.0, 0.0, 1.0]])


class _Regions:
    """A stand-in for ``DepthMotion`` whose frame has the given moving regions."""

    def __init__(self, regions: np.ndarray):
        self.regions = regions

    def changed(self, i: int):
        return None, None, self.regions


def _box(v0: int, v1: int, u0: int, u1: int) -> np.ndarray:
    m = np.zeros((240, 320), bool)
    m[v0:v1, u0:u1] = True
    return m


def _proposals(regions: np.ndarray, dets: list[Detection], names: list[str | None], shapes: dict[str, Shape]):
    depth = np.full((240, 320), 2.0, np.float32)  # a wall 2 m away: 150 px per m
    return moving_proposals(_Regions(regions), 0, dets, names, shapes, depth, K, smooth_depth(depth), 1.6, 20)


def test_a_moving_region_is_proposed_once_and_only_for_an_unnamed_shape():
    cart = _box(100, 124, 100, 145)  # 0.30 x 0.16 m at 2 m
    cart_det = Detection(cart, CLASSES.index("box"), 0.9, np.eye(len(CLASSES))[CLASSES.index("box")] * 0.9)
    pole_a = _box(126, 200, 120, 125)  # 0.49 x 0.033 m, hanging from the cart (3 rows of it touch the cart)
    pole_b = _box(126, 138, 200, 205)  # another moving region, a short one (0.08 m), away from the cart
    shapes = {"cart": CART, "pole": POLE}
    out, seen = _proposals(pole_a | pole_b, [cart_det], ["cart"], shapes)
    # one proposal for the one unnamed shape: the region that fits the pole best. (A region thinner
    # than the pole costs the same at any length below the pole's, so the other is much shorter.)
    assert len(out) == 1 and out[0].mask.tolist() == pole_a.tolist()
    assert CLASSES[out[0].label] == "capsule" and out[0].score == PROPOSAL_SCORE
    assert abs(seen[0][0] - 0.49) < 0.03
    # the pole already named (even by a detection that does not move): nothing is proposed
    pole_det = Detection(pole_b, CLASSES.index("capsule"), 0.8, np.eye(len(CLASSES))[CLASSES.index("capsule")] * 0.8)
    assert _proposals(pole_a, [cart_det, pole_det], ["cart", "pole"], shapes) == ([], [])


def test_a_moving_rim_of_a_named_part_is_no_proposal():
    door = _box(40, 200, 100, 160)
    door_det = Detection(door, CLASSES.index("box"), 0.9, np.eye(len(CLASSES))[CLASSES.index("box")] * 0.9)
    rim = _box(40, 115, 161, 164)  # moving edge pixels the door's mask missed, the pole's size, 1-3 px beside it
    shapes = {"door": Shape("door", "box", size=(1.0, 0.4, 0.03)), "pole": POLE}
    assert _proposals(door | rim, [door_det], ["door"], shapes) == ([], [])
    # the same strip 10 px away from the door is a region of its own, proposed as the unnamed pole
    away = _box(40, 115, 170, 173)
    out, _ = _proposals(door | away, [door_det], ["door"], shapes)
    assert len(out) == 1 and out[0].mask.tolist() == away.tolist()


@pytest.mark.slow  # 3-4 min a recording on the shared 2-core machine at load 8 (each segmented twice)
@pytest.mark.parametrize("mechanism, scene, seed, frames", [("double_pendulum", "random", 23, 40),
                                                             ("cabinet", "default", 0, 60)])
def test_the_motion_cue_segments_the_frame_chosen_without_it(mechanism, scene, seed, frames, tmp_path):
    """Frames are ranked without motion, so the cue (``motion_samples``) changes names in the
    chosen frame, never which frame that is. Random scene 23 (320 x 240, RealSense-like, a
    table and a distractor): without the cue, and without the fallback to the next candidate
    frames (``fallback=0``), link2 is not found (``missing="allow"`` goes on without it); with
    the cue, link2 is named in the same frame. Without the cue but with the fallback, a later
    frame names at least as many shapes. The default-look cabinet: the moving door and drawer
    are named, so nothing is proposed beside them and no part is added."""
    rec_path = make_recording(mechanism, tmp_path / "rec", seed=seed, frames=frames, noise="realistic", scene=scene)
    off = run(SegmentConfig(missing="allow", fallback=0), open_recording(rec_path), tmp_path / "off")
    on = run(SegmentConfig(motion_samples=12), open_recording(rec_path), tmp_path / "on")
    fell = run(SegmentConfig(missing="allow"), open_recording(rec_path), tmp_path / "fell")
    assert on.frame == off.frame
    assert set(fell.shape_names) >= set(off.shape_names) and len(fell.shape_names) >= len(off.shape_names)
    assert len(set(on.shape_names)) == len(on.shape_names)  # no library shape twice
    truth = json.loads((rec_path / "truth.json").read_text())
    ids = cv2.imread(str(rec_path / "truth_masks" / f"{on.frame:06d}.png"), cv2.IMREAD_UNCHANGED)
    shapes = open_recording(rec_path).shapes
    for m, name in zip(on.masks.astype(bool), on.shape_names):  # each mask mostly over a body of its shape
        top = np.bincount(ids[m].ravel(), minlength=256).argmax()
        assert 0 < top <= len(truth["bodies"]), f"{name} on id {top}"
        assert shapes[truth["bodies"][top - 1]["shape"]].to_json() == shapes[name].to_json()
    assert sorted(on.shape_names) == sorted(b["shape"] for b in truth["bodies"])
