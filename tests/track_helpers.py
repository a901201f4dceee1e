"""Helpers of the track tests: a segmentation from a synthetic recording's truth masks, and the
cartpole's pose errors against its truth."""
from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np

from vid2sim.pipeline.artifacts import Segmentation

BOX_SYMMETRIES = [np.diag(d) for d in ((1, 1, 1), (1, -1, -1), (-1, 1, -1), (-1, -1, 1))]   # a box's turns onto itself


def seg_from_truth(path: Path, frame: int = 0) -> Segmentation:
    truth = json.loads((path / "truth.json").read_text())
    ids = cv2.imread(str(path / "truth_masks" / f"{frame:06d}.png"), cv2.IMREAD_UNCHANGED)
    names = [b["shape"] for b in truth["bodies"]]
    return Segmentation(np.stack([ids == i + 1 for i in range(len(names))]).astype(np.uint8), frame, names,
                        np.ones(len(names)))


def cartpole_errors(est: np.ndarray, truth: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Cartpole: body 0 a box, body 1 a capsule -> position error (T, 2) m, rotation error (T, 2) deg."""
    pos = np.linalg.norm(est[:, :, :3, 3] - truth[:, :, :3, 3], axis=-1)
    rot_box = np.min([np.degrees(np.arccos(np.clip((np.trace(np.einsum("tji,tjk->tik", truth[:, 0, :3, :3],
                                                                        est[:, 0, :3, :3] @ S), axis1=1, axis2=2) - 1) / 2,
                                                   -1, 1))) for S in BOX_SYMMETRIES], 0)
    axis = np.abs(np.einsum("ti,ti->t", est[:, 1, :3, 2], truth[:, 1, :3, 2]))
    return pos, np.stack([rot_box, np.degrees(np.arccos(np.clip(axis, -1, 1)))], 1)
