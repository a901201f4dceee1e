"""actuation.npz (docs/formats.md §1.2): read, written, validated; errors name the file.

The synthetic ``pushed`` recording's actuator is checked against the generator's own
truth (``truth_poses.npz``'s tip_position) and against the rendered tip pixels.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vid2sim.datasets.actuation import Actuation, load_actuation
from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.recording import Camera, RecordingWriter, open_recording, write_first_frames
from vid2sim.datasets.shapes import Shape

W, H, N = 40, 30, 4
SHAPES = {"link": Shape("link", "box", size=(0.2, 0.05, 0.03)),
          "tip": Shape("tip", "cylinder", radius=0.015, length=0.06)}


def _poses(t: int, a: int = 1) -> np.ndarray:
    P = np.tile(np.eye(4), (t, a, 1, 1))
    P[:, :, :3, 3] = np.linspace(0, 0.1, t)[:, None, None] * [0, 1, 0] + [0.05, -0.2, 0.03]
    return P


def _recording(path: Path, act: Actuation | None = None) -> Path:
    cam = Camera(width=W, height=H, fx=35.0, fy=36.0, cx=19.5, cy=14.5, world_from_camera=np.eye(4))
    with RecordingWriter(path, cam, SHAPES) as w:
        for _ in range(N):
            w.add(np.full((H, W), 0.8))
        if act is not None:
            w.add_file("actuation.npz", act.to_bytes())
    return path


def test_round_trip_through_a_recording(tmp_path):
    effort = np.arange(2 * (N + 3), dtype=float).reshape(N + 3, 2)
    act = Actuation(("pusher",), ("tip",), _poses(N + 3), effort, ("a_to_b", "b_to_c"))
    rec = open_recording(_recording(tmp_path / "rec", act))
    got = rec.actuation
    assert got.names == ("pusher",) and got.shapes == ("tip",) and got.effort_joints == ("a_to_b", "b_to_c")
    np.testing.assert_array_equal(got.world_from_actuator, act.world_from_actuator)
    np.testing.assert_array_equal(got.joint_effort, effort)
    assert got.num_frames == N + 3
    np.testing.assert_allclose(got.positions()[-1], [0.05, -0.1, 0.03])
    np.testing.assert_array_equal(got.poses(100), got.world_from_actuator[-1])   # past the end: held
    # a clip cut in time keeps every row: past the cut they are the planned motion
    cut = open_recording(write_first_frames(rec, tmp_path / "cut", 2))
    assert cut.num_frames == 2 and cut.actuation.num_frames == N + 3
    np.testing.assert_array_equal(cut.actuation.world_from_actuator, act.world_from_actuator)
    # save() to a folder writes actuation.npz there
    act.save(tmp_path / "rec")
    assert load_actuation(tmp_path / "rec").num_frames == N + 3


def test_no_actuation_file_means_none(tmp_path):
    assert open_recording(_recording(tmp_path / "rec")).actuation is None


def _bad(tmp_path, **arrays) -> str:
    rec = tmp_path / "rec"
    if not rec.exists():
        _recording(rec)
    np.savez(rec / "actuation.npz", **arrays)
    with pytest.raises(RecordingError) as e:
        open_recording(rec)
    assert e.value.path == rec / "actuation.npz"
    return e.value.problem


def test_malformed_files_name_the_file_and_the_problem(tmp_path):
    ok = dict(names=np.array(["pusher"]), shapes=np.array(["tip"]), world_from_actuator=_poses(N))
    assert "missing key(s) world_from_actuator" in _bad(tmp_path, names=ok["names"], shapes=ok["shapes"])
    assert "must be [T, 1, 4, 4], got [4, 4, 4]" in _bad(tmp_path, **dict(ok, world_from_actuator=_poses(N)[:, 0]))
    assert "3 rows but the recording has 4 frames" in _bad(tmp_path, **dict(ok, world_from_actuator=_poses(3)))
    skew = _poses(N)
    skew[2, 0, 0, 1] = 0.5
    assert "world_from_actuator[2, 0] is not a rigid transform" in _bad(tmp_path, **dict(ok, world_from_actuator=skew))
    nan = _poses(N)
    nan[1, 0, 0, 3] = np.nan
    assert "non-finite" in _bad(tmp_path, **dict(ok, world_from_actuator=nan))
    assert "shape(s) gripper are not in shapes.json" in _bad(tmp_path, **dict(ok, shapes=np.array(["gripper"])))
    assert "shapes has 2 entries but names has 1" in _bad(tmp_path, **dict(ok, shapes=np.array(["tip", "tip"])))
    assert "come together" in _bad(tmp_path, **dict(ok, joint_effort=np.zeros((N, 1))))
    assert "joint_effort must be [T=4, D=1]" in _bad(tmp_path, **dict(ok, joint_effort=np.zeros((N, 2)),
                                                                       effort_joints=np.array(["j"])))
    assert "unknown key(s) tip_force" in _bad(tmp_path, **dict(ok, tip_force=np.zeros(3)))
    assert "1-D array of strings" in _bad(tmp_path, **dict(ok, names=np.array([1.0])))
    rec = tmp_path / "rec"
    (rec / "actuation.npz").write_bytes(b"not a zip")
    with pytest.raises(RecordingError, match=r"actuation.npz: cannot be read as an npz archive"):
        open_recording(rec)


def test_cli_names_a_bad_actuation_file(tmp_path):
    rec = _recording(tmp_path / "rec")
    np.savez(rec / "actuation.npz", names=np.array(["pusher"]), shapes=np.array(["gripper"]),
             world_from_actuator=_poses(N))
    r = subprocess.run([sys.executable, "-m", "vid2sim.pipeline.cli", "inspect", str(rec)],
                       capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "actuation.npz: actuator shape(s) gripper are not in shapes.json" in lines[0]
    assert "Traceback" not in r.stderr


def test_synthetic_pushed_carries_its_pusher(tmp_path):
    """The actuator's poses are the generator's tip positions, its shape the tip's cylinder,
    and it projects onto the pixels the renderer marked as the tip."""
    from vid2sim.datasets.synthetic import TIP_ID, make_recording

    out = make_recording("pushed", tmp_path / "rec", frames=6, size=(160, 120))
    rec = open_recording(out)
    act = rec.actuation
    truth = np.load(out / "truth_poses.npz")
    np.testing.assert_allclose(act.positions(), truth["tip_position"], atol=1e-12)
    np.testing.assert_allclose(act.world_from_actuator[:, 0, :3, :3], np.tile(np.eye(3), (6, 1, 1)))
    tip = rec.shapes[act.shapes[0]]
    assert (tip.type, tip.radius, tip.length) == ("cylinder", 0.015, 0.06)
    for k in (0, 5):
        ids = cv2.imread(str(out / "truth_masks" / f"{k:06d}.png"), cv2.IMREAD_UNCHANGED)
        v, u = np.nonzero(ids == TIP_ID)
        top = act.positions()[k] + [0, 0, 0.03]                         # centre of the visible top face
        uv, _ = rec.camera.project(top)
        assert abs(u.mean() - uv[0]) < 3 and abs(v.mean() - uv[1]) < 4, (u.mean(), v.mean(), uv)


def test_an_effort_only_file_has_no_actuator_but_a_known_joint_effort(tmp_path):
    """A motor's torque with no tool in view: zero actuators, the effort rows kept; an empty file is refused."""
    effort = np.linspace(-0.2, 0.3, N)[:, None]
    got = open_recording(_recording(tmp_path / "rec", Actuation((), (), np.zeros((N, 0, 4, 4)), effort,
                                                                ("world_to_arm",)))).actuation
    assert got.names == () and got.effort_joints == ("world_to_arm",)
    np.testing.assert_array_equal(got.joint_effort, effort)
    empty = dict(names=np.array([], dtype=str), shapes=np.array([], dtype=str), world_from_actuator=np.zeros((N, 0, 4, 4)))
    assert "names is empty and there is no joint_effort" in _bad(tmp_path / "b", **empty)
