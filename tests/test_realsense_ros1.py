"""ROS1 ``.bag`` files (older SDKs, RealSense Viewer) through pyrealsense2 2.59 playback.

2.59 records only ROS2 .db3, so the test writes a ROS1 bag itself: the rosbag 2.0
container (chunks, per-connection index, chunk info) with the topics of
librealsense's file format version 3 (src/media/ros/ros_file_format.h), then reads
it back through ``open_recording``. Static device/stream information is stamped at
1 ns (rosbag rejects time 0; librealsense streams from 2 ns on), frames from 1 s.
"""
from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pyrealsense2")

from vid2sim.datasets.errors import RecordingError  # noqa: E402
from vid2sim.datasets.realsense import BagRecording  # noqa: E402
from vid2sim.datasets.recording import open_recording  # noqa: E402

# ROS1 type -> md5 (the values librealsense's bundled message headers check).
MD5 = {
    "std_msgs/UInt32": "304a39449588c7f8ce2df6e8001c5fce",
    "std_msgs/Float32": "73fcbf46b49191e672908e50842a83d4",
    "std_msgs/String": "992ce8a1687cec8c8bd883ec73ca41d1",
    "diagnostic_msgs/KeyValue": "cf57fdc6617a881a88c16e768132149c",
    "realsense_msgs/StreamInfo": "311d7e24eac31bb87271d041bf70ff7d",
    "sensor_msgs/CameraInfo": "c9a58c1b0b154e0e6da7578cb991d214",
    "sensor_msgs/Image": "060021388200f6f0f447d0fcd9c64743",
    "geometry_msgs/Transform": "ac9eff44abf714214112b05d54a3cf9b",
}


# ---- ROS1 message serialisation (little-endian; strings and arrays length-prefixed) ----
def _str(s: str) -> bytes:
    b = s.encode()
    return struct.pack("<I", len(b)) + b


def _time(ns: int) -> bytes:
    return struct.pack("<II", ns // 10**9, ns % 10**9)


def _header(seq: int, ns: int) -> bytes:
    return struct.pack("<I", seq) + _time(ns) + _str("")


def _camera_info(w: int, h: int, fx: float, fy: float, cx: float, cy: float) -> bytes:
    K = [fx, 0, cx, 0, fy, cy, 0, 0, 1]
    return (_header(0, 1) + struct.pack("<II", h, w) + _str("Brown Conrady") + struct.pack("<I5d", 5, *[0.0] * 5)
            + struct.pack("<9d", *K) + struct.pack("<9d", *np.eye(3).ravel()) + struct.pack("<12d", *[0.0] * 12)
            + struct.pack("<II", 0, 0) + struct.pack("<IIIIB", 0, 0, 0, 0, 0))


def _image(seq: int, ns: int, img: np.ndarray, encoding: str) -> bytes:
    h, w = img.shape[:2]
    data = np.ascontiguousarray(img).tobytes()
    return (_header(seq, ns) + struct.pack("<II", h, w) + _str(encoding) + struct.pack("<BI", 0, len(data) // h)
            + struct.pack("<I", len(data)) + data)


# ---- rosbag 2.0 container ----------------------------------------------------------
def _fields(fields: dict[str, bytes]) -> bytes:
    return b"".join(struct.pack("<I", len(k) + 1 + len(v)) + k.encode() + b"=" + v for k, v in fields.items())


def _record(fields: dict[str, bytes], data: bytes) -> bytes:
    head = _fields(fields)
    return struct.pack("<I", len(head)) + head + struct.pack("<I", len(data)) + data


def write_ros1_bag(path: Path, messages: list[tuple[str, str, int, bytes]]) -> Path:
    """messages: (topic, ROS1 type, time ns, serialised message), written as one chunk."""
    topics = list(dict.fromkeys(t for t, _, _, _ in messages))
    conn_id = {t: i for i, t in enumerate(topics)}
    types = {t: ty for t, ty, _, _ in messages}

    def conn_record(t: str) -> bytes:
        return _record({"op": b"\x07", "conn": struct.pack("<I", conn_id[t]), "topic": t.encode()},
                       _fields({"topic": t.encode(), "type": types[t].encode(), "md5sum": MD5[types[t]].encode(),
                                "message_definition": b""}))

    chunk, index = b"", {t: [] for t in topics}
    for t in topics:
        chunk += conn_record(t)
    for t, _, ns, msg in sorted(messages, key=lambda m: m[2]):
        index[t].append((ns, len(chunk)))
        chunk += _record({"op": b"\x02", "conn": struct.pack("<I", conn_id[t]), "time": _time(ns)}, msg)
    times = [ns for _, _, ns, _ in messages]
    chunk_rec = _record({"op": b"\x05", "compression": b"none", "size": struct.pack("<I", len(chunk))}, chunk)
    index_recs = b"".join(
        _record({"op": b"\x04", "ver": struct.pack("<I", 1), "conn": struct.pack("<I", conn_id[t]),
                 "count": struct.pack("<I", len(index[t]))}, b"".join(_time(ns) + struct.pack("<I", off) for ns, off in index[t]))
        for t in topics)
    magic = b"#ROSBAG V2.0\n"
    bag_header_len = 4096
    chunk_pos = len(magic) + bag_header_len
    index_pos = chunk_pos + len(chunk_rec) + len(index_recs)
    tail = b"".join(conn_record(t) for t in topics) + _record(
        {"op": b"\x06", "ver": struct.pack("<I", 1), "chunk_pos": struct.pack("<Q", chunk_pos),
         "start_time": _time(min(times)), "end_time": _time(max(times)), "count": struct.pack("<I", len(topics))},
        b"".join(struct.pack("<II", conn_id[t], len(index[t])) for t in topics))
    fields = {"op": b"\x03", "index_pos": struct.pack("<Q", index_pos), "conn_count": struct.pack("<I", len(topics)),
              "chunk_count": struct.pack("<I", 1)}
    head = _record(fields, b"")
    bag_header = _record(fields, b" " * (bag_header_len - len(head)))
    path.write_bytes(magic + bag_header + chunk_rec + index_recs + tail)
    return path


def realsense_ros1_bag(path: Path, depth: list[np.ndarray], color: list[np.ndarray], k=(50.0, 51.0, 31.5, 23.25),
                       depth_units: float = 0.001, fps: int = 30) -> Path:
    """A depth + colour recording in librealsense's ROS1 layout (file format version 3)."""
    h, w = depth[0].shape
    m = [("/file_version", "std_msgs/UInt32", 1, struct.pack("<I", 3)),
         ("/device_0/info", "diagnostic_msgs/KeyValue", 1, _str("Name") + _str("Software Device"))]
    for s, (name, stream, enc) in enumerate([("Stereo Module", "Depth", "mono16"), ("RGB Camera", "Color", "rgb8")]):
        pre = f"/device_0/sensor_{s}"
        m += [(f"{pre}/info", "diagnostic_msgs/KeyValue", 1, _str("Name") + _str(name)),
              (f"{pre}/{stream}_0/info", "realsense_msgs/StreamInfo", 1, struct.pack("<I", fps) + _str(enc) + b"\x01"),
              (f"{pre}/{stream}_0/info/camera_info", "sensor_msgs/CameraInfo", 1, _camera_info(w, h, *k)),
              (f"{pre}/{stream}_0/tf/0", "geometry_msgs/Transform", 1, struct.pack("<7d", 0, 0, 0, 0, 0, 0, 1))]
        if stream == "Depth":
            m += [(f"{pre}/option/Depth Units/value", "std_msgs/Float32", 1, struct.pack("<f", depth_units)),
                  (f"{pre}/option/Depth Units/description", "std_msgs/String", 1, _str("metres per depth unit"))]
    for i, (d, c) in enumerate(zip(depth, color)):
        ns = 10**9 + round(i * 1e9 / fps)
        m += [("/device_0/sensor_0/Depth_0/image/data", "sensor_msgs/Image", ns, _image(i, ns, d, "mono16")),
              ("/device_0/sensor_1/Color_0/image/data", "sensor_msgs/Image", ns, _image(i, ns, c, "rgb8"))]
    return write_ros1_bag(path, m)


def test_ros1_bag_round_trip_exact(tmp_path):
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
def test_truncated_ros1_bag_fails_naming_file(tmp_path, keep):
    rng = np.random.default_rng(0)
    depth = [rng.integers(300, 3000, (48, 64)).astype(np.uint16) for _ in range(3)]
    color = [rng.integers(0, 256, (48, 64, 3), dtype=np.uint8) for _ in range(3)]
    data = realsense_ros1_bag(tmp_path / "full.bag", depth, color).read_bytes()
    cut = tmp_path / "cut.bag"
    cut.write_bytes(data[:keep])
    with pytest.raises(RecordingError, match=r"cut\.bag: cannot be read as a RealSense recording \(truncated or corrupt\?\)"
                                             r".*rosbag reindex"):
        open_recording(cut)
