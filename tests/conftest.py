"""Shared test fixtures: synthetic truth standing in for earlier stages, a double-pendulum
URDF, and writers of recordings in the formats the readers accept (mp4 video, RealSense
ROS2 .db3 and ROS1 .bag).

Helpers are fixtures (each returns its function or value), so test modules never import
one another.
"""
from __future__ import annotations

import struct
from pathlib import Path

import cv2
import numpy as np
import pyrealsense2 as rs
import pytest

from vid2sim.pipeline import export
from vid2sim.pipeline.artifacts import Articulation, JointPositions, PoseTracks, Posterior


# ----------------------------------------------------------------------------- truth inputs
def _truth_inputs(st, fps: float = 30.0):
    """(art, poses, jp, post) from a SyntheticTruth: truth joints, poses and parameters."""
    tr = st.truth
    art, poses = Articulation.from_truth(tr), PoseTracks.from_truth(tr, st.world_from_body, fps)
    names, q = export.joint_coordinates(art, poses)
    jp = JointPositions(q, names, export.root_poses(art, poses))
    p = tr["params"]
    post = Posterior(list(p), {k: (v, v) for k, v in p.items()}, dict(p), np.array([[p[k] for k in p]]), "truth", 0.0)
    return art, poses, jp, post


@pytest.fixture(scope="session")
def truth_inputs():
    """``truth_inputs(st, fps=30.0) -> (art, poses, jp, post)`` from a ``SyntheticTruth``."""
    return _truth_inputs


# ----------------------------------------------------------------------------- dynamics
DOUBLE_PENDULUM_URDF = """<robot name="dp"><link name="world"/>
<link name="l1"><inertial><origin xyz="0.02 0 -0.25"/><mass value="1.0"/>
 <inertia ixx="0.02" iyy="0.021" izz="0.004" ixy="0.001" ixz="0" iyz="0"/></inertial></link>
<link name="l2"><inertial><origin xyz="0 0.01 -0.2"/><mass value="0.6"/>
 <inertia ixx="0.01" iyy="0.011" izz="0.003" ixy="0" ixz="0.0005" iyz="0"/></inertial></link>
<joint name="j0" type="revolute"><parent link="world"/><child link="l1"/><origin xyz="0 0 1"/><axis xyz="0 1 0"/>
 <limit lower="-3" upper="3" effort="1" velocity="1"/></joint>
<joint name="j1" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0 0 -0.5" rpy="0.2 0 0"/>
 <axis xyz="0 1 0"/><limit lower="-3" upper="3" effort="1" velocity="1"/></joint></robot>"""


@pytest.fixture(scope="session")
def double_pendulum_urdf() -> str:
    """A two-link pendulum with off-axis centres of mass and products of inertia (URDF text)."""
    return DOUBLE_PENDULUM_URDF


# ----------------------------------------------------------------------------- mp4 video
def _frame(i: int, w: int = 96, h: int = 64) -> np.ndarray:
    """RGB frame with large flat patches (survives mp4v compression) tagged by i."""
    rgb = np.zeros((h, w, 3), np.uint8)
    rgb[..., 0] = 40 + 10 * i
    rgb[: h // 2, : w // 2, 1] = 200
    rgb[h // 2:, w // 2:, 2] = 150
    return rgb


def write_mp4(path: Path, n: int, fps: float = 25.0, w: int = 96, h: int = 64) -> Path:
    vw = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"mp4v"), fps, (w, h))
    assert vw.isOpened()
    for i in range(n):
        vw.write(cv2.cvtColor(_frame(i, w, h), cv2.COLOR_RGB2BGR))
    vw.release()
    return path


@pytest.fixture(scope="session")
def mp4_frame():
    """``mp4_frame(i, w=96, h=64)``: the RGB frame ``write_mp4`` writes at index i."""
    return _frame


@pytest.fixture(scope="session", name="write_mp4")
def write_mp4_fixture():
    """``write_mp4(path, n, fps=25.0, w=96, h=64) -> path``: an mp4v clip of ``mp4_frame``s."""
    return write_mp4


# ----------------------------------------------------------------------------- RealSense .db3 (ROS2)
def _intrinsics(w, h, fx, fy, cx, cy):
    i = rs.intrinsics()
    i.width, i.height, i.fx, i.fy, i.ppx, i.ppy = w, h, fx, fy, cx, cy
    i.model, i.coeffs = rs.distortion.none, [0.0] * 5
    return i


def _stream(kind, uid, intr, fmt, bpp, fps):
    s = rs.video_stream()
    s.type, s.index, s.uid = kind, 0, uid
    s.width, s.height, s.fps, s.bpp, s.fmt, s.intrinsics = intr.width, intr.height, fps, bpp, fmt, intr
    return s


def write_bag(path: Path, depth: list[np.ndarray | None], color: list[np.ndarray | None], *,
              depth_k=(50.0, 51.0, 31.5, 23.25), color_k=None, color_size=None,
              t_depth_color=(0.0, 0.0, 0.0), depth_units=0.001, fps=30, color_fmt="rgb8",
              accel: list[tuple[float, float, float]] | None = None) -> Path:
    """Record frames through a software device. depth[i] / color[i] None = no frame at tick i.

    depth: (H, W) uint16; color: (Hc, Wc, 3) uint8 in ``color_fmt``. Frame i gets
    timestamp i / fps on both streams.
    """
    h, w = next(d for d in depth if d is not None).shape if any(d is not None for d in depth) else (0, 0)
    c0 = next((c for c in color if c is not None), None)
    dev = rs.software_device()
    sensors, profiles = [], []
    if h:
        ds = dev.add_sensor("Depth")
        dp = ds.add_video_stream(_stream(rs.stream.depth, 0, _intrinsics(w, h, *depth_k), rs.format.z16, 2, fps))
        ds.add_read_only_option(rs.option.depth_units, depth_units)
        sensors.append(ds), profiles.append(dp)
    if c0 is not None:
        hc, wc = c0.shape[:2]
        cs = dev.add_sensor("Color")
        fmt = getattr(rs.format, color_fmt)
        cp = cs.add_video_stream(_stream(rs.stream.color, 1, _intrinsics(wc, hc, *(color_k or depth_k)), fmt, 3, fps))
        sensors.append(cs), profiles.append(cp)
    if len(profiles) == 2:
        ex = rs.extrinsics()
        ex.rotation, ex.translation = [1.0, 0, 0, 0, 1.0, 0, 0, 0, 1.0], list(t_depth_color)
        profiles[0].register_extrinsics_to(profiles[1], ex)
    if accel is not None:  # one accelerometer sample (m/s^2, IMU axes = camera axes) per tick
        ms = dev.add_sensor("Motion Module")
        m = rs.motion_stream()
        m.type, m.index, m.uid, m.fps, m.fmt = rs.stream.accel, 0, 2, fps, rs.format.motion_xyz32f
        m.intrinsics = rs.motion_device_intrinsic()
        mp = ms.add_motion_stream(m)
    dev.create_matcher(rs.matchers.default)
    recorder = rs.recorder(str(path), dev)
    if accel is not None:
        ms.open(mp)
        ms.start(lambda f: None)
    for s, p in zip(sensors, profiles):
        s.open(p)
        s.start(lambda f: None)
    keep = []  # the device reads the numpy buffers asynchronously
    streams = ([(sensors[0], profiles[0], depth, 2)] if h else []) + \
              ([(sensors[-1], profiles[-1], color, 3)] if c0 is not None else [])
    for i in range(max(len(depth), len(color))):
        for s, p, frames, bpp in streams:
            img = frames[i] if i < len(frames) else None
            if img is None:
                continue
            img = np.ascontiguousarray(img)
            keep.append(img)
            f = rs.software_video_frame()
            f.pixels, f.stride, f.bpp = img, img.shape[1] * bpp, bpp
            f.timestamp, f.domain, f.frame_number = i * 1000.0 / fps, rs.timestamp_domain.hardware_clock, i
            f.profile = p.as_video_stream_profile()
            s.on_video_frame(f)
        if accel is not None and i < len(accel):
            v = rs.vector()
            v.x, v.y, v.z = accel[i]
            keep.append(v)
            f = rs.software_motion_frame()
            f.data, f.timestamp, f.domain, f.frame_number = v, i * 1000.0 / fps, rs.timestamp_domain.hardware_clock, i
            f.profile = mp.as_motion_stream_profile()
            ms.on_motion_frame(f)
    for s in sensors + ([ms] if accel is not None else []):
        s.stop()
        s.close()
    del recorder, dev
    return path


def _realsense_frames(n=6, h=48, w=64, seed=0):
    rng = np.random.default_rng(seed)
    depth, color = [], []
    for i in range(n):
        d = rng.integers(300, 3000, (h, w)).astype(np.uint16)
        d[:3, :5] = 0  # holes survive the round trip
        d[-1, -1] = 1000 + i  # frame tag
        depth.append(d)
        color.append(rng.integers(0, 256, (h, w, 3), dtype=np.uint8))
    return depth, color


@pytest.fixture(scope="session", name="write_bag")
def write_bag_fixture():
    """``write_bag(path, depth, color, ...) -> path``: a .db3 recorded through a software device."""
    return write_bag


@pytest.fixture(scope="session")
def realsense_frames():
    """``realsense_frames(n=6, h=48, w=64, seed=0) -> (depth, color)``: random tagged frames."""
    return _realsense_frames


# ----------------------------------------------------------------------------- RealSense .bag (ROS1)
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


@pytest.fixture(scope="session", name="realsense_ros1_bag")
def realsense_ros1_bag_fixture():
    """``realsense_ros1_bag(path, depth, color, ...) -> path``: librealsense's ROS1 layout."""
    return realsense_ros1_bag
