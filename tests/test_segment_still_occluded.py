"""A still surface something moves in front of has not moved itself (pipeline/segment_still.py)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording
from vid2sim.datasets.shapes import Shape
from vid2sim.pipeline.segment_still import MOVING_SHARE, DepthMotion, StillMotion, motion_shares


def _sweep(path: Path, n: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """A 160 x 120 depth recording with nothing behind: a still block at 2.0 m (a distractor
    behind the mechanism) and a bar 20 px wide at 1.5 m sweeping back and forth across it (an
    arm); the masks of the block and of the bar in frame 0, where the bar is beside the block."""
    cam = Camera(160, 120, 150.0, 150.0, 80.0, 60.0)
    block = np.zeros((120, 160), bool)
    block[40:100, 40:120] = True
    with RecordingWriter(path, cam, {"arm": Shape("arm", "capsule", radius=0.02, length=0.3)}) as w:
        for f in range(n):
            d = np.zeros((120, 160), np.float32)
            d[block] = 2.0
            x = int(round(20 + 110 * (1 - np.cos(2 * np.pi * f / n)) / 2))   # px: 20 at frame 0, 130 half-way
            d[30:110, x:x + 20] = 1.5
            w.add(d)
    bar = np.zeros((120, 160), bool)
    bar[30:110, 20:40] = True
    return block, bar


def test_a_still_block_an_arm_sweeps_in_front_of_counts_as_still(tmp_path):
    block, bar = _sweep(tmp_path / "rec")
    rec = open_recording(tmp_path / "rec")
    motion = StillMotion(rec, 1, 12)
    changed, valid, _ = motion.changed(0)
    every = motion_shares([block, bar], changed, valid)   # every change counted: the block "moves"
    assert every[0] >= MOVING_SHARE   # 0.19
    cue = motion.cues(0, [block, bar])
    assert cue.shares[0] == 0.0 and cue.shares[1] > 0.7
    assert cue.still().tolist() == [True, False]
    # the full cue keeps every change (a door swinging towards the camera shows nearer surfaces too)
    full = DepthMotion(rec, 1, 12).cues(0, [block, bar])
    assert full.shares[0] == every[0] and full.shares[1] == every[1]
