"""bench_push's pose scorer: rotation errors modulo the rotations a symmetric shape cannot show."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from scipy.spatial.transform import Rotation

from vid2sim.datasets.shapes import Shape

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from bench_push import pose_errors, rotation_error_deg, symmetry_axis  # noqa: E402

PUCK = Shape("puck", "cylinder", radius=0.04, length=0.04)
BOX = Shape("box", "box", size=(0.12, 0.08, 0.04))


def _T(rotvec, p=(0, 0, 0)):
    T = np.eye(4)
    T[:3, :3] = Rotation.from_rotvec(rotvec).as_matrix()
    T[:3, 3] = p
    return T


def test_spin_about_the_axis_scores_zero_and_a_tilt_its_angle():
    R0 = Rotation.from_rotvec([0.3, -0.2, 0.5]).as_matrix()      # the puck's pose at the last fitted frame
    axis = R0 @ symmetry_axis(PUCK)                              # its symmetry axis in the world
    spin = Rotation.from_rotvec(axis * np.radians(40)).as_matrix()
    assert rotation_error_deg(spin, np.eye(3)) == pytest.approx(40.0)     # raw: the spin counts
    assert rotation_error_deg(spin, np.eye(3), axis) == pytest.approx(0.0, abs=1e-6)
    tilt_dir = np.cross(axis, [1.0, 0, 0])
    tilt = Rotation.from_rotvec(tilt_dir / np.linalg.norm(tilt_dir) * np.radians(7)).as_matrix()
    assert rotation_error_deg(tilt @ spin, np.eye(3), axis) == pytest.approx(7.0, abs=1e-6)
    flip = Rotation.from_rotvec(tilt_dir / np.linalg.norm(tilt_dir) * np.radians(175)).as_matrix()
    assert rotation_error_deg(flip, np.eye(3), axis) == pytest.approx(5.0, abs=1e-6)   # end for end: 180 - 175
    assert rotation_error_deg(spin, np.eye(3), np.zeros(3)) == 0.0                   # a sphere
    assert symmetry_axis(BOX) is None and symmetry_axis(Shape("s", "sphere", radius=0.1)).tolist() == [0, 0, 0]


def test_pose_errors_apply_each_true_bodys_symmetry():
    """Two bodies predicted with the same 30-deg yaw error about world z: the upright puck's is
    spin (0 deg), the box's is not (30 deg); raw both 30."""
    W_at = np.stack([_T([0, 0, 0.2], (0, 0, 0.02)), _T([0, 0, 0.0], (0.3, 0, 0.02))])
    true = np.stack([W_at.copy()])
    W = np.stack([np.stack([_T([0, 0, 0.2 + np.radians(30)], (0.001, 0, 0.02)), _T([0, 0, np.radians(30)], (0.3, 0, 0.02))])])
    p, rot, raw = pose_errors(W, true, W_at, W_at, 0, [PUCK, BOX])
    assert p == pytest.approx(0.0005)
    assert rot == pytest.approx(15.0, abs=1e-6) and raw == pytest.approx(30.0, abs=1e-6)
