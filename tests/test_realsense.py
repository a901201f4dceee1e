"""RealSense .db3 round trips: written by conftest.write_bag (rs.software_device + rs.recorder), read back.

No camera is needed: the software device plays the role of the sensor, and
rs.recorder writes what it streams (pyrealsense2 2.59 writes ROS2 .db3 only).
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.realsense import BagRecording, pair_by_timestamp
from vid2sim.datasets.recording import open_recording
from vid2sim.datasets.video import T_WORLD_CAMERA_LEVEL


@pytest.fixture(scope="module")
def bag(write_bag, realsense_frames, tmp_path_factory):
    depth, color = realsense_frames()
    path = write_bag(tmp_path_factory.mktemp("rs") / "rec.db3", depth, color)
    return path, depth, color


def test_db3_round_trip_exact(bag):
    path, depth, color = bag
    rec = open_recording(path)
    assert isinstance(rec, BagRecording)
    assert rec.num_frames == len(depth) and rec.has_depth and rec.has_color
    cam = rec.camera
    assert (cam.width, cam.height) == (64, 48)
    assert (cam.fx, cam.fy, cam.cx, cam.cy) == pytest.approx((50.0, 51.0, 31.5, 23.25), abs=1e-5)
    assert cam.depth_scale == pytest.approx(0.001, rel=1e-9) and cam.fps == 30.0
    np.testing.assert_array_equal(cam.world_from_camera, T_WORLD_CAMERA_LEVEL)
    for i, d, rgb in rec.frames():
        np.testing.assert_array_equal(rec.depth_raw(i), depth[i])  # lossless PNG in the file: exact
        np.testing.assert_allclose(d, depth[i] * np.float32(0.001), rtol=1e-6)
        np.testing.assert_array_equal(rgb, color[i])
    rec.close()


def test_db3_random_access_backwards_and_skips(bag):
    path, depth, color = bag
    with BagRecording(path) as rec:
        for i in (4, 1, 5, 0, 0, 3, 2):
            np.testing.assert_array_equal(rec.depth_raw(i), depth[i])
            np.testing.assert_array_equal(rec.color(i), color[i])
        with pytest.raises(IndexError):
            rec.color(6)


def test_world_z_points_up():
    """The level-camera convention: camera y (down) is world -z, optical axis world +y."""
    R = T_WORLD_CAMERA_LEVEL[:3, :3]
    np.testing.assert_allclose(R @ [0, 1, 0], [0, 0, -1])
    np.testing.assert_allclose(R @ [0, 0, 1], [0, 1, 0])
    assert np.linalg.det(R) == pytest.approx(1.0)


def test_world_up_from_accelerometer(write_bag, realsense_frames, tmp_path):
    """Camera pitched 20 degrees down: the accelerometer's up fixes world z."""
    th = np.radians(20.0)
    up_cam = np.array([0.0, -np.cos(th), -np.sin(th)])
    depth, color = realsense_frames(n=4)
    path = write_bag(tmp_path / "imu.db3", depth, color, accel=[tuple(9.81 * up_cam)] * 4)
    with BagRecording(path) as rec:
        R = rec.camera.world_from_camera[:3, :3]
        np.testing.assert_allclose(R @ up_cam, [0, 0, 1], atol=1e-6)
        np.testing.assert_allclose(R @ [0, 0, 1], [0, np.cos(th), -np.sin(th)], atol=1e-6)  # looks forward and down
        np.testing.assert_allclose(R @ [1, 0, 0], [1, 0, 0], atol=1e-6)  # no roll
        np.testing.assert_array_equal(rec.depth_raw(3), depth[3])


def test_shaking_accelerometer_falls_back_to_level(write_bag, realsense_frames, tmp_path, caplog):
    depth, color = realsense_frames(n=4)
    shaky = [(0.0, -9.81, 0.0), (5.0, -3.0, 4.0), (-4.0, -14.0, 1.0), (0.0, -2.0, -6.0)]
    path = write_bag(tmp_path / "shaky.db3", depth, color, accel=shaky)
    with caplog.at_level("WARNING", logger="vid2sim.datasets.realsense"), BagRecording(path) as rec:
        np.testing.assert_array_equal(rec.camera.world_from_camera, T_WORLD_CAMERA_LEVEL)
    assert "camera not still; assuming a level camera" in caplog.text


def test_bgr_colour_and_sidecar_pose(write_bag, realsense_frames, tmp_path):
    depth, color = realsense_frames(n=2)
    bgr = [c[..., ::-1] for c in color]
    path = write_bag(tmp_path / "bgr.db3", depth, bgr, color_fmt="bgr8")
    T = np.eye(4)
    T[:3, 3] = [0.1, -0.2, 0.5]
    (tmp_path / "bgr.db3.camera.json").write_text('{"world_from_camera": %s}' % T.tolist())
    with BagRecording(path) as rec:
        np.testing.assert_array_equal(rec.color(1), color[1])
        np.testing.assert_array_equal(rec.camera.world_from_camera, T)


def test_unpaired_frames_are_skipped(write_bag, realsense_frames, tmp_path):
    """Depth starts two ticks before colour and drops tick 4: frames are the 4 complete ticks."""
    depth, color = realsense_frames(n=7)
    depth = [d if i != 4 else None for i, d in enumerate(depth)]
    color = [c if i >= 2 else None for i, c in enumerate(color)]
    path = write_bag(tmp_path / "gaps.db3", depth, color)
    with BagRecording(path) as rec:
        assert rec.num_frames == 4
        for i, tick in enumerate((2, 3, 5, 6)):
            np.testing.assert_array_equal(rec.depth_raw(i), depth[tick])
            np.testing.assert_array_equal(rec.color(i), color[tick])


def test_depth_only_recording(write_bag, realsense_frames, tmp_path):
    depth, _ = realsense_frames(n=3)
    path = write_bag(tmp_path / "d.db3", depth, [], depth_units=0.0001)
    with BagRecording(path) as rec:
        assert rec.has_depth and not rec.has_color and rec.num_frames == 3
        assert rec.camera.depth_scale == pytest.approx(1e-4, rel=1e-9)
        np.testing.assert_array_equal(rec.depth_raw(2), depth[2])
        with pytest.raises(RecordingError, match="no colour"):
            rec.color(0)


def test_depth_aligned_to_colour_geometry(write_bag, tmp_path):
    """Depth 64x48 and colour 80x60 with other intrinsics and a 2 cm baseline.

    A fronto-parallel plane at 1 m stays a plane at 1 m after alignment, so the
    aligned depth must read 1000 mm wherever it has a reading, in the colour size.
    """
    depth = [np.full((48, 64), 1000, np.uint16)] * 2
    color = [np.full((60, 80, 3), 128, np.uint8)] * 2
    path = write_bag(tmp_path / "align.db3", depth, color, depth_k=(50.0, 50.0, 31.5, 23.5),
                     color_k=(70.0, 70.0, 39.5, 29.5), t_depth_color=(0.02, 0.0, 0.0))
    with BagRecording(path) as rec:
        assert (rec.camera.width, rec.camera.height, rec.camera.fx) == (80, 60, pytest.approx(70.0))
        d = rec.depth_raw(1)
        assert d.shape == (60, 80)
        valid = d > 0
        assert np.all(d[valid] == 1000)
        # The depth image covers colour columns where u_c = 70/50*(u_d-31.5)+39.5 - 70*0.02/1.0, u_d in [0, 63].
        inner = valid[5:-5, 5:50]
        assert inner.mean() > 0.95, inner.mean()


def test_pair_by_timestamp_mutual_nearest():
    td = np.array([0.0, 33.3, 66.7, 100.0, 200.0])
    tc = np.array([34.0, 67.0, 101.0, 133.0])
    assert pair_by_timestamp(td, tc, tol_ms=16.7) == [(1, 0), (2, 1), (3, 2)]
    assert pair_by_timestamp(td, np.array([]), 16.7) == []


def test_damaged_image_in_db3_ends_that_stream_with_a_warning(write_bag, realsense_frames, tmp_path, caplog):
    """librealsense silently stops a stream at a frame it cannot decode: we say so."""
    import sqlite3

    depth, color = realsense_frames(n=12)
    path = write_bag(tmp_path / "damaged.db3", depth, color)
    with sqlite3.connect(path) as db:
        (mid, data), = db.execute("SELECT m.id, m.data FROM messages m JOIN topics t ON m.topic_id = t.id "
                                  "WHERE t.name LIKE '%Depth_0/image/data%' ORDER BY m.timestamp LIMIT 1 OFFSET 5")
        data = bytearray(data)
        data[200::7] = bytes(b ^ 0x5A for b in data[200::7])
        db.execute("UPDATE messages SET data = ? WHERE id = ?", (bytes(data), mid))
    with caplog.at_level("WARNING", logger="vid2sim.datasets.realsense"):
        rec = BagRecording(path)
    assert rec.num_frames == 5  # the frames before the damage are still usable
    np.testing.assert_array_equal(rec.depth_raw(4), depth[4])
    assert "may be damaged after that point" in caplog.text and str(path) in caplog.text
    rec.close()


@pytest.mark.parametrize("keep_bytes", [0, 100, 5000])
def test_truncated_db3_fails_naming_file(bag, tmp_path, keep_bytes):
    src = bag[0]
    bad = tmp_path / "trunc.db3"
    bad.write_bytes(src.read_bytes()[:keep_bytes])
    with pytest.raises(RecordingError) as e:
        open_recording(bad)
    assert str(bad) in str(e.value)
    assert "truncated or corrupt" in str(e.value) or "no frames" in str(e.value)


def test_db3_renamed_to_bag_goes_to_ros1_reader(bag, tmp_path):
    """.bag is read by librealsense's ROS1 reader, which rejects a ROS2 file clearly."""
    bad = tmp_path / "rec.bag"
    shutil.copy(bag[0], bad)
    with pytest.raises(RecordingError, match=r"rec\.bag: cannot be read as a RealSense recording"):
        open_recording(bad)


def test_reference_colour_frame_arriving_just_after_the_playback_stopped_is_waited_for():
    """The playback's status says stopped while its last colour frame is still in a dispatcher thread
    (seen once under a loaded parallel test run): wait_reference returns that frame instead of failing."""
    import threading
    import time

    from vid2sim.datasets import realsense

    pb = object.__new__(realsense._StreamPlayback)
    pb.reference, pb.path = None, "late.db3"
    pb._ended = lambda: True
    frame = object()
    threading.Timer(0.05, lambda: setattr(pb, "reference", frame)).start()
    t0 = time.monotonic()
    assert pb.wait_reference() is frame
    assert time.monotonic() - t0 < realsense.END_GRACE_S + 0.2


def test_no_reference_colour_frame_after_the_playback_stopped_is_one_error():
    from vid2sim.datasets import realsense

    pb = object.__new__(realsense._StreamPlayback)
    pb.reference, pb.path = None, "none.db3"
    pb._ended = lambda: True
    with pytest.raises(RecordingError, match="no colour frame to align depth to"):
        pb.wait_reference()
