"""ROS1 ``.bag`` files (older SDKs, RealSense Viewer) through pyrealsense2 2.59 playback.

2.59 records only ROS2 .db3, so the test writes a ROS1 bag itself: the rosbag 2.0
container (chunks, per-connection index, chunk info) with the topics of
librealsense's file format version 3 (src/media/ros/ros_file_format.h), then reads
it back through ``open_recording``. Static device/stream information is stamped at
1 ns (rosbag rejects time 0; librealsense streams from 2 ns on), frames from 1 s.
"""
from __future__ import annotations


import numpy as np
import pytest

from vid2sim.datasets.errors import RecordingError
from vid2sim.datasets.realsense import BagRecording
from vid2sim.datasets.recording import open_recording

def test_ros1_bag_round_trip_exact(realsense_ros1_bag, tmp_path):
    rng = np.random.default_rng(3)
    depth = [rng.integers(300, 3000, (48, 64)).astype(np.uint16) for _ in range(5)]
    color = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(5)]
    rec = open_recording(realsense_ros1_bag(tmp_path / "old.bag", depth, color, depth_units=0.0001))
    assert isinstance(rec, BagRecording)
    assert rec.num_frames == 5 and rec.has_depth and rec.has_color
    cam = rec.camera
    assert (cam.width, cam.height, cam.fps) == (64, 48, 30.0)
    assert (cam.fx, cam.fy, cam.cx, cam.cy) == pytest.approx((50.0, 51.0, 31.5, 23.25))
    assert cam.depth_scale == pytest.approx(1e-4, rel=1e-9)
    for i in (0, 3, 1, 4):
        np.testing.assert_array_equal(rec.depth_raw(i), depth[i])
        np.testing.assert_array_equal(rec.color(i), color[i])
    rec.close()


@pytest.mark.parametrize("keep", [10, 5000, -100])
def test_truncated_ros1_bag_fails_naming_file(realsense_ros1_bag, tmp_path, keep):
    rng = np.random.default_rng(0)
    depth = [rng.integers(300, 3000, (48, 64)).astype(np.uint16) for _ in range(3)]
    color = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(3)]
    data = realsense_ros1_bag(tmp_path / "full.bag", depth, color).read_bytes()
    cut = tmp_path / "cut.bag"
    cut.write_bytes(data[:keep])
    with pytest.raises(RecordingError, match=r"cut\.bag: cannot be read as a RealSense recording \(truncated or corrupt\?\)"
                                             r".*rosbag reindex"):
        open_recording(cut)
