"""RGB video recordings: write an mp4 with cv2.VideoWriter, read it back."""
from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.real import real_data_dir
from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.video import T_WORLD_CAMERA_LEVEL, VideoRecording

RBO = real_data_dir() / "rbo_videos"


@pytest.fixture(scope="module")
def mp4(write_mp4, tmp_path_factory):
    return write_mp4(tmp_path_factory.mktemp("video") / "clip.mp4", n=12)


def test_mp4_round_trip(mp4_frame, mp4):
    rec = open_recording(mp4)
    assert isinstance(rec, VideoRecording)
    assert rec.num_frames == 12 and rec.has_color and not rec.has_depth
    assert rec.fps == pytest.approx(25.0)
    cam = rec.camera
    assert (cam.width, cam.height) == (96, 64)
    # The documented guess: fx = fy = width, principal point at the centre, level camera.
    assert (cam.fx, cam.fy, cam.cx, cam.cy) == (96.0, 96.0, 47.5, 31.5)
    np.testing.assert_array_equal(cam.world_from_camera, T_WORLD_CAMERA_LEVEL)
    for i, d, rgb in rec.frames():
        assert d is None and rgb.shape == (64, 48 * 2, 3) and rgb.dtype == np.uint8
        # mp4v is lossy: flat patches come back within a few grey levels.
        err = np.abs(rgb.astype(int) - mp4_frame(i).astype(int))
        assert np.median(err) <= 2 and np.percentile(err, 90) <= 8, (i, np.median(err))


def test_random_access_matches_sequential(mp4):
    rec = VideoRecording(mp4)
    seq = [rec.color(i) for i in range(rec.num_frames)]
    for i in (7, 2, 11, 0, 0, 5):
        np.testing.assert_array_equal(rec.color(i), seq[i])
    with pytest.raises(IndexError):
        rec.color(12)
    with pytest.raises(RecordingError, match="no depth"):
        rec.depth(0)
    rec.close()


def test_sidecar_camera(write_mp4, tmp_path):
    path = write_mp4(tmp_path / "clip.mp4", n=3)
    side = {"width": 96, "height": 64, "fx": 80.0, "fy": 81.0, "cx": 48.0, "cy": 30.0}
    (tmp_path / "clip.mp4.camera.json").write_text(json.dumps(side))
    cam = open_recording(path).camera
    assert (cam.fx, cam.fy, cam.cx, cam.cy, cam.fps) == (80.0, 81.0, 48.0, 30.0, pytest.approx(25.0))
    side["width"] = 100
    (tmp_path / "clip.mp4.camera.json").write_text(json.dumps(side))
    with pytest.raises(RecordingError, match=r"clip\.mp4\.camera\.json: says 100x64 but the video is 96x64"):
        open_recording(path)


def test_video_with_no_frames(tmp_path):
    empty = tmp_path / "empty.mp4"
    vw = cv2.VideoWriter(str(empty), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (32, 32))
    vw.release()
    with pytest.raises(RecordingError) as e:
        open_recording(empty)
    assert str(empty) in str(e.value)
    assert "no frames" in str(e.value) or "cannot be opened" in str(e.value)


def test_not_a_video(tmp_path):
    bad = tmp_path / "noise.mp4"
    bad.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with pytest.raises(RecordingError, match=r"noise\.mp4: "):
        open_recording(bad)


@pytest.mark.skipif(not RBO.is_dir(), reason="shared/data/real/rbo_videos not present")
@pytest.mark.parametrize("name, frames", [("cabinet01", 435), ("laptop01", 186), ("microwave01", 267)])
def test_rbo_videos_open(name, frames):
    """The RBO preview videos (640x480, 30 fps): exact decoded frame counts."""
    rec = open_recording(RBO / f"{name}.avi")
    assert rec.num_frames == frames
    assert (rec.camera.width, rec.camera.height, rec.fps) == (640, 480, pytest.approx(30.0))
    last = rec.color(frames - 1)
    assert last.shape == (480, 640, 3) and last.std() > 5  # a real picture, not a blank frame
